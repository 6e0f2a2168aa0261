#!/usr/bin/env python3
"""Contender (b): the official Python SDK, `opensandbox==1.1.1`, asyncio API.

Runs in the SDK venv (tests/testbed/.venv-sdk). Reads OPEN_SANDBOX_DOMAIN and
OPEN_SANDBOX_API_KEY (set by bench/bench.py). Like epp-host, the SDK resolves
a sandbox's execd endpoint once and caches it (600 s); `Sandbox.connect` and a
warm-up call happen before anything is timed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

import hashlib
import io

from common import Into, Spool, args, content_sha256, emit, file_content, memory, pieces, reset_peak

from opensandbox import Sandbox
from opensandbox.config import ConnectionConfig
from opensandbox.models.execd import ExecutionHandlers
from opensandbox.models.filesystem import WriteEntry

ns = time.perf_counter_ns


def config() -> ConnectionConfig:
    # domain / api_key come from OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY.
    return ConnectionConfig(request_timeout=timedelta(seconds=300))


async def run_true(sandbox: Sandbox) -> None:
    ex = await sandbox.commands.run("true")
    if ex.exit_code != 0:
        raise RuntimeError(f"`true` exited {ex.exit_code}")


async def w_idle(a: dict) -> dict:
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    await run_true(sandbox)
    await asyncio.sleep(a.get("settle_s", 1.0))
    return {}


async def w_run(a: dict) -> dict:
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    lat = []
    for i in range(a["warmup"] + a["n"]):
        t = ns()
        await run_true(sandbox)
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
    return {"lat_us": lat}


async def w_stream(a: dict) -> dict:
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    await run_true(sandbox)
    got = {"bytes": 0, "lines": 0}

    async def on_stdout(msg):
        got["bytes"] += len(msg.text)
        got["lines"] += 1

    handlers = ExecutionHandlers(on_stdout=on_stdout, skip_accumulation=True)
    t = ns()
    ex = await sandbox.commands.run(a["cmd"], handlers=handlers)
    secs = (ns() - t) / 1e9
    if ex.exit_code != 0:
        raise RuntimeError(f"stream command exited {ex.exit_code}")
    return {"secs": secs, "text_bytes": got["bytes"], "lines": got["lines"]}


async def w_files(a: dict) -> dict:
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    await run_true(sandbox)
    content = file_content(a["size"])
    t = ns()
    await sandbox.files.write_files([WriteEntry(path=a["path"], data=content, mode=644)])
    write_s = (ns() - t) / 1e9
    t = ns()
    got = await sandbox.files.read_bytes(a["path"])
    read_s = (ns() - t) / 1e9
    if got != content:
        raise RuntimeError("read_bytes returned other content than was written")
    return {"write_s": write_s, "read_s": read_s, "bytes": a["size"]}


async def w_concurrent(a: dict) -> dict:
    boxes = [await Sandbox.connect(s, connection_config=config()) for s in a["sandboxes"]]
    n = a["n"]

    async def one(sandbox: Sandbox, t0: int) -> int:
        await run_true(sandbox)
        return (ns() - t0) // 1000

    walls, lat = [], []
    for batch in range(a["batches"] + 1):  # batch 0 warms up
        t = ns()
        done = await asyncio.gather(*(one(boxes[i % len(boxes)], t) for i in range(n)))
        if batch > 0:
            walls.append(max(done))
            lat.extend(done)
    return {"wall_us": walls, "lat_us": lat}


async def w_cycle(a: dict) -> dict:
    times = []
    for _ in range(a["n"]):
        t = ns()
        sandbox = await Sandbox.create("python:3.12-slim", metadata={"bench": "cycle"},
                                       timeout=timedelta(minutes=5), connection_config=config())
        await sandbox.kill()
        times.append((ns() - t) // 1000)
        await sandbox.close()
    return {"cycle_us": times}


async def w_snapshot_cycle(a: dict) -> dict:
    """W16 (Docker tier): `Sandbox.create(snapshot_id=ID)` vs `Sandbox.create(IMAGE)`, each
    followed by `kill`; `n` of each, alternating. The SDK takes a snapshot's id (it has no
    lookup by name in `create`), so it is handed the id."""
    times = {"image": [], "snapshot": []}
    kinds = ("image", "snapshot") if a["first"] == "image" else ("snapshot", "image")
    for i in range(a["n"]):
        for kind in (kinds if i % 2 == 0 else kinds[::-1]):
            source = {"snapshot_id": a["snapshot_id"]} if kind == "snapshot" else {"image": a["image"]}
            t = ns()
            sandbox = await Sandbox.create(**source, metadata={"bench": "snapshot-cycle"},
                                           timeout=timedelta(minutes=5), connection_config=config())
            await sandbox.kill()
            times[kind].append((ns() - t) // 1000)
            await sandbox.close()
    return {"image_us": times["image"], "snapshot_us": times["snapshot"]}


async def w_session(a: dict) -> dict:
    """`run_in_session(sid, "true")`, the session created and deleted outside the timing."""
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    sid = await sandbox.commands.create_session()
    lat = []
    for i in range(a["warmup"] + a["n"]):
        t = ns()
        ex = await sandbox.commands.run_in_session(sid, "true")
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
        if ex.exit_code != 0 or ex.error is not None:
            raise RuntimeError(f"`true` in a session: exit {ex.exit_code}, {ex.error}")
    await sandbox.commands.delete_session(sid)
    return {"lat_us": lat}


async def w_files_many(a: dict) -> dict:
    """W11: `n` small files with one `write_files` and with `n` single ones
    (each timed), then read back one by one (each timed)."""
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    await run_true(sandbox)
    n, size, root = a["n"], a["size"], a["dir"]
    content = file_content(size)
    entries = [WriteEntry(path=f"{root}/one-call/f{i}.txt", data=content, mode=644) for i in range(n)]
    await sandbox.files.write_files(entries[:1])
    t = ns()
    await sandbox.files.write_files(entries)
    one_call_us = (ns() - t) // 1000
    write_us, read_us = [], []
    for i in range(n):
        t = ns()
        await sandbox.files.write_files([WriteEntry(path=f"{root}/calls/f{i}.txt", data=content, mode=644)])
        write_us.append((ns() - t) // 1000)
    for i in range(n):
        t = ns()
        got = await sandbox.files.read_bytes(f"{root}/calls/f{i}.txt")
        read_us.append((ns() - t) // 1000)
        if got != content:
            raise RuntimeError("read_bytes returned other content than was written")
    await sandbox.commands.run(f"rm -rf '{root}'")
    return {"one_call_us": one_call_us, "calls_us": sum(write_us), "write_us": write_us, "read_us": read_us}


async def w_code(a: dict) -> dict:
    """W13: the official code-interpreter SDK's `codes.run` in a warm context."""
    from code_interpreter import CodeInterpreter
    from code_interpreter.models.code import SupportedLanguage

    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    ci = await CodeInterpreter.create(sandbox)
    ctx = await ci.codes.create_context(SupportedLanguage.PYTHON)
    lat = []
    for i in range(a["warmup"] + a["n"]):
        t = ns()
        ex = await ci.codes.run(a["code"], context=ctx)
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
        value = ex.result[0].text if ex.result else None
        if value != a["expect"]:
            raise RuntimeError(f"codes.run {a['code']!r} gave {value!r}, not {a['expect']!r}")
    await ci.codes.delete_context(ctx.id)
    return {"lat_us": lat}


