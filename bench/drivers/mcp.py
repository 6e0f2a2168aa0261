#!/usr/bin/env python3
"""The MCP workload (issue 22): two MCP servers for OpenSandbox through one client.

    <mcp venv python> mcp.py <contender> <workload> '<json args>'

The contenders are MCP servers on stdio, both spawned and driven by the official
Python MCP SDK (`mcp==2.3.0`, `ClientSession` over `stdio_client`, the
`initialize` handshake):

- `epp`: `$EPP_HOST_BIN mcp $EPP_GUEST_WASM --trusted-key $EPP_TRUSTED_KEY
  --cache-dir $EPP_CACHE_DIR` (as drivers/epp.py starts `epp-host run`), with
  ABX_OPENSANDBOX_BASE_URL and ABX_OPENSANDBOX_API_KEY;
- `osmcp`: OpenSandbox's own server, `opensandbox-mcp==1.1.1` from PyPI
  (`opensandbox-mcp --transport stdio --protocol http`, its console script in
  this venv), with OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY.

bench/bench.py sets those variables; bench/run makes the venv
(`.venv-mcp-bench` next to the testbed's). Each server's stderr (its logs) is
this driver's stderr. Times are taken around `session.call_tool(...)`, so they
include the client's own work (pydantic parsing, output-schema validation) for
both servers alike.
"""

from __future__ import annotations

import json
import os
import sys
import time

from common import emit, memory

# This file has the SDK's name: import the package, not this file again.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher  # noqa: E402

ns = time.perf_counter_ns

# What each server calls the same things: tool names and their arguments.
TOOLS = {
    "epp": {
        "run": ("commands_run", lambda box, cmd: {"sandbox_id": box, "cmd": cmd}),
        "read": ("files_read", lambda box, path: {"sandbox_id": box, "path": path}),
        "create": ("sandbox_create", lambda image: {"template": image, "metadata": {"bench": "mcp-cycle"}}),
        "kill": ("sandbox_kill", lambda box: {"sandbox_id": box}),
    },
    # opensandbox-mcp keeps a registry of the sandboxes it made or connected to;
    # `connect_if_missing` lets a call use one made elsewhere (the shared sandbox).
    "osmcp": {
        "run": ("command_run", lambda box, cmd: {"sandbox_id": box, "command": cmd, "connect_if_missing": True}),
        "read": ("file_read", lambda box, path: {"sandbox_id": box, "path": path, "connect_if_missing": True}),
        "create": ("sandbox_create", lambda image: {"image": image, "metadata": {"bench": "mcp-cycle"}}),
        "kill": ("sandbox_kill", lambda box: {"sandbox_id": box}),
    },
}


def server(contender: str) -> StdioServerParameters:
    """How each server is started; the SDK passes only a few safe variables of
    its own environment (HOME, PATH, …), so each gets its settings explicitly."""
    env = os.environ
    if contender == "epp":
        return StdioServerParameters(
            command=env["EPP_HOST_BIN"],
            args=["mcp", env["EPP_GUEST_WASM"], "--trusted-key", env["EPP_TRUSTED_KEY"],
                  "--cache-dir", env["EPP_CACHE_DIR"]],
            env={k: v for k, v in env.items() if k.startswith("ABX_OPENSANDBOX_")})
    if contender == "osmcp":
        return StdioServerParameters(
            command=os.path.join(os.path.dirname(sys.executable), "opensandbox-mcp"),
            args=["--transport", "stdio", "--protocol", "http"],
            env={k: env[k] for k in ("OPEN_SANDBOX_DOMAIN", "OPEN_SANDBOX_API_KEY")})
    raise SystemExit(f"unknown contender {contender!r} (epp or osmcp)")


class Recording(JSONRPCDispatcher):
    """The client's dispatcher, keeping the raw result of `tools/list` as it
    arrived (before the SDK turns it into models)."""

    listed: bytes = b""

    async def send_raw_request(self, method, params, opts=None, **kw):
        result = await super().send_raw_request(method, params, opts, **kw)
        if method == "tools/list":
            self.listed = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode()
        return result


def server_pid() -> int:
    """The server: this process's only child (the SDK does not say its pid)."""
    me, kids = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid …; comm may hold spaces and parentheses.
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            kids.append(int(entry))
    if len(kids) != 1:
        raise RuntimeError(f"expected one server process, found children {kids}")
    return kids[0]


