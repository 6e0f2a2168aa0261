// The released provider in a second WebAssembly host: Node.js through jco.
//
// tests/jco/run transpiles dist/opensandbox.wasm (the signed release artifact,
// unchanged) with `jco transpile --instantiation async` and runs this script.
// Here we are the host: the import object below decides what the component may
// do, as epp-host does under wasmtime. WASI comes from
// @bytecodealliance/preview2-shim, except
//   - wasi:cli/environment: the provider's settings only (the shim's default is
//     the whole process.env; its `cli._setEnv` would replace that process-wide),
//   - wasi:http/outgoing-handler: the shim's handler behind an allowlist,
//   - abx:epp/memo: a Map with TTLs,
//   - abx:epp/websocket: unavailable, every call answers a clear error.
// Unlike epp-host this host hands the API key to the provider (the guest then
// sends the header itself), and it enforces no memory, CPU or time limits.
//
// The shim performs HTTP synchronously on a worker thread (Atomics.wait), so a
// call into the component blocks this thread: the testbed must run in another
// process, which it does.
//
// Usage: node run.mjs --component <dir>/opensandbox.js --wasm dist/opensandbox.wasm
//        --manifest dist/provider.json   (EPP_TESTBED_URL, EPP_TESTBED_KEY set)
// Prints one line per check and `jco: N passed, M failed`; exits 1 on failure.

import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { cli, clocks, http, io, random } from "@bytecodealliance/preview2-shim";

export const WEBSOCKET_UNAVAILABLE =
  "WebSocket is not available under jco: terminals (pty.*) need epp-host";

/** EPP wire codes of the WIT `error-code` cases (wit/types.wit). */
const EPP_CODES = {
  "invalid-argument": "E1001",
  configuration: "E2001",
  "credentials-rejected": "E2002",
  "not-found": "E4004",
  conflict: "E4009",
  upstream: "E5001",
  unreachable: "E5003",
  "timed-out": "E5004",
  "denied-by-policy": "E6001",
  unsupported: "E8004",
  "provider-fault": "E9001",
};

// ------------------------------------------------------------------ the host

/** `host[:port]` of an authority, or null for anything with userinfo or garbage. */
function splitAuthority(authority, scheme) {
  const text = (authority ?? "").toLowerCase();
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(\d{1,5}))?$/.exec(text);
  if (!m) return null;
  const port = m[2] ? Number(m[2]) : scheme === "https" ? 443 : 80;
  return { host: m[1].replace(/\.$/, ""), port };
}

/**
 * wasi:http/outgoing-handler that lets a request through only to `allowedHost`
 * (the testbed's host, any port: direct-mode sandbox endpoints live there, as
 * in epp-host's policy). Everything else gets `HTTP-request-denied` before any
 * connection is attempted; the guest reports that as E6001.
 */
export function allowlistedHttp(inner, allowedHost, log) {
  return {
    handle(request, options) {
      const tag = request.scheme()?.tag;
      const scheme = tag === "HTTP" ? "http" : tag === "HTTPS" ? "https" : null;
      const dest = scheme && splitAuthority(request.authority(), scheme);
      if (!dest || dest.host !== allowedHost) {
        log.push(`${scheme ?? "?"}://${request.authority() ?? ""}`);
        throw { tag: "HTTP-request-denied" };
      }
      return inner.handle(request, options);
    },
  };
}

/** abx:epp/memo: bounded, entries expire after their TTL. */
export function memo(maxEntries = 1024) {
  const entries = new Map();
  return {
    get(key) {
      const e = entries.get(key);
      if (e && e.expires > Date.now()) return e.value;
      entries.delete(key);
      return undefined;
    },
    put(key, value, ttlMs) {
      entries.delete(key);
      if (entries.size >= maxEntries) entries.delete(entries.keys().next().value);
      entries.set(key, { value, expires: Date.now() + ttlMs });
    },
    forget(key) {
      entries.delete(key);
    },
  };
}

/** abx:epp/websocket: Node has no host-side WebSocket registry here. */
const unavailable = () => {
  // A thrown non-Error value becomes the `err` of the import's result.
  throw { code: "unsupported", message: WEBSOCKET_UNAVAILABLE };
};
export const noWebSocket = {
  connect: unavailable,
  send: unavailable,
  receive: unavailable,
  close() {},
  isOpen: () => false,
};

