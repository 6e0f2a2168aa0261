"""Conformance scenario with the official, unmodified Python SDK (opensandbox==1.1.1).

Run with the SDK venv: ``.venv-sdk/bin/python python_scenario.py --mode direct|proxy``.
Reads OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY like the SDK itself.
Exits non-zero with a message at the first mismatch.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
import time
from datetime import datetime, timedelta, timezone

import httpx

from opensandbox import Sandbox, SandboxManager
from opensandbox.config import ConnectionConfig
from opensandbox.exceptions import SandboxApiException, SandboxException
from opensandbox.models.execd import ExecutionHandlers, RunCommandOpts, _format_output_messages
from opensandbox.models.filesystem import DirectoryListEntry, MoveEntry, SearchEntry, WriteEntry

from scenario import Mismatch, check, parse_mode, run, section

MODE = "direct"
# `testbed check --docker` sets docker: sandboxes are containers of the image (cwd /, HOME /root).
TIER = os.environ.get("TESTBED_TIER", "local")



def stdout_of(execution) -> str:
    return _format_output_messages(execution.logs.stdout)


def stderr_of(execution) -> str:
    return _format_output_messages(execution.logs.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config() -> ConnectionConfig:
    # domain / api_key come from OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY.
    return ConnectionConfig(use_server_proxy=(MODE == "proxy"), request_timeout=timedelta(seconds=60))


class Ctx:
    sandbox: Sandbox
    domain: str
    home: str = ""
    base: str = ""
    binary: bytes = bytes(range(256)) * 64 + b"\x00\r\n\xff"


async def scenario() -> None:
    ctx = Ctx()
    ctx.domain = os.environ.get("OPEN_SANDBOX_DOMAIN", "localhost:8080")
    print(f"python sdk scenario, mode={MODE}, server={ctx.domain}", flush=True)
    print("create")
    ctx.sandbox = await Sandbox.create(
        "python:3.11",
        env={"FOO": "bar baz", "EMPTY": ""},
        metadata={"suite": "python-sdk", "mode": MODE},
        timeout=timedelta(minutes=5),
        connection_config=config(),
    )
    check(bool(ctx.sandbox.id), f"Sandbox.create returned id {ctx.sandbox.id}")
    try:
        for name, fn in (
            ("get_info / endpoint", part_info),
            ("commands", part_commands),
            ("command argv form (execd >= 1.1)", part_argv),
            ("command timeout", part_timeout),
            ("background command", part_background),
            ("bash sessions", part_sessions),
            ("files", part_files),
            ("endpoint of a sandbox port", part_port),
            ("pause / resume / connect", part_pause),
            ("renew", part_renew),
            ("manager: list / patch metadata", part_manager),
            ("kill", part_kill),
        ):
            await section(name, fn, ctx)
    finally:
        try:
            await ctx.sandbox.kill()
        except SandboxApiException:
            pass
        await ctx.sandbox.close()


async def part_info(ctx: Ctx) -> None:
    sandbox = ctx.sandbox
    info = await sandbox.get_info()
    check(info.status.state == "Running", f"get_info state Running ({info.status.state})")
    check(info.image is not None and info.image.image == "python:3.11", "get_info image python:3.11")
    check(info.entrypoint == ["tail", "-f", "/dev/null"], "default entrypoint")
    check(info.metadata == {"suite": "python-sdk", "mode": MODE}, f"metadata {info.metadata}")
    check(info.expires_at is not None, "expires_at set (timeout 5 min)")
    ep = await sandbox.get_endpoint(44772)
    if MODE == "proxy":
        check(ep.endpoint == f"{ctx.domain}/v1/sandboxes/{sandbox.id}/proxy/44772",
              f"server proxy endpoint {ep.endpoint}")
    else:
        check(re.fullmatch(r"127\.0\.0\.1:\d+/proxy/44772", ep.endpoint) is not None,
              f"bridge endpoint {ep.endpoint}")


async def part_commands(ctx: Ctx) -> None:
    sandbox = ctx.sandbox
    ex = await sandbox.commands.run('echo "$FOO|$EMPTY|$OPENSANDBOX_ID"; pwd; echo "$HOME"')
    lines = stdout_of(ex).split("\n") + ["", "", ""]
    ctx.home = lines[2]
    ctx.base = f"{ctx.home}/conf"
    check(lines[0] == f"bar baz||{sandbox.id}", f"create env reaches commands ({lines[0]!r})")
    if TIER == "docker":
        check(lines[1:3] == ["/", "/root"], f"cwd / and HOME /root, the image's ({lines[1]}, {lines[2]})")
    else:
        check(lines[1] == lines[2] and lines[1].endswith(sandbox.id), f"cwd = HOME = sandbox folder ({lines[1]})")

    seen: dict[str, list] = {"init": [], "stdout": []}

    async def on_init(event):
        seen["init"].append(event)

    async def on_stdout(event):
        seen["stdout"].append(event)

    ex = await sandbox.commands.run(
        "echo hello; echo oops >&2; printf 'no newline'",
        handlers=ExecutionHandlers(on_init=on_init, on_stdout=on_stdout),
    )
    check(ex.exit_code == 0 and ex.error is None, f"exit code 0 (got {ex.exit_code}, {ex.error})")
    check(stdout_of(ex) == "hello\nno newline", f"stdout {stdout_of(ex)!r}")
    check(stderr_of(ex) == "oops", f"stderr {stderr_of(ex)!r}")
    check(bool(ex.id) and len(seen["init"]) == 1 and seen["init"][0].id == ex.id, "init event carries the id")
    check(len(seen["stdout"]) >= 1, "stdout handler called")
    check(ex.complete is not None, "execution_complete received")

    ex = await sandbox.commands.run("echo out; echo err >&2; exit 7")
    check(ex.exit_code == 7, f"failing command exit code 7 (got {ex.exit_code})")
    check(ex.error is not None and ex.error.name == "CommandExecError" and ex.error.value == "7",
          f"error CommandExecError/7 ({ex.error})")
    check(stdout_of(ex) == "out" and stderr_of(ex) == "err", "output of a failing command")

    ex = await sandbox.commands.run(
        'echo "$X"; pwd', opts=RunCommandOpts(envs={"X": "from-opts"}, working_directory="/tmp")
    )
    check(stdout_of(ex) == "from-opts\n/tmp", f"envs + working_directory ({stdout_of(ex)!r})")


async def part_argv(ctx: Ctx) -> None:
    ex = await ctx.sandbox.commands.run(["printf", "%s|", "a b", "$HOME"])
    check(stdout_of(ex) == "a b|$HOME|", f"argv form, no shell expansion ({stdout_of(ex)!r})")


async def part_timeout(ctx: Ctx) -> None:
    started = time.monotonic()
    ex = await ctx.sandbox.commands.run("sleep 10", opts=RunCommandOpts(timeout=timedelta(seconds=1)))
    check(time.monotonic() - started < 8, "timeout ends the command early")
    check(ex.exit_code != 0 and ex.error is not None, f"timed-out command fails ({ex.exit_code}, {ex.error})")


async def part_sessions(ctx: Ctx) -> None:
    cmds = ctx.sandbox.commands
    sid = await cmds.create_session(working_directory="/tmp")
    check(bool(sid), f"create_session returns an id ({sid})")
    ex = await cmds.run_in_session(sid, "export SESS_VAR=kept; mkdir -p sess-sub; cd sess-sub; echo one; echo two >&2")
    check(ex.exit_code == 0 and ex.error is None, f"run_in_session exit 0 ({ex.exit_code}, {ex.error})")
    check(stdout_of(ex) == "one\ntwo", f"session output, stderr merged ({stdout_of(ex)!r})")
    ex = await cmds.run_in_session(sid, 'echo "$SESS_VAR $(pwd)"; exit 4')
    check(stdout_of(ex) == "kept /tmp/sess-sub", f"env and cwd carry over ({stdout_of(ex)!r})")
    check(ex.exit_code == 4 and ex.error is not None and ex.error.value == "4",
          f"failing session run ({ex.exit_code}, {ex.error})")
    ex = await cmds.run_in_session(sid, "pwd", working_directory="/")
    check(stdout_of(ex) == "/", f"working_directory override ({stdout_of(ex)!r})")
    started = time.monotonic()
    try:
        ex = await cmds.run_in_session(sid, "sleep 10", timeout=timedelta(seconds=1))
        failed = ex.error is not None or ex.exit_code != 0
    except SandboxException:
        failed = True
    check(failed and time.monotonic() - started < 8, "a session run's timeout ends it early")
    await cmds.delete_session(sid)
    try:
        await cmds.delete_session(sid)
        check(False, "deleting a deleted session fails")
    except SandboxException:
        check(True, "deleting a deleted session fails")
    try:
        await cmds.run_in_session(sid, "true")
        check(False, "running in a deleted session fails")
    except SandboxException:
        check(True, "running in a deleted session fails")


async def part_background(ctx: Ctx) -> None:
    sandbox = ctx.sandbox
    bg = await sandbox.commands.run(
        "for i in 1 2 3; do echo line$i; sleep 0.2; done; sleep 60",
        opts=RunCommandOpts(background=True),
    )
    check(bool(bg.id), f"background run returns an id ({bg.id})")
    status = await sandbox.commands.get_command_status(bg.id)
    check(status.running is True, f"status running ({status})")
    deadline = time.monotonic() + 10
    while True:
        logs = await sandbox.commands.get_background_command_logs(bg.id)
        if "line3" in logs.content or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    check(logs.content.splitlines()[:3] == ["line1", "line2", "line3"], f"background logs {logs.content!r}")
    check(logs.cursor is not None, f"logs cursor {logs.cursor}")
    more = await sandbox.commands.get_background_command_logs(bg.id, cursor=logs.cursor)
    check(more.content == "", f"nothing new after the cursor ({more.content!r})")
    await sandbox.commands.interrupt(bg.id)
    deadline = time.monotonic() + 10
    while True:
        status = await sandbox.commands.get_command_status(bg.id)
        if not status.running or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    check(status.running is False, f"interrupt stops it ({status})")


async def part_files(ctx: Ctx) -> None:
    sandbox, base, binary = ctx.sandbox, ctx.base, ctx.binary
    check(bool(base), "sandbox home known")
    text = "héllo\nwörld\n"
    await sandbox.files.write_files([
        WriteEntry(path=f"{base}/a.txt", data=text, mode=644),
        WriteEntry(path=f"{base}/bin.dat", data=binary, mode=600),
    ])
    check(await sandbox.files.read_file(f"{base}/a.txt") == text, "write/read text (utf-8)")
    check(await sandbox.files.read_bytes(f"{base}/bin.dat") == binary, f"write/read binary ({len(binary)} bytes)")
    check(await sandbox.files.read_bytes(f"{base}/bin.dat", range_header="bytes=1-3") == b"\x01\x02\x03",
          "read with Range")
    infos = await sandbox.files.get_file_info([f"{base}/a.txt", f"{base}/bin.dat"])
    a, b = infos[f"{base}/a.txt"], infos[f"{base}/bin.dat"]
    check(a.size == len(text.encode()) and a.mode == 644, f"info a.txt size/mode ({a.size}, {a.mode})")
    check(b.size == len(binary) and b.mode == 600, f"info bin.dat size/mode ({b.size}, {b.mode})")
    found = await sandbox.files.search(SearchEntry(path=base, pattern="*.txt"))
    check([f.path for f in found] == [f"{base}/a.txt"], f"search *.txt ({[f.path for f in found]})")
    await sandbox.files.create_directories([WriteEntry(path=f"{base}/sub/deeper", mode=755)])
    listed = await sandbox.files.list_directory(DirectoryListEntry(path=base, depth=1))
    names = sorted(f.path for f in listed)
    check({f"{base}/a.txt", f"{base}/bin.dat", f"{base}/sub"} <= set(names), f"list_directory ({names})")
    kinds = {f.path: f.entry_type for f in listed}
    check(kinds.get(f"{base}/sub") == "directory" and kinds.get(f"{base}/a.txt") == "file",
          f"list_directory entry types ({kinds})")
    await sandbox.files.delete_directories([f"{base}/sub"])
    listed = await sandbox.files.list_directory(DirectoryListEntry(path=base, depth=1))
    check(f"{base}/sub" not in [f.path for f in listed], "delete_directories removes the tree")
    ex = await sandbox.commands.run(f"cat {base}/a.txt | wc -l; stat -c %a {base}/bin.dat")
    check(stdout_of(ex) == "2\n600", f"files are visible to commands ({stdout_of(ex)!r})")
    await sandbox.files.move_files([MoveEntry(src=f"{base}/a.txt", dest=f"{base}/b.txt")])
    check(await sandbox.files.read_file(f"{base}/b.txt") == text, "move keeps the content")
    await sandbox.files.delete_files([f"{base}/b.txt"])
    try:
        await sandbox.files.get_file_info([f"{base}/b.txt"])
    except SandboxApiException as exc:
        check(exc.status_code == 404, f"deleted file is gone (404, got {exc.status_code})")
    else:
        raise Mismatch("get_file_info of a deleted file did not fail")


async def part_port(ctx: Ctx) -> None:
    sandbox = ctx.sandbox
    port = free_port()
    await sandbox.commands.run(
        f"exec python3 -m http.server {port} --bind 127.0.0.1 --directory {ctx.base}",
        opts=RunCommandOpts(background=True),
    )
    ep = await sandbox.get_endpoint(port)
    url = f"http://{ep.endpoint}/bin.dat"
    resp = None
    async with httpx.AsyncClient(headers=ep.headers or {}, timeout=10) as client:
        for _ in range(50):
            try:
                resp = await client.get(url)
                if resp.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    check(resp is not None and resp.status_code == 200 and resp.content == ctx.binary,
          f"GET {url} through the endpoint ({resp.status_code if resp else 'no answer'})")


async def part_pause(ctx: Ctx) -> None:
    sandbox = ctx.sandbox
    await sandbox.pause()
    info = await sandbox.get_info()
    check(info.status.state == "Paused", f"paused ({info.status.state})")
    resumed = await Sandbox.resume(sandbox.id, connection_config=config())
    try:
        info = await resumed.get_info()
        check(info.status.state == "Running", "Sandbox.resume -> Running")
        ex = await resumed.commands.run("echo back")
        check(stdout_of(ex) == "back", "commands work after resume")
    finally:
        await resumed.close()
    connected = await Sandbox.connect(sandbox.id, connection_config=config())
    try:
        ex = await connected.commands.run(f"test -d {ctx.home} && echo kept")
        check(stdout_of(ex) == "kept", "Sandbox.connect sees the same sandbox")
    finally:
        await connected.close()


async def part_renew(ctx: Ctx) -> None:
    before = datetime.now(timezone.utc)
    renewed = await ctx.sandbox.renew(timedelta(minutes=30))
    delta = renewed.expires_at - before
    check(timedelta(minutes=29) < delta < timedelta(minutes=31), f"renew +30 min ({renewed.expires_at})")
    info = await ctx.sandbox.get_info()
    check(abs((info.expires_at - renewed.expires_at).total_seconds()) < 1, "get_info shows the renewed expiry")


async def part_manager(ctx: Ctx) -> None:
    from opensandbox.models.sandboxes import SandboxFilter

    async with await SandboxManager.create(connection_config=config()) as manager:
        page = await manager.list_sandbox_infos(SandboxFilter(metadata={"suite": "python-sdk", "mode": MODE}))
        check([s.id for s in page.sandbox_infos] == [ctx.sandbox.id], "list by metadata finds it")
        await manager.patch_sandbox_metadata(ctx.sandbox.id, {"mode": None, "extra": "1"})
        info = await manager.get_sandbox_info(ctx.sandbox.id)
        check(info.metadata == {"suite": "python-sdk", "extra": "1"}, f"patch metadata ({info.metadata})")


async def part_kill(ctx: Ctx) -> None:
    await ctx.sandbox.kill()
    try:
        await ctx.sandbox.get_info()
    except SandboxApiException as exc:
        check(exc.status_code == 404, f"killed sandbox is gone (404, got {exc.status_code})")
    else:
        raise Mismatch("get_info after kill did not fail")


def main() -> int:
    global MODE
    MODE = parse_mode()
    return run(f"python sdk ({MODE})", scenario, ("opensandbox",))


if __name__ == "__main__":
    sys.exit(main())
