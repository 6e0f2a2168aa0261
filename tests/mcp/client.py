"""`epp-host mcp` driven by the official MCP Python SDK (`mcp` 2.3.0) over stdio,
end to end against a testbed, in both protocol eras.

usage: client.py GROUP [GROUP ...]   (groups: see GROUPS at the bottom)

Each group runs in `legacy` (the 2025-11-25 `initialize` handshake) and `auto`
(2026-07-28, `server/discover`) unless it says otherwise, each time against a
fresh `epp-host mcp` process. The host is $EPP_HOST_BIN with the provider
$EPP_GUEST_WASM and key $EPP_TRUSTED_KEY; the backend comes from
ABX_OPENSANDBOX_BASE_URL and ABX_OPENSANDBOX_API_KEY. Every result and the
host's stderr are kept and searched for the API key at the end of each group.

A group fails with a message naming the era, what was asked and what came back.
Waits on the sandbox (a process gone, a file event) are bounded polls or
notification waits with a deadline, never sleeps standing in for an event.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from contextlib import asynccontextmanager

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

ERAS = ("legacy", "auto")
HOST = os.environ["EPP_HOST_BIN"]
WASM = os.environ["EPP_GUEST_WASM"]
KEY = os.environ["EPP_TRUSTED_KEY"]
API_KEY = os.environ["ABX_OPENSANDBOX_API_KEY"]
TOOLS_LIST_LIMIT = 30 * 1024  # docs/mcp.md, Size
STEP = 120  # seconds any one call may take before the test gives up on it
# The handshake of the tests that speak JSON-RPC by hand (2025-11-25).
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "epp-mcp-test", "version": "0"}}}


class Failed(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failed(what)


def log(msg):
    print(f"mcp-test: {msg}", file=sys.stderr, flush=True)


def dump(x) -> str:
    if hasattr(x, "model_dump"):
        x = x.model_dump(by_alias=True, exclude_none=True, mode="json")
    return json.dumps(x, ensure_ascii=False)


class Host:
    """One `epp-host mcp` process and a Client on it; everything it answered is
    kept (`seen`) so the API key can be looked for in all of it."""

    def __init__(self, era: str, *flags: str):
        self.era = era
        self.flags = flags
        self.stderr = tempfile.NamedTemporaryFile(prefix="epp-mcp-stderr-", suffix=".log", delete=False)
        self.seen: list[str] = []
        self.notifications: list = []
        self.client: Client | None = None

    @asynccontextmanager
    async def open(self):
        # stderr goes to a file of ours (the SDK's stdio transport would pass it through).
        params = StdioServerParameters(
            command="bash",
            args=["-c", 'exec "$@" 2>>"$EPP_MCP_STDERR"', "bash", HOST, "mcp", WASM, "--trusted-key", KEY,
                  *self.flags],
            env={**os.environ, "EPP_MCP_STDERR": self.stderr.name},
        )
        async with Client(params, mode=self.era, read_timeout_seconds=STEP,
                          message_handler=self._message) as client:
            self.client = client
            yield self

    async def _message(self, message) -> None:
        if not isinstance(message, Exception):
            self.notifications.append(message)

    async def call(self, tool: str, args: dict, **kw):
        r = await self.client.call_tool(tool, args, **kw)
        self.seen.append(dump(r))
        return r

    async def ok(self, tool: str, args: dict, **kw) -> dict:
        """A call that must succeed; its structuredContent."""
        r = await self.call(tool, args, **kw)
        check(not r.is_error, f"[{self.era}] {tool} {args} failed: {text(r)}")
        check(isinstance(r.structured_content, dict), f"[{self.era}] {tool}: no structuredContent: {dump(r)}")
        return r.structured_content

    def secrets_check(self):
        log_text = open(self.stderr.name, encoding="utf-8", errors="replace").read()
        for what, body in [("a result", "\n".join(self.seen)), ("stderr", log_text),
                           ("a notification", "\n".join(dump(n) for n in self.notifications))]:
            check(API_KEY not in body, f"[{self.era}] the API key appears in {what}")
        os.unlink(self.stderr.name)


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def sandbox(h: Host, template: str = "base") -> str:
    box = await h.ok("sandbox_create", {"template": template, "timeout": 600})
    check(box.get("sandbox_id"), f"[{h.era}] sandbox_create answered no sandbox_id: {box}")
    return box["sandbox_id"]


@asynccontextmanager
async def with_sandbox(era: str, *flags: str, template: str = "base"):
    """A fresh host with `flags` and a sandbox of `template` on it, killed at
    the end; then everything the host said is searched for the API key."""
    h = Host(era, *flags)
    async with h.open():
        sid = await sandbox(h, template)
        try:
            yield h, sid
        finally:
            await h.ok("sandbox_kill", {"sandbox_id": sid})
    h.secrets_check()


async def sh(h: Host, sid: str, command: str) -> dict:
    return await h.ok("commands_run", {"sandbox_id": sid, "cmd": command})


async def ps(h: Host, sid: str, command: str) -> bool:
    """Whether a process of the sandbox runs `command` (the first character in
    brackets, so the shell asking is not a match of itself)."""
    r = await sh(h, sid, f"pgrep -f '[{command[0]}]{command[1:]}' >/dev/null && echo running || echo gone")
    return r["stdout"].strip() == "running"


async def until(h: Host, sid: str, command: str, present: bool, secs: float = 30) -> bool:
    """Polls (bounded) until `command` runs in the sandbox, or no longer does."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if await ps(h, sid, command) == present:
            return True
        await anyio.sleep(0.1)  # poll interval, not a synchronisation
    return False


