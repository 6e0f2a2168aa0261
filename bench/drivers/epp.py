#!/usr/bin/env python3
"""Contender (a): `epp-host run` driven over stdio, as an agent framework would.

Single-threaded on purpose: requests are written, answers read in this thread,
so no thread hand-off adds to a measured round trip. Environment: EPP_HOST_BIN,
EPP_GUEST_WASM, EPP_TRUSTED_KEY, EPP_CACHE_DIR, ABX_OPENSANDBOX_BASE_URL and
ABX_OPENSANDBOX_API_KEY (set by bench/bench.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from common import args, emit, file_content, memory

ns = time.perf_counter_ns


class Host:
    def __init__(self) -> None:
        argv = [os.environ["EPP_HOST_BIN"], "run", os.environ["EPP_GUEST_WASM"],
                "--trusted-key", os.environ["EPP_TRUSTED_KEY"], "--cache-dir", os.environ["EPP_CACHE_DIR"]]
        # bench/profile-epp runs the host under valgrind this way (with smaller
        # pools: valgrind cannot reserve the default pools' address space).
        argv = os.environ.get("EPP_HOST_WRAPPER", "").split() + argv + os.environ.get("EPP_HOST_ARGS", "").split()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1 << 20)
        self.next_id = 0

    def send(self, method: str, params: dict) -> int:
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("epp-host closed its output")
        return json.loads(line)

    def answer(self, msg: dict) -> dict:
        if "error" in msg:
            raise RuntimeError(f"epp-host answered an error: {msg['error']}")
        return msg["result"]

    def call(self, method: str, params: dict, on_note=None) -> dict:
        want = self.send(method, params)
        while True:
            msg = self.read()
            if msg.get("id") == want:
                return self.answer(msg)
            if on_note is not None and "method" in msg:
                on_note(msg)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def profile(host: Host, on: bool) -> None:
    """Under bench/profile-epp, count instructions of the timed part only."""
    if os.environ.get("EPP_PROFILE_TOGGLE"):
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(host.proc.pid)],
                       check=True, stdout=subprocess.DEVNULL)


def run_true(host: Host, sandbox: str) -> None:
    result = host.call("commands.run", {"sandbox_id": sandbox, "cmd": "true"})
    if result["exit_code"] != 0:
        raise RuntimeError(f"`true` exited {result['exit_code']}")


def w_idle(host: Host, a: dict) -> dict:
    host.call("epp.hello", {"protocol": "EPP/1"})
    time.sleep(a.get("settle_s", 1.0))
    rss, hwm = memory(host.proc.pid)
    return {"host_rss_kib": rss, "host_hwm_kib": hwm}


def w_run(host: Host, a: dict) -> dict:
    lat = []
    for i in range(a["warmup"] + a["n"]):
        if i == a["warmup"]:
            profile(host, True)
        t = ns()
        run_true(host, a["sandbox"])
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
    profile(host, False)
    return {"lat_us": lat}


# Every commands.output notification starts like this (the host writes compact JSON
# with its keys in this order); the final answer does not.
NOTE = b'{"jsonrpc":"2.0","method":"commands.output"'


def read_raw_answer(host: Host, want: int, on_line=None) -> bytes:
    """Lines up to the answer to `want`, undecoded: the timed part reads only."""
    while True:
        line = host.proc.stdout.readline()
        if not line:
            raise RuntimeError("epp-host closed its output")
        if line.startswith(NOTE) or line.startswith(b'{"jsonrpc":"2.0","method"'):
            if on_line is not None:
                on_line(line)
            continue
        msg = json.loads(line)
        if msg.get("id") == want:
            host.answer(msg)
            return line


def w_stream(host: Host, a: dict) -> dict:
    """The client takes the notifications as they come but decodes them only
    after the clock stops (Python's json would otherwise be what is measured);
    that decoding is reported separately as decode_s."""
    run_true(host, a["sandbox"])  # endpoint resolved, connection pool warm
    notes = []
    profile(host, True)
    t = ns()
    want = host.send("commands.run", {"sandbox_id": a["sandbox"], "cmd": a["cmd"], "stream": True})
    answer = read_raw_answer(host, want, notes.append)
    secs = (ns() - t) / 1e9
    profile(host, False)
    if json.loads(answer)["result"]["exit_code"] != 0:
        raise RuntimeError("the stream command failed")
    t = ns()
    got = {"bytes": 0, "lines": 0}
    for line in notes:
        msg = json.loads(line)
        if msg["method"] == "commands.output":
            data = msg["params"]["data"]
            got["bytes"] += len(data)
            got["lines"] += data.count("\n")
    decode_s = (ns() - t) / 1e9
    return {"secs": secs, "text_bytes": got["bytes"], "lines": got["lines"],
            "notifications": len(notes), "decode_s": decode_s}


def w_files(host: Host, a: dict) -> dict:
    """Requests are encoded before the clock starts and the answer decoded after
    it stops; both costs of a Python client are reported (encode_s, decode_s)."""
    run_true(host, a["sandbox"])
    content = file_content(a["size"]).decode()
    t = ns()
    host.next_id += 1
    line = json.dumps({"jsonrpc": "2.0", "id": host.next_id, "method": "files.write",
                       "params": {"sandbox_id": a["sandbox"], "path": a["path"], "content": content}}).encode()
    encode_s = (ns() - t) / 1e9
    profile(host, True)
    t = ns()
    host.proc.stdin.write(line + b"\n")
    host.proc.stdin.flush()
    read_raw_answer(host, host.next_id)
    write_s = (ns() - t) / 1e9
    del line
    t = ns()
    want = host.send("files.read", {"sandbox_id": a["sandbox"], "path": a["path"]})
    answer = read_raw_answer_undecoded(host, want)
    read_s = (ns() - t) / 1e9
    profile(host, False)
    t = ns()
    result = host.answer(json.loads(answer))
    decode_s = (ns() - t) / 1e9
    if result["content"] != content:
        raise RuntimeError("files.read returned other content than was written")
    return {"write_s": write_s, "read_s": read_s, "bytes": a["size"],
            "encode_s": encode_s, "decode_s": decode_s}


def read_raw_answer_undecoded(host: Host, want: int) -> bytes:
    """The answer line to `want`, not decoded (nothing else is in flight)."""
    prefix = b'{"jsonrpc":"2.0","id":%d,' % want
    while True:
        line = host.proc.stdout.readline()
        if not line:
            raise RuntimeError("epp-host closed its output")
        if line.startswith(prefix):
            return line


def w_concurrent(host: Host, a: dict) -> dict:
    boxes, n = a["sandboxes"], a["n"]
    walls, lat = [], []
    for batch in range(a["batches"] + 1):  # batch 0 warms up
        params = [{"sandbox_id": boxes[i % len(boxes)], "cmd": "true"} for i in range(n)]
        lines = []
        first = host.next_id + 1
        for p in params:
            host.next_id += 1
            lines.append(json.dumps({"jsonrpc": "2.0", "id": host.next_id, "method": "commands.run", "params": p}))
        t = ns()
        host.proc.stdin.write(("\n".join(lines) + "\n").encode())
        host.proc.stdin.flush()
        done = []
        while len(done) < n:
            msg = host.read()
            if msg.get("id") is not None and msg["id"] >= first:
                host.answer(msg)
                done.append((ns() - t) // 1000)
        if batch > 0:
            walls.append(max(done))
            lat.extend(done)
    rss, hwm = memory(host.proc.pid)
    return {"wall_us": walls, "lat_us": lat, "host_rss_kib": rss, "host_hwm_kib": hwm}


def w_cycle(host: Host, a: dict) -> dict:
    host.call("epp.hello", {})
    times = []
    for _ in range(a["n"]):
        t = ns()
        info = host.call("sandbox.create", {"template": "python:3.12-slim", "metadata": {"bench": "cycle"}})
        host.call("sandbox.kill", {"sandbox_id": info["sandbox_id"]})
        times.append((ns() - t) // 1000)
    return {"cycle_us": times}


WORKLOADS = {"idle": w_idle, "run": w_run, "stream": w_stream, "files": w_files,
             "concurrent": w_concurrent, "cycle": w_cycle}


def main() -> None:
    workload, a = args()
    host = Host()
    try:
        result = WORKLOADS[workload](host, a)
    finally:
        host.close()
    result.update(zip(("rss_kib", "hwm_kib"), memory()))
    emit(result)


if __name__ == "__main__":
    main()