class Client:
    def __init__(self, contender: str, session: ClientSession, dispatcher: Recording) -> None:
        self.c, self.session, self.dispatcher = contender, session, dispatcher
        self.tools: dict = {}

    async def list_tools(self) -> None:
        listed = await self.session.list_tools()
        self.tools = {t.name: t for t in listed.tools}
        for op, (name, _) in TOOLS[self.c].items():
            if name not in self.tools:
                raise RuntimeError(f"{self.c}: no tool {name} for {op} in {sorted(self.tools)}")

    def arguments(self, op: str, *a) -> tuple[str, dict]:
        """The tool and arguments for `op`, checked against the tool's inputSchema."""
        name, make = TOOLS[self.c][op]
        args = make(*a)
        props = self.tools[name].input_schema.get("properties", {})
        unknown = set(args) - set(props)
        if unknown:
            raise RuntimeError(f"{self.c}: {name} takes no {sorted(unknown)} (it takes {sorted(props)})")
        return name, args

    async def call(self, op: str, *a):
        name, args = self.arguments(op, *a)
        return await self.session.call_tool(name, args)

    async def ok(self, op: str, *a) -> dict:
        """A call that must succeed; its structuredContent."""
        result = await self.call(op, *a)
        if result.is_error:
            raise RuntimeError(f"{self.c} {op} failed: {text_of(result)[:1000]}")
        return result.structured_content or {}


def text_of(result) -> str:
    return "\n".join(getattr(block, "text", f"[{block.type} block]") for block in result.content)


async def run_true(client: Client, box: str) -> None:
    out = await client.ok("run", box, "true")
    if out.get("exit_code") != 0:
        raise RuntimeError(f"{client.c}: `true` gave {out}")


async def w_idle(client: Client, a: dict) -> dict:
    """After initialize and tools/list: the listing's size and the server's memory."""
    await anyio.sleep(a.get("settle_s", 1.0))
    rss, hwm = memory(server_pid())
    info = client.session.server_info
    return {"tools": len(client.tools), "list_bytes": len(client.dispatcher.listed),
            "names": sorted(client.tools), "server_rss_kib": rss, "server_hwm_kib": hwm,
            "protocol": client.session.protocol_version, "server": f"{info.name} {info.version}" if info else ""}


async def w_run(client: Client, a: dict) -> dict:
    lat = []
    for i in range(a["warmup"] + a["n"]):
        t = ns()
        await run_true(client, a["sandbox"])
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
    return {"lat_us": lat}


async def w_cycle(client: Client, a: dict) -> dict:
    """sandbox_create (each server waits until the sandbox answers) then sandbox_kill."""
    times = []
    for _ in range(a["n"]):
        t = ns()
        made = await client.ok("create", a["image"])
        await client.ok("kill", made["sandbox_id"])
        times.append((ns() - t) // 1000)
    return {"cycle_us": times}


async def w_errors(client: Client, a: dict) -> dict:
    """What a model is shown for a failing command and for a missing file: each
    result's text blocks and isError, as the client got them."""
    box = a["sandbox"]
    await run_true(client, box)  # connected, warm
    out = {}
    for key, op, arg in (("failed_command", "run", a["cmd"]), ("missing_file", "read", a["path"])):
        name, args = client.arguments(op, box, arg)
        try:
            result = await client.session.call_tool(name, args)
        except Exception as e:  # the client refused the result (e.g. an output schema it breaks)
            out[key] = {"tool": name, "arguments": args, "client_error": f"{type(e).__name__}: {e}"}
            continue
        out[key] = {"tool": name, "arguments": args, "is_error": bool(result.is_error), "text": text_of(result),
                    "structured": result.structured_content}
    return out


WORKLOADS = {"idle": w_idle, "run": w_run, "cycle": w_cycle, "errors": w_errors}


async def drive(contender: str, workload: str, a: dict) -> dict:
    async with stdio_client(server(contender), errlog=sys.stderr) as (read, write):
        dispatcher = Recording(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            client = Client(contender, session, dispatcher)
            await client.list_tools()
            return await WORKLOADS[workload](client, a)


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} <epp|osmcp> <workload> '<json args>'")
    contender, workload, a = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    result = anyio.run(drive, contender, workload, a)
    result.update(zip(("rss_kib", "hwm_kib"), memory()))
    emit(result)


if __name__ == "__main__":
    main()
