// The released provider in a second WebAssembly host: Node.js through jco.
//
// tests/jco/run transpiles dist/opensandbox.wasm (the signed release artifact,
// unchanged) with `jco transpile --instantiation async` and runs this script.
// Here we are the host: the import object below decides what the component may
// do, as epp-host does under wasmtime, and it reads the same declaration:
// `describe()` (the settings) and `needs()` (backend origin templates, secret
// headers, allow-hosts variables). From these and the operator's environment it
// makes the same grant as epp-host (docs/architecture.md, "grant model"):
//   - wasi:cli/environment: the provider's declared settings only, minus the
//     secrets the host injects and the allow-hosts variables (the shim's
//     default is the whole process.env; its `cli._setEnv` would replace that
//     process-wide),
//   - wasi:http/outgoing-handler: the shim's handler behind the grant: the
//     origin (any port on its host when the provider asks), listed hosts,
//     nothing else; the secret headers are added here, in their scope, and the
//     guest cannot set them,
//   - abx:epp/memo: a Map with TTLs,
//   - abx:epp/websocket: unavailable, every call answers a clear error,
//   - abx:epp/request: no deadline, so nothing is ever left to undo (tokens
//     are not kept); no provider_options.
// Unlike epp-host it matches allow-list entries as exact host or host:port only,
// its origin host is the name as written (`localhost` and 127.0.0.1 are two
// hosts here), and it enforces no memory, CPU or time limits.
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

/** The agent framework's own key (EPP/1): no provider gets it. */
const FRAMEWORK_KEY_ENV = "ABX_SANDBOX_API_KEY";

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

// ------------------------------------------------------------------ the grant

/** The operator's value of a declared setting: its first variable set and not blank. */
function settingValue(setting, operatorEnv) {
  for (const name of setting.env) {
    const value = operatorEnv[name]?.trim();
    if (value) return value;
  }
  return undefined;
}

/** `{scheme, host, port}` of an `http(s)://host[:port][/path]` URL, or null. */
function parseOrigin(text) {
  const m = /^([A-Za-z]+):\/\/([^/?#]*)(\/[^?#]*)?$/.exec(text);
  const scheme = m?.[1].toLowerCase();
  if (scheme !== "http" && scheme !== "https") return null;
  const dest = splitAuthority(m[2], scheme);
  return dest && { scheme, ...dest };
}

/**
 * The backend origin: the first template of `needs.origin` whose placeholders
 * are all set (`{name}` = the operator's value of setting `name`,
 * `{name=fallback}`) and that parses (the rule in wit/types.wit).
 */
export function resolveOrigin(info, needs, operatorEnv) {
  for (const template of needs.origin) {
    let unset = false;
    const url = template.replace(/\{([^}=]+)(?:=([^}]*))?\}/g, (_, name, fallback) => {
      const setting = info.settings.find((s) => s.name === name);
      if (!setting) throw new Error(`needs() origin template ${template} reads undeclared setting ${name}`);
      const value = settingValue(setting, operatorEnv) ?? fallback;
      if (value === undefined) unset = true;
      return value ?? "";
    });
    const origin = !unset && parseOrigin(url);
    if (origin) return origin;
  }
  return null;
}

/**
 * What the operator (`operatorEnv`, as epp-host's own environment) grants a
 * provider that declares `info` and `needs`: its environment, origin, listed
 * hosts and secret headers.
 */
export function grantFor(info, needs, operatorEnv) {
  const secretHeaders = needs.secretHeaders.map((h) => {
    const setting = info.settings.find((s) => s.name === h.setting);
    if (!setting?.secret) throw new Error(`needs() injects ${h.setting}, which describe() does not declare secret`);
    return { header: h.header.toLowerCase(), scope: h.scope, env: setting.env, value: settingValue(setting, operatorEnv) };
  });
  const withheld = new Set([FRAMEWORK_KEY_ENV, ...needs.allowHostsEnv, ...secretHeaders.flatMap((h) => h.env)]);
  const env = {};
  for (const name of info.settings.flatMap((s) => s.env)) {
    if (!withheld.has(name) && operatorEnv[name] !== undefined) env[name] = operatorEnv[name];
  }
  const allowHosts = new Set(
    needs.allowHostsEnv.flatMap((name) => (operatorEnv[name] ?? "").split(/[\s,]+/).filter(Boolean)).map((e) => e.toLowerCase()),
  );
  return {
    env,
    origin: resolveOrigin(info, needs, operatorEnv),
    anyPort: needs.originHostAnyPort,
    allowHosts,
    secretHeaders,
  };
}

/**
 * wasi:http/outgoing-handler that enforces `grant`: a request goes through only
 * to the origin (or any port on its host, when granted) or a listed host;
 * everything else gets `HTTP-request-denied` before any connection is
 * attempted (the guest reports that as E6001). The secret headers are added to
 * requests in their scope. The guest cannot have set them: they are forbidden
 * headers for it (see `ownHeaders`).
 */