# --------------------------------------------------------------------- groups


def raw_tools_list(*flags: str) -> tuple[int, dict, dict]:
    """tools/list as bytes on the wire (legacy handshake by hand): its size, the
    result and the initialize result."""
    p = subprocess.Popen([HOST, "mcp", WASM, "--trusted-key", KEY, *flags], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        def send(obj):
            p.stdin.write((json.dumps(obj) + "\n").encode())
            p.stdin.flush()

        send(INITIALIZE)
        init = json.loads(p.stdout.readline())
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        line = p.stdout.readline()
        return len(line.rstrip(b"\n")), json.loads(line)["result"], init["result"]
    finally:
        p.stdin.close()
        p.wait(timeout=30)


async def group_tools(era: str):
    """The tool list: size, names, schemas with descriptions, annotations, the
    server's identity; --tools and --read-only."""
    size, listed, init = raw_tools_list()
    check(size <= TOOLS_LIST_LIMIT, f"tools/list is {size} bytes, over {TOOLS_LIST_LIMIT}")
    info = init["serverInfo"]
    check(info["name"] == "epp-host" and info.get("version"), f"serverInfo {info}")
    ident = json.dumps(info)
    check("opensandbox" in ident and "sha256" in ident, f"serverInfo names no component id / sha256: {info}")
    check(init.get("instructions"), "no instructions")
    log(f"tools/list: {size} bytes, {len(listed['tools'])} tools; serverInfo {info.get('title')}")
    h = Host(era)
    async with h.open():
        tools = {t.name: t for t in (await h.client.list_tools()).tools}
        for name in ("sandbox_create", "sandbox_kill", "commands_run", "commands_connect", "commands_status",
                     "files_read", "files_write", "code_run"):
            check(name in tools, f"[{era}] no tool {name}; tools: {sorted(tools)}")
        for name in tools:
            check(not name.startswith("pty_") and name not in ("commands_send_input", "files_watch"),
                  f"[{era}] {name} is listed though it cannot answer as a tool")
        for t in tools.values():
            check(t.title and t.description, f"[{era}] {t.name} has no title/description")
            check(t.output_schema and t.output_schema.get("type") == "object", f"[{era}] {t.name}: no outputSchema")
            for pname, p in t.input_schema.get("properties", {}).items():
                check(p.get("description"), f"[{era}] {t.name}.{pname} has no description")
        a = tools["files_read"].annotations
        check(a and a.read_only_hint is True, f"[{era}] files_read annotations {a}")
        a = tools["sandbox_kill"].annotations
        check(a and a.destructive_hint is True and not a.read_only_hint, f"[{era}] sandbox_kill annotations {a}")
        props = tools["commands_run"].input_schema["properties"]
        check("cmd" in props and "stream" not in props and "stdin" not in props,
              f"[{era}] commands_run params {sorted(props)}")
        h.secrets_check()
    _, only, _ = raw_tools_list("--tools", "commands_run,files_read")
    check(sorted(t["name"] for t in only["tools"]) == ["commands_run", "files_read"],
          f"--tools listed {[t['name'] for t in only['tools']]}")
    _, ro, _ = raw_tools_list("--read-only")
    check(ro["tools"] and all(t.get("annotations", {}).get("readOnlyHint") for t in ro["tools"]),
          f"--read-only listed {[t['name'] for t in ro['tools'] if not t.get('annotations', {}).get('readOnlyHint')]}")
    check("commands_run" not in {t["name"] for t in ro["tools"]}, "--read-only lists commands_run")


async def group_results(era: str):
    """Results and errors: exit codes, stdout/stderr apart, EPP errors as
    isError with the code, unknown parameters named, unknown tools refused."""
    async with with_sandbox(era) as (h, sid):
        r = await h.call("commands_run", {"sandbox_id": sid, "cmd": "echo out; echo err >&2; exit 3"})
        check(not r.is_error, f"[{era}] a non-zero exit is an error result: {text(r)}")
        s = r.structured_content
        check(s["exit_code"] == 3 and s["stdout"] == "out\n" and s["stderr"] == "err\n", f"[{era}] run: {s}")
        check(text(r) and "out" in text(r) and len(text(r)) < 2000, f"[{era}] summary: {text(r)!r}")

        w = await h.ok("files_write", {"sandbox_id": sid, "path": "/tmp/mcp.txt", "content": "héllo\n"})
        check(w.get("size") == 7, f"[{era}] files_write answered {w}")
        rd = await h.ok("files_read", {"sandbox_id": sid, "path": "/tmp/mcp.txt"})
        check(rd.get("content") == "héllo\n", f"[{era}] files_read answered {rd}")

        r = await h.call("files_read", {"sandbox_id": sid, "path": "/tmp/nope-mcp"})
        check(r.is_error, f"[{era}] reading a missing file is not isError: {dump(r)}")
        check(text(r).startswith("E4004") and "/tmp/nope-mcp" in text(r), f"[{era}] missing file text {text(r)!r}")
        err = (r.structured_content or {}).get("error", {})
        check(err.get("code") == "E4004" and err.get("message") and err.get("retryable") is False,
              f"[{era}] structuredContent.error {err}")

        r = await h.call("commands_run", {"sandbox_id": sid, "cmd": "true", "bogus": 1})
        check(r.is_error and "bogus" in text(r) and text(r).startswith("E1001"),
              f"[{era}] unknown parameter: {dump(r)}")
        r = await h.call("commands_run", {"sandbox_id": sid, "cmd": "cat", "stdin": True})
        check(r.is_error and "`stdin`" in text(r), f"[{era}] stdin, which no tool could feed: {dump(r)}")
        r = await h.call("commands_run", {"sandbox_id": "no-such-sandbox-mcp", "cmd": "true"})
        check(r.is_error and text(r)[:1] == "E", f"[{era}] unknown sandbox: {dump(r)}")
        try:
            r = await h.call("no_such_tool", {})
            raise Failed(f"[{era}] an unknown tool answered {dump(r)}")
        except MCPError as e:
            check("no_such_tool" in str(e), f"[{era}] unknown tool error {e}")


async def group_progress(era: str):
    """Output as notifications/progress when the call carries a progressToken."""
    async with with_sandbox(era) as (h, sid):
        got: list[tuple[float, str | None]] = []

        async def on_progress(progress, total, message):
            got.append((progress, message))

        cmd = "for i in 1 2 3; do echo line$i; sleep 0.3; done"
        s = await h.ok("commands_run", {"sandbox_id": sid, "cmd": cmd}, progress_callback=on_progress)
        check(s["stdout"] == "line1\nline2\nline3\n", f"[{era}] output {s}")
        joined = "".join(m or "" for _, m in got)
        check(len(got) >= 2 and "line1" in joined and "line3" in joined, f"[{era}] progress {got}")
        values = [p for p, _ in got]
        check(values == sorted(values) and values[-1] >= len("line1\nline2\n"), f"[{era}] progress values {values}")


async def group_cancel(era: str):
    """notifications/cancelled for a running commands_run kills its process."""
    async with with_sandbox(era) as (h, sid):
        marker = f"sleep 30{era == 'legacy' and 1 or 2}"
        outcome = {}

        async def long_call():
            try:
                outcome["result"] = await h.call("commands_run", {"sandbox_id": sid, "cmd": marker})
            except anyio.get_cancelled_exc_class():
                outcome["cancelled"] = True
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            check(await until(h, sid, marker, True), f"[{era}] `{marker}` never started in {sid}")
            tg.cancel_scope.cancel()
        check(outcome.get("cancelled") and "result" not in outcome, f"[{era}] the call was not cancelled: {outcome}")
        check(await until(h, sid, marker, False), f"[{era}] `{marker}` still runs after the call was cancelled")
        log(f"[{era}] cancelled commands_run: `{marker}` is gone from the sandbox")


async def group_http_close(era: str):
    """Over --http, a client that closes the response stream of a running
    commands_run (no notifications/cancelled) stops the command too."""
    http_log = tempfile.NamedTemporaryFile(prefix="epp-mcp-http-", suffix=".log", delete=False)
    http = subprocess.Popen([HOST, "mcp", WASM, "--trusted-key", KEY, "--http", "127.0.0.1:0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=http_log)
    try:
        address = None
        deadline = time.monotonic() + 60
        while address is None and http.poll() is None and time.monotonic() < deadline:
            for line in open(http_log.name, encoding="utf-8", errors="replace"):
                if "listening on http://" in line:
                    address = line.split("http://", 1)[1].split("/", 1)[0]
            await anyio.sleep(0.05)  # the host writes the line when it listens
        check(address, f"epp-host mcp --http did not say where it listens: {open(http_log.name).read()}")
        host, port = address.rsplit(":", 1)
        async with with_sandbox(era) as (h, sid):
            marker = "sleep 303"
            conn = await anyio.to_thread.run_sync(start_http_call, host, int(port), sid, marker)
            check(await until(h, sid, marker, True), f"[{era}] `{marker}` never started over HTTP")
            conn.close()
            check(await until(h, sid, marker, False), f"[{era}] `{marker}` still runs after the stream closed")
            log(f"[{era}] HTTP response stream closed: `{marker}` is gone from the sandbox")
    finally:
        http.terminate()
        http.wait(timeout=30)
    check(API_KEY not in open(http_log.name, encoding="utf-8", errors="replace").read(),
          "the API key appears in the HTTP server's log")
    os.unlink(http_log.name)


def start_http_call(host: str, port: int, sid: str, command: str):
    """initialize over streamable HTTP (2025-11-25), then a tools/call whose
    response stream is left open: the connection it is on."""
    import http.client

    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def post(conn, body, extra=None):
        conn.request("POST", "/mcp", json.dumps(body), {**headers, **(extra or {})})
        return conn.getresponse()

    c = http.client.HTTPConnection(host, port, timeout=STEP)
    r = post(c, INITIALIZE)
    session = {"Mcp-Session-Id": r.getheader("Mcp-Session-Id") or "",
               "MCP-Protocol-Version": "2025-11-25"}
    r.read()
    check(r.status == 200 and session["Mcp-Session-Id"], f"initialize over HTTP: {r.status}")
    r = post(c, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    r.read()
    c.close()
    call = http.client.HTTPConnection(host, port, timeout=STEP)
    r = post(call, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "commands_run", "arguments": {"sandbox_id": sid, "cmd": command}}}, session)
    check(r.status == 200, f"tools/call over HTTP: {r.status}")
    return call


async def group_eof(era: str):
    """A stdio client that exits (end of input) with a commands_run in flight:
    the call is cancelled and undone, so its process is gone, and the host
    exits soon after."""
    async with with_sandbox(era) as (h, sid):
        marker = "sleep 304"
        other = subprocess.Popen([HOST, "mcp", WASM, "--trusted-key", KEY], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=h.stderr)
        for line in [
            INITIALIZE,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "commands_run", "arguments": {"sandbox_id": sid, "cmd": marker}}},
        ]:
            other.stdin.write((json.dumps(line) + "\n").encode())
        other.stdin.flush()
        check(await until(h, sid, marker, True), f"[{era}] `{marker}` never started")
        other.stdin.close()
        t0 = time.monotonic()
        await anyio.to_thread.run_sync(lambda: other.wait(timeout=STEP))
        exited = time.monotonic() - t0
        check(await until(h, sid, marker, False), f"[{era}] `{marker}` still runs after its client went away")
        log(f"[{era}] end of input: the host exited after {exited:.1f} s, `{marker}` is gone")


