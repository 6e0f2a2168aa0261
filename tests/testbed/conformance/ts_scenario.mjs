// Conformance scenario with the official, unmodified TypeScript SDK
// (@alibaba-group/opensandbox 0.1.11, see package.json / package-lock.json).
//
//   node ts_scenario.mjs --mode direct|proxy
//
// Reads OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY like the SDK itself.
// Exits non-zero with a message at the first mismatch.

import net from "node:net";
import {
  ConnectionConfig,
  Sandbox,
  SandboxApiException,
  SandboxManager,
} from "@alibaba-group/opensandbox";

const modeArg = process.argv.indexOf("--mode");
const MODE = modeArg > 0 ? process.argv[modeArg + 1] : "direct";
if (!["direct", "proxy"].includes(MODE)) {
  console.error(`bad --mode ${MODE}`);
  process.exit(2);
}
const DOMAIN = process.env.OPEN_SANDBOX_DOMAIN ?? "localhost:8080";
// `testbed check --docker` sets docker: sandboxes are containers of the image (cwd /, HOME /root).
const TIER = process.env.TESTBED_TIER ?? "local";

class Mismatch extends Error {}

function check(cond, what) {
  if (!cond) throw new Mismatch(what);
  console.log(`  ok  ${what}`);
}

// Same joining rule as the Python SDK's _format_output_messages: events may or may not
// carry their line terminator; add one between two events only when neither has it.
function joinOut(messages) {
  let out = "";
  let last = "";
  for (const m of messages) {
    const t = m.text ?? "";
    if (t && last && !"\r\n".includes(last) && !"\r\n".includes(t[0])) out += "\n";
    out += t;
    if (t) last = t[t.length - 1];
  }
  return out.replace(/\r\n/g, "\n").replace(/\r/g, "\n").replace(/\n+$/, "");
}

const stdoutOf = (ex) => joinOut(ex.logs.stdout);
const stderrOf = (ex) => joinOut(ex.logs.stderr);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const connectionConfig = () =>
  new ConnectionConfig({ useServerProxy: MODE === "proxy", requestTimeoutSeconds: 60 });

async function expectApiError(promise, status, what) {
  try {
    await promise;
  } catch (err) {
    check(err instanceof SandboxApiException && err.statusCode === status,
      `${what} (${status}, got ${err?.statusCode ?? err})`);
    return;
  }
  throw new Mismatch(`${what}: no error`);
}

const FAILURES = [];

async function section(name, fn, ctx) {
  console.log(name);
  try {
    await fn(ctx);
  } catch (err) {
    if (err instanceof Mismatch) {
      console.log(`  MISMATCH ${err.message}`);
      FAILURES.push(`${name}: ${err.message}`);
    } else {
      console.log(`  ERROR ${err?.stack ?? err}`);
      FAILURES.push(`${name}: ${err?.name}: ${err?.message}`);
    }
  }
}

async function partInfo({ sandbox }) {
  const info = await sandbox.getInfo();
  check(info.status.state === "Running", `getInfo state Running (${info.status.state})`);
  check(info.image?.uri === "python:3.11", `image python:3.11 (${JSON.stringify(info.image)})`);
  check(JSON.stringify(info.entrypoint) === JSON.stringify(["tail", "-f", "/dev/null"]), "default entrypoint");
  check(info.metadata?.suite === "ts-sdk" && info.metadata?.mode === MODE, `metadata ${JSON.stringify(info.metadata)}`);
  check(info.expiresAt instanceof Date, "expiresAt set");
  const ep = await sandbox.getEndpoint(44772);
  if (MODE === "proxy") {
    check(ep.endpoint === `${DOMAIN}/v1/sandboxes/${sandbox.id}/proxy/44772`, `server proxy endpoint ${ep.endpoint}`);
  } else {
    check(/^127\.0\.0\.1:\d+\/proxy\/44772$/.test(ep.endpoint), `bridge endpoint ${ep.endpoint}`);
  }
}