/** The import object for one instance with `env` as its whole environment. */
export function imports({ env, allowedHost, denied }) {
  return {
    "wasi:cli/environment": {
      getEnvironment: () => Object.entries(env),
      getArguments: () => [],
      initialCwd: () => undefined,
    },
    "wasi:cli/exit": cli.exit,
    "wasi:cli/stdin": cli.stdin,
    "wasi:cli/stdout": cli.stdout,
    "wasi:cli/stderr": cli.stderr,
    "wasi:cli/terminal-input": cli.terminalInput,
    "wasi:cli/terminal-output": cli.terminalOutput,
    "wasi:cli/terminal-stdin": cli.terminalStdin,
    "wasi:cli/terminal-stdout": cli.terminalStdout,
    "wasi:cli/terminal-stderr": cli.terminalStderr,
    "wasi:clocks/monotonic-clock": clocks.monotonicClock,
    "wasi:clocks/wall-clock": clocks.wallClock,
    "wasi:io/error": io.error,
    "wasi:io/poll": io.poll,
    "wasi:io/streams": io.streams,
    "wasi:random/random": random.random,
    "wasi:random/insecure": random.insecure,
    "wasi:random/insecure-seed": random.insecureSeed,
    "wasi:http/types": http.types,
    "wasi:http/outgoing-handler": allowlistedHttp(http.outgoingHandler, allowedHost, denied),
    "abx:epp/memo": memo(),
    "abx:epp/websocket": noWebSocket,
  };
}

/** Runs an export; `{ok}` or `{err}` with the epp-error jco put in ComponentError.payload. */
function call(fn) {
  try {
    return { ok: fn() };
  } catch (e) {
    if (e?.payload?.code) return { err: { ...e.payload, epp: EPP_CODES[e.payload.code] } };
    throw e;
  }
}

function ok(result, what) {
  if (result.err) {
    const e = result.err;
    throw new Error(`${what} failed: ${e.epp} (${e.code}): ${e.message}`);
  }
  return result.ok;
}

function expect(cond, message) {
  if (!cond) throw new Error(message);
}

// ------------------------------------------------------------------ the checks

const args = parseArgs({
  options: {
    component: { type: "string" },
    wasm: { type: "string" },
    manifest: { type: "string" },
  },
}).values;
const baseUrl = process.env.EPP_TESTBED_URL;
const apiKey = process.env.EPP_TESTBED_KEY;
if (!args.component || !args.wasm || !args.manifest || !baseUrl) {
  console.error("usage: EPP_TESTBED_URL=… EPP_TESTBED_KEY=… node run.mjs --component JS --wasm WASM --manifest JSON");
  process.exit(2);
}
const testbed = new URL(baseUrl);
const { instantiate } = await import(pathToFileURL(args.component).href);
const coreDir = dirname(args.component);
const compiled = new Map();
const getCoreModule = (name) => {
  if (!compiled.has(name)) compiled.set(name, readFile(join(coreDir, name)).then(WebAssembly.compile));
  return compiled.get(name);
};
const denied = [];
async function provider(env) {
  const root = await instantiate(getCoreModule, imports({ env, allowedHost: testbed.hostname, denied }));
  return root.infra;
}

let passed = 0;
let failed = 0;
async function check(name, body) {
  const started = Date.now();
  try {
    const note = await body();
    passed++;
    console.log(`ok   ${name} (${Date.now() - started} ms)${note ? `: ${note}` : ""}`);
    return true;
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
    return false;
  }
}

const wasm = await readFile(args.wasm);
const manifest = JSON.parse(await readFile(args.manifest, "utf8"));
const infra = await provider({ ABX_OPENSANDBOX_BASE_URL: baseUrl, ABX_OPENSANDBOX_API_KEY: apiKey });
let sandbox = null;

await check("the released artifact runs unchanged", () => {
  const sha256 = createHash("sha256").update(wasm).digest("hex");
  expect(sha256 === manifest.sha256, `sha256 ${sha256} is not the manifest's ${manifest.sha256}`);
  // wasmsign2 puts its signatures in the first section, a custom section named `signature`.
  expect(wasm[8] === 0 && wasm.subarray(9, 32).includes(Buffer.from("signature")), "no signature section");
  return `sha256 ${sha256.slice(0, 16)}…, signed`;
});

await check("describe() agrees with provider.json", () => {
  const info = infra.describe();
  expect(info.id === manifest.id && info.version === manifest.version, `${info.id} ${info.version}`);
  const caps = Object.fromEntries(info.capabilities.map((c) => [c.name, c.supported]));
  expect(JSON.stringify(caps) === JSON.stringify(manifest.capabilities), "capabilities differ");
  const settings = info.settings.map((s) => ({
    name: s.name,
    env: s.env,
    default: s.defaultValue ?? null,
    secret: s.secret,
    description: s.description,
  }));
  expect(JSON.stringify(settings) === JSON.stringify(manifest.settings), "settings differ");
  return `${Object.values(caps).filter(Boolean).length}/${info.capabilities.length} capabilities supported`;
});