async def group_wait(era: str):
    """--mcp-wait 3: a longer command answers at the wait with its command_id and
    output so far, keeps running, and commands_connect follows it to its end."""
    async with with_sandbox(era, "--mcp-wait", "3") as (h, sid):
        marker = uuid.uuid4().hex[:8]
        cmd = f"echo start-{marker}; sleep 5; echo end-{marker}; exit 4"
        t0 = time.monotonic()
        s = await h.ok("commands_run", {"sandbox_id": sid, "cmd": cmd})
        waited = time.monotonic() - t0
        check(s.get("running") is True and s.get("command_id"), f"[{era}] not answered at the wait: {s}")
        check(waited < 5, f"[{era}] answered after {waited:.1f} s with --mcp-wait 3")
        check(s["stdout"] == f"start-{marker}\n", f"[{era}] output so far {s}")
        st = await h.ok("commands_status", {"sandbox_id": sid, "command_id": s["command_id"]})
        check(st.get("running") is True, f"[{era}] commands_status of the held command {st}")
        end = await follow(h, sid, s["command_id"])
        check(end["exit_code"] == 4 and end["stdout"] == f"start-{marker}\nend-{marker}\n",
              f"[{era}] followed to {end}")
        again = await h.ok("commands_connect", {"sandbox_id": sid, "command_id": s["command_id"]})
        check(again.get("exit_code") == 4, f"[{era}] a second follow of the ended command {again}")