async function partCommands(ctx) {
  const { sandbox } = ctx;
  let ex = await sandbox.commands.run('echo "$FOO|$OPENSANDBOX_ID"; pwd; echo "$HOME"');
  const lines = [...stdoutOf(ex).split("\n"), "", "", ""];
  ctx.home = lines[2];
  ctx.base = `${ctx.home}/tsfiles`;
  check(lines[0] === `bar baz|${sandbox.id}`, `create env reaches commands (${lines[0]})`);
  if (TIER === "docker") {
    check(lines[1] === "/" && lines[2] === "/root", `cwd / and HOME /root, the image's (${lines[1]}, ${lines[2]})`);
  } else {
    check(lines[1] === lines[2] && lines[1].endsWith(sandbox.id), `cwd = HOME = sandbox folder (${lines[1]})`);
  }

  const inits = [];
  let stdoutEvents = 0;
  ex = await sandbox.commands.run("echo hello; echo oops >&2; printf 'no newline'", undefined, {
    onInit: (i) => { inits.push(i); },
    onStdout: () => { stdoutEvents += 1; },
  });
  check(ex.exitCode === 0 && !ex.error, `exit code 0 (got ${ex.exitCode}, ${JSON.stringify(ex.error)})`);
  check(stdoutOf(ex) === "hello\nno newline", `stdout ${JSON.stringify(stdoutOf(ex))}`);
  check(stderrOf(ex) === "oops", `stderr ${JSON.stringify(stderrOf(ex))}`);
  check(Boolean(ex.id) && inits.length === 1 && inits[0].id === ex.id, "init event carries the id");
  check(stdoutEvents >= 1, "onStdout called");
  check(Boolean(ex.complete), "execution_complete received");

  ex = await sandbox.commands.run("echo out; echo err >&2; exit 7");
  check(ex.exitCode === 7, `failing command exit code 7 (got ${ex.exitCode})`);
  check(ex.error?.name === "CommandExecError" && ex.error?.value === "7", `error ${JSON.stringify(ex.error)}`);
  check(stdoutOf(ex) === "out" && stderrOf(ex) === "err", "output of a failing command");

  ex = await sandbox.commands.run('echo "$X"; pwd', { envs: { X: "from-opts" }, workingDirectory: "/tmp" });
  check(stdoutOf(ex) === "from-opts\n/tmp", `envs + workingDirectory (${JSON.stringify(stdoutOf(ex))})`);
}

async function partTimeout({ sandbox }) {
  const started = Date.now();
  const ex = await sandbox.commands.run("sleep 10", { timeoutSeconds: 1 });
  check(Date.now() - started < 8000, "timeout ends the command early");
  check(ex.exitCode !== 0 && Boolean(ex.error), `timed-out command fails (${ex.exitCode}, ${JSON.stringify(ex.error)})`);
}

async function partBackground({ sandbox }) {
  const bg = await sandbox.commands.run("for i in 1 2 3; do echo line$i; sleep 0.2; done; sleep 60", {
    background: true,
  });
  check(Boolean(bg.id), `background run returns an id (${bg.id})`);
  let st = await sandbox.commands.getCommandStatus(bg.id);
  check(st.running === true, `status running (${JSON.stringify(st)})`);
  let logs;
  for (let i = 0; i < 50; i++) {
    logs = await sandbox.commands.getBackgroundCommandLogs(bg.id);
    if (logs.content.includes("line3")) break;
    await sleep(200);
  }
  check(logs.content.split("\n").slice(0, 3).join(",") === "line1,line2,line3", `background logs ${JSON.stringify(logs.content)}`);
  check(typeof logs.cursor === "number", `logs cursor ${logs.cursor}`);
  const more = await sandbox.commands.getBackgroundCommandLogs(bg.id, logs.cursor);
  check(more.content === "", `nothing new after the cursor (${JSON.stringify(more.content)})`);
  await sandbox.commands.interrupt(bg.id);
  for (let i = 0; i < 50; i++) {
    st = await sandbox.commands.getCommandStatus(bg.id);
    if (!st.running) break;
    await sleep(200);
  }
  check(st.running === false, `interrupt stops it (${JSON.stringify(st)})`);
}