const created = await check("sandbox.create", () => {
  const info = ok(
    call(() => infra.sandboxCreate({ timeout: 300, env: [], metadata: [["via", "jco"]] })),
    "sandbox.create",
  );
  sandbox = info.sandboxId;
  expect(info.state === "running", `state ${info.state}`);
  return `${sandbox} ${info.state}`;
});

let workdir = null;
if (created) {
  await check("commands.run: exit code, stdout, stderr", () => {
    const stream = ok(
      call(() =>
        infra.commandsRun({
          sandboxId: sandbox,
          cmd: "echo hello from jco; echo oops >&2; pwd; exit 3",
          envs: [],
        }),
      ),
      "commands.run",
    );
    let stdout = "";
    let stderr = "";
    let exit = null;
    for (let events; (events = ok(call(() => stream.next()), "command-stream.next")); ) {
      for (const ev of events) {
        if (ev.tag === "stdout") stdout += ev.val;
        if (ev.tag === "stderr") stderr += ev.val;
        if (ev.tag === "exited") exit = ev.val;
      }
    }
    expect(exit?.exitCode === 3, `exit ${JSON.stringify(exit)}`);
    expect(stdout.startsWith("hello from jco\n"), `stdout ${JSON.stringify(stdout)}`);
    expect(stderr === "oops\n", `stderr ${JSON.stringify(stderr)}`);
    workdir = stdout.split("\n")[1];
    return `exit 3, stdout ${JSON.stringify(stdout.split("\n")[0])}`;
  });

  await check("files.write then files.read round trip", () => {
    const path = `${workdir}/jco/round-trip.bin`;
    const content = Buffer.concat([Buffer.from("héllo from jco\n"), Buffer.from([0, 1, 2, 255, 254])]);
    const writer = ok(call(() => infra.filesWrite(sandbox, path, BigInt(content.length), 0o600)), "files.write");
    ok(call(() => writer.write(new Uint8Array(content))), "file-writer.write");
    const info = ok(call(() => writer.finish()), "file-writer.finish");
    expect(info.size === BigInt(content.length), `size ${info.size}`);
    expect((info.mode & 0o777) === 0o600, `mode ${info.mode.toString(8)}`);
    const reader = ok(call(() => infra.filesRead(sandbox, path, undefined)), "files.read");
    const chunks = [];
    for (let chunk; (chunk = ok(call(() => reader.read(64 * 1024)), "file-reader.read")); ) chunks.push(chunk);
    const back = Buffer.concat(chunks);
    expect(back.equals(content), `read back ${back.toString("hex")}`);
    return `${content.length} bytes, mode 0600`;
  });

  await check("pty.create: WebSocket is unavailable, said clearly", () => {
    const r = call(() => infra.ptyCreate({ sandboxId: sandbox, cols: 80, rows: 24, envs: [] }));
    expect(r.err, "pty.create unexpectedly succeeded");
    expect(r.err.epp === "E8004", `got ${r.err.epp}: ${r.err.message}`);
    expect(r.err.message === WEBSOCKET_UNAVAILABLE, `message ${JSON.stringify(r.err.message)}`);
    return `${r.err.epp}: ${r.err.message}`;
  });
}

await check("a destination outside the allowlist is E6001", async () => {
  // Another loopback address (never leaves the machine even if the allowlist
  // were broken, and nothing listens there: a connection would be E5003).
  const target = `http://127.0.0.2:${testbed.port || 80}`;
  const other = await provider({ ABX_OPENSANDBOX_BASE_URL: target, ABX_OPENSANDBOX_API_KEY: apiKey });
  const r = call(() => other.sandboxList({ states: [], metadata: [] }));
  expect(r.err, "sandbox.list reached a denied destination");
  expect(r.err.epp === "E6001", `got ${r.err.epp}: ${r.err.message}`);
  expect(denied.some((d) => d.includes("127.0.0.2")), `the allowlist saw ${denied}`);
  return `${r.err.epp}: ${r.err.message}`;
});

if (sandbox) {
  await check("sandbox.kill", () => {
    ok(call(() => infra.sandboxKill(sandbox)), "sandbox.kill");
    const after = call(() => infra.sandboxGetInfo(sandbox));
    const gone = after.err?.epp === "E4004" || ["stopping", "terminated"].includes(after.ok?.state);
    expect(gone, `after kill: ${JSON.stringify(after.ok ?? after.err)}`);
    return after.err ? `then get_info is ${after.err.epp}` : `then ${after.ok.state}`;
  });
}

console.log(`jco: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