async def follow(h: Host, sid: str, command_id: str, max_follows: int = 10) -> dict:
    for _ in range(max_follows):
        s = await h.ok("commands_connect", {"sandbox_id": sid, "command_id": command_id})
        if not s.get("running"):
            return s
    raise Failed(f"[{h.era}] {command_id} still running after {max_follows} follows")


async def group_two_minutes(era: str):
    """The issue's case: a 2-minute command with --mcp-wait 10 answers within the
    wait with a command_id, and its output is followed to the end."""
    async with with_sandbox(era, "--mcp-wait", "10") as (h, sid):
        cmd = "for i in $(seq 1 12); do echo tick$i; sleep 10; done; echo done"
        t0 = time.monotonic()
        s = await h.ok("commands_run", {"sandbox_id": sid, "cmd": cmd})
        check(s.get("running") and s.get("command_id") and time.monotonic() - t0 < 15,
              f"[{era}] first answer after {time.monotonic() - t0:.1f} s: {s}")
        check(s["stdout"].startswith("tick1\n"), f"[{era}] output so far {s}")
        end = await follow(h, sid, s["command_id"], max_follows=20)
        want = "".join(f"tick{i}\n" for i in range(1, 13)) + "done\n"
        took = time.monotonic() - t0
        check(end["exit_code"] == 0 and end["stdout"] == want, f"[{era}] end {end}")
        check(took >= 110, f"[{era}] a 2-minute command ended after {took:.0f} s")
        log(f"[{era}] 2-minute command: answered at the wait, followed to its end at {took:.0f} s")