async function partFiles(ctx) {
  const { sandbox, base, binary } = ctx;
  check(Boolean(ctx.home), "sandbox home known");
  const text = "héllo\nwörld\n";
  await sandbox.files.writeFiles([
    { path: `${base}/a.txt`, data: text, mode: 644 },
    { path: `${base}/bin.dat`, data: binary, mode: 600 },
  ]);
  check((await sandbox.files.readFile(`${base}/a.txt`)) === text, "write/read text (utf-8)");
  const back = await sandbox.files.readBytes(`${base}/bin.dat`);
  check(Buffer.from(back).equals(Buffer.from(binary)), `write/read binary (${binary.length} bytes, got ${back.length})`);
  const part = await sandbox.files.readBytes(`${base}/bin.dat`, { range: "bytes=1-3" });
  check(Buffer.from(part).equals(Buffer.from([1, 2, 3])), "read with Range");
  const infos = await sandbox.files.getFileInfo([`${base}/a.txt`, `${base}/bin.dat`]);
  const a = infos[`${base}/a.txt`];
  const b = infos[`${base}/bin.dat`];
  check(a?.size === Buffer.byteLength(text) && a?.mode === 644, `info a.txt (${a?.size}, ${a?.mode})`);
  check(b?.size === binary.length && b?.mode === 600, `info bin.dat (${b?.size}, ${b?.mode})`);
  const found = await sandbox.files.search({ path: base, pattern: "*.txt" });
  check(found.map((f) => f.path).join() === `${base}/a.txt`, `search *.txt (${found.map((f) => f.path)})`);
  await sandbox.files.createDirectories([{ path: `${base}/sub/deeper`, mode: 755 }]);
  let listed = await sandbox.files.listDirectory({ path: base, depth: 1 });
  const names = listed.map((f) => f.path).sort();
  check([`${base}/a.txt`, `${base}/bin.dat`, `${base}/sub`].every((n) => names.includes(n)), `listDirectory (${names})`);
  const kinds = Object.fromEntries(listed.map((f) => [f.path, f.type]));
  check(kinds[`${base}/sub`] === "directory" && kinds[`${base}/a.txt`] === "file", `listDirectory entry types (${JSON.stringify(kinds)})`);
  await sandbox.files.deleteDirectories([`${base}/sub`]);
  listed = await sandbox.files.listDirectory({ path: base, depth: 1 });
  check(!listed.some((f) => f.path === `${base}/sub`), "deleteDirectories removes the tree");
  await sandbox.files.moveFiles([{ src: `${base}/a.txt`, dest: `${base}/b.txt` }]);
  check((await sandbox.files.readFile(`${base}/b.txt`)) === text, "move keeps the content");
  await sandbox.files.deleteFiles([`${base}/b.txt`]);
  await expectApiError(sandbox.files.getFileInfo([`${base}/b.txt`]), 404, "deleted file is gone");
}

async function partPort(ctx) {
  const { sandbox } = ctx;
  const port = await freePort();
  await sandbox.commands.run(`exec python3 -m http.server ${port} --bind 127.0.0.1 --directory ${ctx.base}`, {
    background: true,
  });
  const ep = await sandbox.getEndpoint(port);
  const url = `http://${ep.endpoint}/bin.dat`;
  let resp;
  for (let i = 0; i < 50; i++) {
    try {
      resp = await fetch(url, { headers: ep.headers ?? {} });
      if (resp.status === 200) break;
    } catch {
      // not up yet
    }
    await sleep(200);
  }
  const body = resp ? Buffer.from(await resp.arrayBuffer()) : Buffer.alloc(0);
  check(resp?.status === 200 && body.equals(Buffer.from(ctx.binary)), `GET ${url} through the endpoint (${resp?.status})`);
}