# ------------------------------------------------------------ issue 24: close to the wire


class Generated(io.RawIOBase):
    """file_content(size) as a binary stream, made piece by piece as it is read
    (the SDK uploads an IOBase in 64 KiB reads); `sent` counts the bytes that went
    out (their sha256 is that of the same pieces, hashed before the clock starts)."""

    def __init__(self, size: int) -> None:
        self.it = pieces(size, 1 << 20)
        self.buf, self.at, self.sent = memoryview(b""), 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.at == len(self.buf):
            nxt = next(self.it, None)
            if nxt is None:
                return 0
            self.buf, self.at = memoryview(nxt[1]), 0
        n = min(len(b), len(self.buf) - self.at)
        b[:n] = self.buf[self.at:self.at + n]
        self.at += n
        self.sent += n
        return n


async def w_files_big(a: dict) -> dict:
    """W24 streamed files: `write_files` of a generated stream (never whole in
    memory), then `read_bytes_stream`, its chunks spooled to tmpfs while the clock
    runs and hashed after it stops."""
    sandbox = await Sandbox.connect(a["sandbox"], connection_config=config())
    await run_true(sandbox)
    size = a["size"]
    sent = content_sha256(size)  # of the pieces Generated hands out, before the clock
    src = Generated(size)
    t = ns()
    await sandbox.files.write_files([WriteEntry(path=a["path"], data=src, mode=644)])
    write_s = (ns() - t) / 1e9
    into = Into(size)
    t = ns()
    async for chunk in await sandbox.files.read_bytes_stream(a["path"], chunk_size=1 << 20):
        into.write(chunk)
    read_s = (ns() - t) / 1e9
    got = into.got
    if got != size or src.sent != size:
        raise RuntimeError(f"write_files sent {src.sent} bytes, read_bytes_stream gave {got}, not {size}")
    return {"write_s": write_s, "read_s": read_s, "bytes": size, "write_sha256": sent,
            "read_sha256": into.sha256()}