export function grantedHttp(inner, grant, log) {
  const encoder = new TextEncoder();
  return {
    handle(request, options) {
      const tag = request.scheme()?.tag;
      const scheme = tag === "HTTP" ? "http" : tag === "HTTPS" ? "https" : null;
      const dest = scheme && splitAuthority(request.authority(), scheme);
      const origin = grant.origin;
      const sameHost = Boolean(dest && origin && dest.host === origin.host);
      const isOrigin = sameHost && dest.port === origin.port && scheme === origin.scheme;
      const listed = Boolean(dest && (grant.allowHosts.has(dest.host) || grant.allowHosts.has(`${dest.host}:${dest.port}`)));
      if (!dest || !(isOrigin || (grant.anyPort && sameHost) || listed)) {
        log.push(`${scheme ?? "?"}://${request.authority() ?? ""}`);
        throw { tag: "HTTP-request-denied" };
      }
      // The request's fields are immutable to the guest by now; the shim's
      // `entries()` is the list it sends, so the host edits it in place.
      const entries = request.headers().entries();
      // `epp-anonymous` (wit/types.wit, secret-header): no secrets, and the
      // marker itself never leaves the host.
      const isMarker = ([name]) => name.toLowerCase() === "epp-anonymous";
      const anonymous = entries.some(isMarker);
      // Every copy of it, as epp-host's HeaderMap::remove does.
      for (let i = entries.length - 1; i >= 0; i--) if (isMarker(entries[i])) entries.splice(i, 1);
      for (const h of grant.secretHeaders) {
        const inScope = h.scope === "origin-host" ? sameHost : isOrigin;
        if (!anonymous && inScope && h.value !== undefined) entries.push([h.header, encoder.encode(h.value)]);
      }
      return inner.handle(request, options);
    },
  };
}

/** Makes the secret headers forbidden to the guest, as epp-host does (process-wide: one provider per run). */
export function ownHeaders(grant) {
  for (const h of grant.secretHeaders) http._forbiddenHeaders.add(h.header);
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
export function imports({ env, grant, denied }) {
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
    "wasi:http/outgoing-handler": grantedHttp(http.outgoingHandler, grant, denied),
    "abx:epp/memo": memo(),
    "abx:epp/websocket": noWebSocket,
    // No deadline here (calls block the event loop until they return), so
    // nothing a call made is ever abandoned: the tokens a provider reports
    // are not kept, there is nothing to undo.
    // No provider_options here: the settings are the environment's alone.
    "abx:epp/request": {
      timeLeftMs: () => undefined,
      made: (_token) => {},
      settled: (_token) => {},
      providerOptions: () => [],
    },
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
async function provider(env, grant) {
  const root = await instantiate(getCoreModule, imports({ env, grant, denied }));
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
// describe() and needs() do no I/O: ask an instance that may reach nothing.
const declaring = await provider({}, { env: {}, origin: null, anyPort: false, allowHosts: new Set(), secretHeaders: [] });
const info = declaring.describe();
const needs = declaring.needs();
/** The first environment variable of the declared setting `setting`. */
function firstVarOf(setting) {
  const s = info.settings.find((x) => x.name === setting);
  if (!s) throw new Error(`the provider declares no setting ${setting}`);
  return s.env[0];
}
// The setting of the first placeholder of the origin templates, and the first secret header's.
const originSetting = /\{([^}=]+)/.exec(needs.origin.find((t) => t.includes("{")) ?? "")?.[1];
const keySetting = needs.secretHeaders[0]?.setting;
if (!originSetting || !keySetting) {
  console.error(`jco: the provider declares no origin setting or no secret header: ${JSON.stringify(needs)}`);
  process.exit(2);
}
// The operator's configuration, as epp-host would find it in its environment:
// the provider's origin setting points at the testbed, its secret is the testbed's key.
const operatorEnv = { [firstVarOf(originSetting)]: baseUrl, [firstVarOf(keySetting)]: apiKey };
const grant = grantFor(info, needs, operatorEnv);
ownHeaders(grant);
const infra = await provider(grant.env, grant);
let sandbox = null;

await check("the released artifact runs unchanged", () => {
  const sha256 = createHash("sha256").update(wasm).digest("hex");
  expect(sha256 === manifest.sha256, `sha256 ${sha256} is not the manifest's ${manifest.sha256}`);
  // wasmsign2 puts its signatures in the first section, a custom section named `signature`.
  expect(wasm[8] === 0 && wasm.subarray(9, 32).includes(Buffer.from("signature")), "no signature section");
  return `sha256 ${sha256.slice(0, 16)}…, signed`;
});

await check("describe() and needs() agree with provider.json", () => {
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
  // jco gives flags as an object of booleans keyed by camel-cased case names.
  const flagged = Object.entries(needs.capabilities).filter(([, on]) => on).length;
  expect(flagged === Object.values(caps).filter(Boolean).length, `needs() flags ${flagged} capabilities`);
  const declared = {
    origin: needs.origin,
    origin_host_any_port: needs.originHostAnyPort,
    allow_hosts_env: needs.allowHostsEnv,
    secret_headers: needs.secretHeaders.map((h) => ({ setting: h.setting, header: h.header, scope: h.scope })),
    generic_settings: needs.genericSettings.map(([key, setting]) => ({ key, setting })),
  };
  expect(JSON.stringify(declared) === JSON.stringify(manifest.needs), `needs differ: ${JSON.stringify(declared)}`);
  expect(grant.origin && grant.origin.port === Number(testbed.port || 80), `origin ${JSON.stringify(grant.origin)}`);
  expect(!Object.values(grant.env).includes(apiKey), "the secret is in the provider's environment");
  return `${Object.values(caps).filter(Boolean).length}/${info.capabilities.length} capabilities supported; origin ${grant.origin.scheme}://${grant.origin.host}:${grant.origin.port}`;
});

const created = await check("sandbox.create", () => {
  const info = ok(
    call(() => infra.sandboxCreate({ timeout: 300, env: [], metadata: [["via", "jco"]], volumes: [] })),
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

await check("a destination outside the grant is E6001", async () => {
  // A provider that heads for a host it was not granted: its environment names
  // another server than the operator's grant. Another loopback address (never
  // leaves the machine even if the grant were broken, and nothing listens
  // there: a connection would be E5003).
  const target = `http://127.0.0.2:${testbed.port || 80}`;
  const other = await provider({ ...grant.env, [firstVarOf(originSetting)]: target }, grant);
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