async function partPause(ctx) {
  const { sandbox } = ctx;
  await sandbox.pause();
  let info = await sandbox.getInfo();
  check(info.status.state === "Paused", `paused (${info.status.state})`);
  // The returned instance shares this sandbox's connection config (and transport).
  const resumed = await sandbox.resume();
  info = await resumed.getInfo();
  check(info.status.state === "Running", "resume -> Running");
  let ex = await resumed.commands.run("echo back");
  check(stdoutOf(ex) === "back", "commands work after resume");
  const connected = await Sandbox.connect({ sandboxId: sandbox.id, connectionConfig: connectionConfig() });
  try {
    ex = await connected.commands.run(`test -d ${ctx.home} && echo kept`);
    check(stdoutOf(ex) === "kept", "Sandbox.connect sees the same sandbox");
  } finally {
    await connected.close();
  }
}

async function partRenew({ sandbox }) {
  const before = Date.now();
  const renewed = await sandbox.renew(30 * 60);
  const delta = renewed.expiresAt.getTime() - before;
  check(delta > 29 * 60e3 && delta < 31 * 60e3, `renew +30 min (${renewed.expiresAt.toISOString()})`);
  const info = await sandbox.getInfo();
  check(Math.abs(info.expiresAt.getTime() - renewed.expiresAt.getTime()) < 1000, "getInfo shows the renewed expiry");
}

async function partManager({ sandbox }) {
  const manager = SandboxManager.create({ connectionConfig: connectionConfig() });
  try {
    const page = await manager.listSandboxInfos({ metadata: { suite: "ts-sdk", mode: MODE } });
    check(page.items.map((s) => s.id).join() === sandbox.id, "list by metadata finds it");
    await manager.patchSandboxMetadata(sandbox.id, { mode: null, extra: "1" });
    const info = await manager.getSandboxInfo(sandbox.id);
    check(JSON.stringify(info.metadata) === JSON.stringify({ suite: "ts-sdk", extra: "1" }), `patch metadata (${JSON.stringify(info.metadata)})`);
  } finally {
    await manager.close();
  }
}

async function partKill({ sandbox }) {
  await sandbox.kill();
  await expectApiError(sandbox.getInfo(), 404, "killed sandbox is gone");
}

function binaryPayload() {
  const binary = new Uint8Array(256 * 64 + 4);
  for (let i = 0; i < 256 * 64; i++) binary[i] = i % 256;
  binary.set([0x00, 0x0d, 0x0a, 0xff], 256 * 64);
  return binary;
}

async function main() {
  console.log(`ts sdk scenario, mode=${MODE}, server=${DOMAIN}`);
  console.log("create");
  const sandbox = await Sandbox.create({
    connectionConfig: connectionConfig(),
    image: "python:3.11",
    env: { FOO: "bar baz" },
    metadata: { suite: "ts-sdk", mode: MODE },
    timeoutSeconds: 300,
  });
  check(Boolean(sandbox.id), `Sandbox.create returned id ${sandbox.id}`);
  const ctx = { sandbox, home: "", base: "", binary: binaryPayload() };
  try {
    await section("getInfo / endpoint", partInfo, ctx);
    await section("commands", partCommands, ctx);
    await section("command timeout", partTimeout, ctx);
    await section("background command", partBackground, ctx);
    await section("files", partFiles, ctx);
    await section("endpoint of a sandbox port", partPort, ctx);
    await section("pause / resume / connect", partPause, ctx);
    await section("renew", partRenew, ctx);
    await section("manager: list / patch metadata", partManager, ctx);
    await section("kill", partKill, ctx);
  } finally {
    try {
      await sandbox.kill();
    } catch {
      // already gone
    }
    await sandbox.close();
  }
}

main().then(
  () => {
    if (FAILURES.length) {
      console.error(`ts sdk (${MODE}): ${FAILURES.length} part(s) failed:`);
      for (const f of FAILURES) console.error(`  - ${f}`);
      process.exitCode = 1;
    } else {
      console.log(`ts sdk (${MODE}): all checks passed`);
    }
  },
  (err) => {
    console.error(err);
    console.error(`ERROR (ts sdk, ${MODE}): create failed: ${err?.message}`);
    process.exitCode = 1;
  },
);