def level_batches(a: dict, n: int) -> int:
    return max(a["batches"], -(-a.get("min_calls", 0) // n))


async def w_scale_run(a: dict) -> dict:
    """W24 scaling: `n` concurrent `commands.run("true")` (asyncio.gather) for each
    level and count of sandboxes, one warm-up batch per level; this process's
    peak RSS per level."""
    boxes = [await Sandbox.connect(s, connection_config=config()) for s in a["sandboxes"]]

    async def one(sandbox: Sandbox, t0: int) -> int:
        await run_true(sandbox)
        return (ns() - t0) // 1000

    out = {}
    for k in a["series"]:
        for n in a["levels"]:
            for batch in range(level_batches(a, n) + 1):
                if batch == 1:
                    reset_peak("self")
                    walls, lat = [], []
                t = ns()
                done = await asyncio.gather(*(one(boxes[i % k], t) for i in range(n)))
                if batch > 0:
                    walls.append(max(done))
                    lat.extend(done)
            rss, hwm = memory()
            out[f"{k}x{n}"] = {"wall_us": walls, "lat_us": lat, "rss_kib": rss, "hwm_kib": hwm}
    return {"steps": out}


async def w_scale_read(a: dict) -> dict:
    """W24 scaling: `n` concurrent `read_bytes_stream` of a file of `size` bytes;
    the warm-up batch of each level spools and hashes every read after the clock
    stops, the timed batches count bytes."""
    boxes = [await Sandbox.connect(s, connection_config=config()) for s in a["sandboxes"]]
    path, size = a["path"], a["size"]
    want = content_sha256(size)

    async def one(sandbox: Sandbox, t0: int, spool) -> int:
        got = 0
        async for chunk in await sandbox.files.read_bytes_stream(path, chunk_size=1 << 20):
            got += len(chunk)
            if spool is not None:
                spool.write(chunk)
        if got != size:
            raise RuntimeError(f"read_bytes_stream {path}: {got} bytes, not {size}")
        return (ns() - t0) // 1000

    out, checked = {}, 0
    for n in a["levels"]:
        for batch in range(level_batches(a, n) + 1):
            if batch == 1:
                reset_peak("self")
                walls, lat = [], []
            spools = [Spool() for _ in range(n)] if batch == 0 else [None] * n
            t = ns()
            done = await asyncio.gather(*(one(boxes[i % len(boxes)], t, spools[i]) for i in range(n)))
            if batch == 0:
                for sp in spools:
                    h = hashlib.sha256()
                    for b in sp.blocks():
                        h.update(b)
                    sp.close()
                    if h.hexdigest() != want:
                        raise RuntimeError(f"read_bytes_stream {path}: sha256 {h.hexdigest()}, expected {want}")
                    checked += 1
            else:
                walls.append(max(done))
                lat.extend(done)
        rss, hwm = memory()
        out[f"{len(boxes)}x{n}"] = {"wall_us": walls, "lat_us": lat, "rss_kib": rss, "hwm_kib": hwm}
    return {"steps": out, "sha_checked": checked}


WORKLOADS = {"idle": w_idle, "run": w_run, "stream": w_stream, "files": w_files,
             "concurrent": w_concurrent, "cycle": w_cycle, "session": w_session,
             "files_many": w_files_many, "code": w_code, "snapshot_cycle": w_snapshot_cycle,
             "files_big": w_files_big, "scale_run": w_scale_run, "scale_read": w_scale_read}


def main() -> None:
    workload, a = args()
    logging.getLogger("opensandbox").setLevel(logging.CRITICAL)
    result = asyncio.run(WORKLOADS[workload](a))
    result.update(zip(("rss_kib", "hwm_kib"), memory()))
    emit(result)


if __name__ == "__main__":
    main()