async def group_code(era: str):
    """code_run: a matplotlib figure comes back as an image content block."""
    async with with_sandbox(era, template="code") as (h, sid):
        code = ("import matplotlib.pyplot as plt\n"
                "fig, ax = plt.subplots()\nax.plot([1, 2, 3], [1, 4, 9])\nplt.close(fig)\nfig")
        r = await h.call("code_run", {"sandbox_id": sid, "code": code, "timeout": 110},
                         read_timeout_seconds=180)
        check(not r.is_error, f"[{era}] code_run failed: {text(r)}")
        images = [c for c in r.content if c.type == "image"]
        check(images and images[0].mime_type == "image/png", f"[{era}] no image block: {dump(r)[:600]}")
        check(base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n", f"[{era}] the image is no PNG")
        s = await h.ok("code_run", {"sandbox_id": sid, "code": "6*7"})
        check(any(x["data"].get("text/plain") == "42" for x in s["results"]), f"[{era}] 6*7 → {s}")


async def group_resources(era: str):
    """The file template, reads as text and as blob, a missing file, and a file
    too large for a result coming back as a resource_link."""
    async with with_sandbox(era, "--mcp-inline-bytes", "1000") as (h, sid):
        templates = (await h.client.list_resource_templates()).resource_templates
        check([t.uri_template for t in templates] == ["sandbox://{sandbox_id}/files/{+path}"],
              f"[{era}] templates {[t.uri_template for t in templates]}")
        await sh(h, sid, "printf 'a,b\\n1,2\\n' > /tmp/t.csv; printf '\\x89PNG\\x00\\xff' > /tmp/b.png;"
                         " head -c 5000 /dev/zero | tr '\\0' y > /tmp/big.txt")
        r = await h.client.read_resource(f"sandbox://{sid}/files//tmp/t.csv")
        h.seen.append(dump(r))
        c = r.contents[0]
        check(getattr(c, "text", None) == "a,b\n1,2\n" and c.mime_type == "text/csv", f"[{era}] csv {dump(r)}")
        r = await h.client.read_resource(f"sandbox://{sid}/files//tmp/b.png")
        c = r.contents[0]
        check(getattr(c, "blob", None) and base64.b64decode(c.blob) == b"\x89PNG\x00\xff"
              and c.mime_type == "image/png", f"[{era}] png {dump(r)}")
        try:
            r = await h.client.read_resource(f"sandbox://{sid}/files//tmp/nope-res")
            raise Failed(f"[{era}] a missing file read as {dump(r)}")
        except MCPError as e:
            # -32002 (resource not found) until 2026-07-28, which made it -32602.
            want = -32002 if era == "legacy" else -32602
            check(e.error.code == want and e.error.message.startswith("E4004"), f"[{era}] missing resource: {e.error}")

        r = await h.call("files_read", {"sandbox_id": sid, "path": "/tmp/big.txt"})
        check(not r.is_error, f"[{era}] big read failed {text(r)}")
        links = [c for c in r.content if c.type == "resource_link"]
        uri = f"sandbox://{sid}/files//tmp/big.txt"
        check(links and links[0].uri == uri, f"[{era}] no resource_link for a 5000-byte file: {dump(r)[:600]}")
        check(r.structured_content == {"uri": uri, "size": 5000}, f"[{era}] {r.structured_content}")
        check("yyyy" not in dump(r), f"[{era}] the big file's content is in the result")
        r = await h.client.read_resource(uri)
        check(r.contents[0].text == "y" * 5000, f"[{era}] the link does not read back the file")


async def group_subscribe(era: str):
    """A subscription to a directory URI: a file written there is an event.

    The subscription answers before its watch has listed the directory once
    (the baseline against which changes count), so a file is written, and
    another, until an event names the URI: every write after the baseline
    is one (at most 20 writes, 1.5 s apart at most)."""
    async with with_sandbox(era) as (h, sid):
        await sh(h, sid, "mkdir -p /tmp/watched")
        uri = f"sandbox://{sid}/files//tmp/watched"
        arrived = anyio.Event()

        async def writes():
            for i in range(20):
                await h.ok("files_write", {"sandbox_id": sid, "path": f"/tmp/watched/new{i}.txt", "content": "x"})
                with anyio.move_on_after(1.5):
                    await arrived.wait()
                if arrived.is_set():
                    return
            raise Failed(f"[{era}] 20 files written under {uri}, no resources/updated")

        if era == "legacy":
            async def look():
                while not any(updated(m, uri) for m in h.notifications):
                    await anyio.sleep(0.05)  # the message handler appends; this only looks
                arrived.set()

            await h.client.session.subscribe_resource(uri)
            async with anyio.create_task_group() as tg:
                tg.start_soon(look)
                await writes()
                tg.cancel_scope.cancel()
            await h.client.session.unsubscribe_resource(uri)
        else:
            async with h.client.listen(resource_subscriptions=[uri]) as sub:
                async def look():
                    async for event in sub:
                        h.seen.append(repr(event))
                        if getattr(event, "uri", None) == uri:
                            arrived.set()
                            return

                async with anyio.create_task_group() as tg:
                    tg.start_soon(look)
                    await writes()
                    tg.cancel_scope.cancel()
        log(f"[{era}] subscription: a write under {uri} arrived as resources/updated")


def updated(message, uri: str) -> bool:
    root = getattr(message, "root", message)
    return getattr(root, "method", None) == "notifications/resources/updated" and uri in dump(root)


GROUPS = {
    "tools": group_tools, "results": group_results, "progress": group_progress, "cancel": group_cancel,
    "http-close": (group_http_close, ("legacy",)), "eof": (group_eof, ("legacy",)), "wait": group_wait, "resources": group_resources, "subscribe": group_subscribe,
    # One era each: the slowest groups, whose protocol parts the others cover in both.
    "two-minutes": (group_two_minutes, ("auto",)), "code": (group_code, ("legacy",)),
}


async def main(names: list[str]) -> int:
    failed = 0
    for name in names:
        fn, eras = GROUPS[name] if isinstance(GROUPS[name], tuple) else (GROUPS[name], ERAS)
        for era in eras:
            t0 = time.monotonic()
            try:
                await fn(era)
                log(f"ok {name} [{era}] ({time.monotonic() - t0:.1f} s)")
            except Exception as e:  # every failure is reported, the others still run
                failed += 1
                for leaf in leaves(e):
                    ours = [f.lineno for f in traceback.extract_tb(leaf.__traceback__) if f.filename == __file__]
                    at = f" (client.py:{'>'.join(map(str, ours))})" if ours else ""
                    log(f"FAILED {name} [{era}]{at}: {type(leaf).__name__}: {leaf}")
    return failed


def leaves(e: BaseException) -> list[BaseException]:
    """The failures inside task groups' exception groups."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in leaves(sub)]
    return [e]


if __name__ == "__main__":
    names = sys.argv[1:] or [n for n in GROUPS]
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        sys.exit(f"unknown groups {unknown}; groups: {', '.join(GROUPS)}")
    sys.exit(1 if anyio.run(main, names) else 0)
