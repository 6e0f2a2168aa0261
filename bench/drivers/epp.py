#!/usr/bin/env python3
"""Contender (a): `epp-host run` driven over stdio, as an agent framework would.

Single-threaded on purpose: requests are written, answers read in this thread,
so no thread hand-off adds to a measured round trip. Environment: EPP_HOST_BIN,
EPP_GUEST_WASM, EPP_TRUSTED_KEY, EPP_CACHE_DIR, ABX_OPENSANDBOX_BASE_URL and
ABX_OPENSANDBOX_API_KEY (set by bench/bench.py).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import queue
import random
import subprocess
import sys
import threading
import time

from common import Into, Spool, args, content_sha256, cpu_times, emit, file_content, memory, pieces, reset_peak

ns = time.perf_counter_ns


class Host:
    def __init__(self, env: dict | None = None, command: str = "run") -> None:
        argv = [os.environ["EPP_HOST_BIN"], command, os.environ["EPP_GUEST_WASM"],
                "--trusted-key", os.environ["EPP_TRUSTED_KEY"], "--cache-dir", os.environ["EPP_CACHE_DIR"]]
        # bench/profile-epp runs the host under valgrind this way (with smaller
        # pools: valgrind cannot reserve the default pools' address space).
        argv = os.environ.get("EPP_HOST_WRAPPER", "").split() + argv + os.environ.get("EPP_HOST_ARGS", "").split()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1 << 20,
                                     env=None if env is None else {**os.environ, **env})
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


def output_of(notes: list, method: str) -> dict:
    """Characters and lines of the output in the `method` notifications (raw lines)."""
    got = {"bytes": 0, "lines": 0}
    for line in notes:
        msg = json.loads(line)
        if msg["method"] == method:
            data = msg["params"]["data"]
            got["bytes"] += len(data)
            got["lines"] += data.count("\n")
    return got


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
    got = output_of(notes, "commands.output")
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
    del answer, result
    streamed = files_streamed(host, a, content)
    return {"write_s": write_s, "read_s": read_s, "bytes": a["size"],
            "encode_s": encode_s, "decode_s": decode_s, **streamed}


STREAM_CHUNK = 1 << 20


def w_files_stream(host: Host, a: dict) -> dict:
    """Only the streamed half of workload 4 (for bench/profile-epp)."""
    run_true(host, a["sandbox"])
    profile(host, True)
    result = files_streamed(host, a, file_content(a["size"]).decode())
    profile(host, False)
    return result


def files_streamed(host: Host, a: dict, content: str) -> dict:
    """The same file with `stream: true`: `files.write` then its content in
    `files.write_chunk` notifications of 1 MiB, sent back to back (encoded
    before the clock starts); `files.read` answered in `files.data`
    notifications (decoded after the clock stops)."""
    path = a["path"] + ".streamed"
    host.next_id += 1
    want = host.next_id
    lines = [json.dumps({"jsonrpc": "2.0", "id": want, "method": "files.write",
                         "params": {"sandbox_id": a["sandbox"], "path": path, "size": len(content),
                                    "stream": True}}).encode() + b"\n"]
    for i in range(0, len(content), STREAM_CHUNK):
        lines.append(json.dumps({"jsonrpc": "2.0", "method": "files.write_chunk",
                                 "params": {"request_id": want, "content": content[i:i + STREAM_CHUNK]}}
                                ).encode() + b"\n")
    t = ns()
    for line in lines:
        host.proc.stdin.write(line)
    host.proc.stdin.flush()
    read_raw_answer(host, want)
    write_s = (ns() - t) / 1e9
    del lines
    notes = []
    t = ns()
    want = host.send("files.read", {"sandbox_id": a["sandbox"], "path": path, "stream": True})
    read_raw_answer(host, want, notes.append)
    read_s = (ns() - t) / 1e9
    got = "".join(json.loads(line)["params"]["content"] for line in notes)
    if got != content:
        raise RuntimeError("files.read with stream returned other content than was written")
    return {"stream_write_s": write_s, "stream_read_s": read_s, "stream_notes": len(notes)}


def read_raw_answer_undecoded(host: Host, want: int) -> bytes:
    """The answer line to `want`, not decoded (nothing else is in flight)."""
    prefix = b'{"jsonrpc":"2.0","id":%d,' % want
    while True:
        line = host.proc.stdout.readline()
        if not line:
            raise RuntimeError("epp-host closed its output")
        if line.startswith(prefix):
            return line


def run_batch(host: Host, boxes: list, n: int) -> list:
    """`n` `commands.run "true"` written at once (request i → sandbox i mod len);
    each call's time from the batch's start to its answer, in answer order."""
    lines = []
    first = host.next_id + 1
    for i in range(n):
        host.next_id += 1
        lines.append(json.dumps({"jsonrpc": "2.0", "id": host.next_id, "method": "commands.run",
                                 "params": {"sandbox_id": boxes[i % len(boxes)], "cmd": "true"}}))
    t = ns()
    host.proc.stdin.write(("\n".join(lines) + "\n").encode())
    host.proc.stdin.flush()
    done = []
    while len(done) < n:
        msg = host.read()
        if msg.get("id") is not None and msg["id"] >= first:
            result = host.answer(msg)
            done.append((ns() - t) // 1000)
            if result["exit_code"] != 0:
                raise RuntimeError(f"`true` exited {result['exit_code']}")
    return done


def w_concurrent(host: Host, a: dict) -> dict:
    boxes, n = a["sandboxes"], a["n"]
    walls, lat = [], []
    for batch in range(a["batches"] + 1):  # batch 0 warms up
        done = run_batch(host, boxes, n)
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


def cycle_order(a: dict, i: int) -> tuple[str, str]:
    """W16: which kind goes first in pair `i` (alternating, from `first`)."""
    kinds = ("image", "snapshot") if a["first"] == "image" else ("snapshot", "image")
    return kinds if i % 2 == 0 else kinds[::-1]


def w_snapshot_cycle(host: Host, a: dict) -> dict:
    """W16 (Docker tier): `sandbox.create {template: SNAPSHOT}` vs the default template
    (`base`, the image), each followed by `sandbox.kill`; `n` of each, alternating."""
    host.call("epp.hello", {})
    times = {"image": [], "snapshot": []}
    for i in range(a["n"]):
        for kind in cycle_order(a, i):
            params = {"metadata": {"bench": "snapshot-cycle"}}
            if kind == "snapshot":
                params["template"] = a["snapshot"]
            t = ns()
            info = host.call("sandbox.create", params)
            host.call("sandbox.kill", {"sandbox_id": info["sandbox_id"]})
            times[kind].append((ns() - t) // 1000)
            ok = (info["template"] == a["snapshot"] and info["image"] is None if kind == "snapshot"
                  else info["image"] == a["image"])
            if not ok:
                raise RuntimeError(f"a {kind} create answered template {info['template']!r}, "
                                   f"image {info['image']!r}")
    return {"image_us": times["image"], "snapshot_us": times["snapshot"]}


def w_session(host: Host, a: dict) -> dict:
    """`sessions.run "true"` in one session (created and closed outside the timing)."""
    box = a["sandbox"]
    sid = host.call("sessions.create", {"sandbox_id": box})["session_id"]
    lat = []
    for i in range(a["warmup"] + a["n"]):
        t = ns()
        result = host.call("sessions.run", {"sandbox_id": box, "session_id": sid, "cmd": "true"})
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
        if result["exit_code"] != 0:
            raise RuntimeError(f"`true` in a session exited {result['exit_code']}")
    host.call("sessions.close", {"sandbox_id": box, "session_id": sid})
    return {"lat_us": lat}


def w_stdin(host: Host, a: dict) -> dict:
    """One line through `cat` run with stdin: from sending `commands.send_input`
    to the `commands.output` notification that echoes the whole line."""
    box = a["sandbox"]
    run_true(host, box)
    req = host.send("commands.run", {"sandbox_id": box, "cmd": "cat", "stdin": True, "stream": True})
    command_id = None
    while command_id is None:
        msg = host.read()
        if msg.get("id") == req:
            raise RuntimeError(f"cat ended before it started: {msg}")
        if msg.get("method") == "commands.started" and msg["params"]["request_id"] == req:
            command_id = msg["params"]["command_id"]
    lat = []
    for i in range(a["warmup"] + a["n"]):
        line = f"line {i} of the stdin round trip\n"
        data = base64.b64encode(line.encode()).decode()
        t = ns()
        want = host.send("commands.send_input", {"sandbox_id": box, "command_id": command_id, "data": data})
        echoed, answered, took = "", False, None
        while took is None or not answered:
            msg = host.read()
            if msg.get("id") == want:
                host.answer(msg)
                answered = True
            elif msg.get("method") == "commands.output" and msg["params"]["request_id"] == req:
                echoed += msg["params"]["data"]
                if took is None and line in echoed:
                    took = (ns() - t) // 1000
            elif msg.get("id") == req:
                raise RuntimeError(f"cat ended early: {msg}")
        if i >= a["warmup"]:
            lat.append(took)
    # cat's own answer (137) may come before or after the kill's.
    kill = host.send("commands.kill", {"sandbox_id": box, "command_id": command_id})
    waiting = {kill, req}
    while waiting:
        waiting.discard(host.read().get("id"))
    return {"lat_us": lat}


class Reader:
    """epp-host's output read in a thread and stamped on arrival, so a wait can
    time out (the watch workload); each item is (perf_counter_ns, message)."""

    def __init__(self, host: Host) -> None:
        self.host, self.q = host, queue.Queue()
        self.kept: list = []  # read, not yet asked for (an event may come before an answer)
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while True:
            line = self.host.proc.stdout.readline()
            if not line:
                self.q.put((ns(), None))
                return
            self.q.put((ns(), json.loads(line)))

    def until(self, test, timeout_s: float):
        """The first (time, message) passing `test` within the timeout, else None;
        an error answer raises."""
        deadline = time.monotonic() + timeout_s
        for k, (at, msg) in enumerate(self.kept):
            if test(msg):
                del self.kept[k]
                return self.checked(at, msg)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                at, msg = self.q.get(timeout=left)
            except queue.Empty:
                return None
            if msg is None:
                raise RuntimeError("epp-host closed its output")
            if test(msg):
                return self.checked(at, msg)
            self.kept.append((at, msg))
            del self.kept[:-1000]

    @staticmethod
    def checked(at: int, msg: dict):
        if "error" in msg and msg.get("id") is not None:
            raise RuntimeError(f"epp-host answered an error: {msg['error']}")
        return at, msg

    def call(self, method: str, params: dict, timeout_s: float = 60) -> dict:
        want = self.host.send(method, params)
        got = self.until(lambda m: m.get("id") == want, timeout_s)
        if got is None:
            raise RuntimeError(f"{method}: no answer within {timeout_s} s")
        return got[1].get("result")


def event(req: int, kind: str, path: str):
    return lambda m: (m.get("method") == "files.event" and m["params"]["request_id"] == req
                      and m["params"]["kind"] == kind and m["params"]["path"] == path)


def start_watch(rd: Reader, box: str, path: str) -> int:
    """files.watch, then marker files until one is reported: the watch is live."""
    req = rd.host.send("files.watch", {"sandbox_id": box, "path": path})
    deadline = time.monotonic() + 30
    n = 0
    while time.monotonic() < deadline:
        marker = f"{path}/.ready-{n}"
        rd.call("files.write", {"sandbox_id": box, "path": marker, "content": ""})
        if rd.until(event(req, "create", marker), 0.7) is not None:
            return req
        n += 1
    raise RuntimeError("the watch never reported a change")


def stop_watch(rd: Reader, req: int) -> None:
    """epp.cancel; the watch's own answer (E4999) is awaited, not checked."""
    rd.host.send("epp.cancel", {"id": req})
    try:
        rd.until(lambda m: m.get("id") == req, 10)
    except RuntimeError:
        pass  # E4999, as expected
    rd.kept.clear()


def w_watch(host: Host, a: dict) -> dict:
    """files.watch on a directory of 21 entries: `files.write` of one entry (sent)
    → its `files.event` (write), writes 0.3-0.8 s apart (uniform, seeded) so each
    lands at a random phase of the poll interval; then the requests an idle watch sends, counted by a proxy."""
    from countproxy import CountingProxy

    box, n = a["sandbox"], a["n"]
    path = f"/tmp/epp-bench-watch-{os.getpid()}"
    host.call("commands.run", {"sandbox_id": box, "cmd": f"rm -rf {path} && mkdir -p {path} && cd {path} && "
                               "touch " + " ".join(f"f{i}" for i in range(20))})
    rd = Reader(host)
    req = start_watch(rd, box, path)
    lat = []
    gaps = random.Random(a.get("seed", 0))
    for i in range(n):
        time.sleep(gaps.uniform(0.3, 0.8))
        f = f"{path}/f{i % 20}"
        rd.kept.clear()
        t = ns()
        rd.call("files.write", {"sandbox_id": box, "path": f, "content": "x" * (i + 2)})
        got = rd.until(event(req, "write", f), 10)
        if got is None:
            raise RuntimeError(f"no write event for {f} within 10 s")
        lat.append((got[0] - t) // 1000)
    stop_watch(rd, req)
    out = {"lat_us": lat}

    if a.get("idle_s", 0) > 0:
        # A second host, in server-proxy mode through the counting proxy: every
        # request it sends, execd's included, is counted.
        proxy = CountingProxy(os.environ["ABX_OPENSANDBOX_BASE_URL"])
        counted = Host({"ABX_OPENSANDBOX_BASE_URL": proxy.url, "ABX_OPENSANDBOX_USE_SERVER_PROXY": "true"})
        try:
            crd = Reader(counted)
            creq = start_watch(crd, box, path)
            time.sleep(0.6)  # the marker's listing has come back
            t0 = time.monotonic()
            time.sleep(a["idle_s"])
            t1 = time.monotonic()
            total, lists = proxy.count(since=t0), proxy.count("GET", "/directories/list", since=t0)
            stop_watch(crd, creq)
        finally:
            counted.close()
        out.update(idle_s=t1 - t0, idle_requests=total, idle_listings=lists,
                   idle_per_min=total * 60 / (t1 - t0))
    rd.call("commands.run", {"sandbox_id": box, "cmd": f"rm -rf {path}"})
    return out


# ---------------------------------------------------------------- issue 15: files


def w_files_many(host: Host, a: dict) -> dict:
    """W11: `n` small files (`size` bytes each) written with one `files.write {files}`
    and with `n` single `files.write`s (each timed: the small-file p50), then read
    back one by one (each timed)."""
    box, n, size, root = a["sandbox"], a["n"], a["size"], a["dir"]
    run_true(host, box)
    content = file_content(size).decode()
    files = [{"path": f"{root}/one-call/f{i}.txt", "content": content} for i in range(n)]
    host.call("files.write", {"sandbox_id": box, "files": files[:1]})  # the directory exists
    t = ns()
    answer = host.call("files.write", {"sandbox_id": box, "files": files})
    one_call_us = (ns() - t) // 1000
    if len(answer["files"]) != n or any(f["size"] != size for f in answer["files"]):
        raise RuntimeError("files.write with files answered other files than were written")
    write_us, read_us = [], []
    for i in range(n):
        t = ns()
        host.call("files.write", {"sandbox_id": box, "path": f"{root}/calls/f{i}.txt", "content": content})
        write_us.append((ns() - t) // 1000)
    for i in range(n):
        t = ns()
        got = host.call("files.read", {"sandbox_id": box, "path": f"{root}/calls/f{i}.txt"})
        read_us.append((ns() - t) // 1000)
        if got["content"] != content:
            raise RuntimeError("files.read returned other content than was written")
    host.call("commands.run", {"sandbox_id": box, "cmd": f"rm -rf '{root}'"})
    return {"one_call_us": one_call_us, "calls_us": sum(write_us), "write_us": write_us, "read_us": read_us}


def curl(method: str, url: str, headers: dict, out: str, *extra: str) -> float:
    """Seconds one curl process takes for a request (start-up included, as a user pays it)."""
    argv = ["curl", "-sS", "--fail", "-X", method, url, "-o", out]
    for k, v in headers.items():
        argv += ["-H", f"{k}: {v}"]
    t = ns()
    subprocess.run(argv + list(extra), check=True)
    return (ns() - t) / 1e9


def w_transfer(host: Host, a: dict) -> dict:
    """W12: `files.upload_url` / `files.download_url`, then curl alone moves the
    local file `src` up to `path` and back down to `dst` (curl's own flags as
    README shows them; the URLs are asked for before the clock starts)."""
    box, path = a["sandbox"], a["path"]
    up = host.call("files.upload_url", {"sandbox_id": box, "path": path})
    down = host.call("files.download_url", {"sandbox_id": box, "path": path})
    meta = json.dumps({"path": path, "mode": 644})
    write_s = curl(up["method"], up["url"], up["headers"], "/dev/null",
                   "-F", f"metadata={meta};filename=metadata;type=application/json", "-F", f"file=@{a['src']}")
    read_s = curl(down["method"], down["url"], down["headers"], a["dst"])
    return {"write_s": write_s, "read_s": read_s}


# ------------------------------------------------------------ issue 14: code


def code_context(host: Host, sandbox: str) -> str:
    return host.call("code.create_context", {"sandbox_id": sandbox, "language": "python"})["context_id"]


def w_code(host: Host, a: dict) -> dict:
    """W13: `code.run` of a small expression in a warm context, collected."""
    ctx = code_context(host, a["sandbox"])
    lat = []
    for i in range(a["warmup"] + a["n"]):
        t = ns()
        r = host.call("code.run", {"sandbox_id": a["sandbox"], "context_id": ctx, "code": a["code"]})
        if i >= a["warmup"]:
            lat.append((ns() - t) // 1000)
        value = next((x["data"].get("text/plain") for x in r["results"] if x["is_main_result"]), None)
        if value != a["expect"]:
            raise RuntimeError(f"code.run {a['code']!r} gave {value!r}, not {a['expect']!r}: {r}")
    host.call("code.remove_context", {"sandbox_id": a["sandbox"], "context_id": ctx})
    return {"lat_us": lat}


def w_code_stream(host: Host, a: dict) -> dict:
    """W14: printed output of a kernel streamed as `code.output` notifications,
    decoded after the clock stops (as W3)."""
    ctx = code_context(host, a["sandbox"])
    host.call("code.run", {"sandbox_id": a["sandbox"], "context_id": ctx, "code": "0"})
    notes = []
    t = ns()
    want = host.send("code.run", {"sandbox_id": a["sandbox"], "context_id": ctx, "code": a["code"],
                                  "stream": True})
    answer = read_raw_answer(host, want, notes.append)
    secs = (ns() - t) / 1e9
    if "error" in json.loads(answer)["result"]:
        raise RuntimeError(f"the streamed code raised: {answer[:300]!r}")
    got = output_of(notes, "code.output")
    host.call("code.remove_context", {"sandbox_id": a["sandbox"], "context_id": ctx})
    return {"secs": secs, "text_bytes": got["bytes"], "lines": got["lines"], "notifications": len(notes)}


# ------------------------------------------------------------ issue 24: close to the wire


def w_cpu(host: Host, a: dict) -> dict:
    """Per-call CPU of epp-host: user+sys of the host process (/proc/PID/stat) over
    `n` sequential `files.exists` on a warm connection, `batches` times, after
    `warmup` calls and the idle measurement. Also the same from the threads'
    schedstat (ns resolution; misses threads that ended) and the wall time per call.

    The machine is warmed again after the idle second (calls for `warm_s`, at least
    `warmup`): after a second with every process asleep, this VM runs the next calls
    20-35 % slower, mostly for ~0.15 s and settled by ~0.5 s (bench/profiling.md, twelfth
    pass). One batch right after the idle second is kept too (`after_idle_*`), to show
    what a call after a pause costs (reported for the quiet, as-shipped variant; in the
    busy variants the idle second and that batch run before the spinners start)."""
    box, path, n = a["sandbox"], a.get("path", "/tmp"), a["n"]
    params = {"sandbox_id": box, "path": path}

    def warm() -> None:
        end = ns() + int(a.get("warm_s", 0.5) * 1e9)
        for i in itertools.count():
            if i >= a["warmup"] and ns() >= end:
                break
            if not host.call("files.exists", params)["exists"]:
                raise RuntimeError(f"files.exists {path}: false")

    warm()
    pid = host.proc.pid
    # What the host burns while nothing is asked (timers, pools): counted into every
    # batch at its wall time, so it is measured on its own too.
    c0, s0 = cpu_times(pid)
    t = ns()
    time.sleep(a.get("idle_s", 1.0))
    idle_s = (ns() - t) / 1e9
    c1, s1 = cpu_times(pid)
    idle = {"idle_cpu_us_per_s": (c1 - c0) * 1e6 / idle_s, "idle_sched_us_per_s": (s1 - s0) * 1e6 / idle_s}
    after_idle = dict(zip(("after_idle_cpu_us", "after_idle_sched_us", "after_idle_wall_us"),
                          (v[0] for v in batches(host, params, n, 1))))
    warm()
    spinners = busy_cpus() if a.get("busy") else []
    try:
        stat_us, sched_us, wall_us = batches(host, params, n, a["batches"])
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    return {"cpu_us": stat_us, "sched_us": sched_us, "wall_us": wall_us, "calls": n,
            "clk_tck": os.sysconf("SC_CLK_TCK"), **idle, **after_idle}


def busy_cpus() -> list:
    """A spinning process at the lowest priority (nice 19) for each CPU but one, so
    those CPUs never sit idle while the batches run: on a virtual machine, waking
    an idle CPU costs more than the work it is woken for (bench/profiling.md,
    issue 24). Anything at normal priority, the host and this driver included,
    preempts them. (One per CPU, tried first, measured more on 2 CPUs: 225 µs per call
    with fresh instances and 150 with kept ones, against 150 and 75 with one.)"""
    spin = [sys.executable, "-c", "import os\nos.nice(19)\nwhile True: pass"]
    return [subprocess.Popen(spin) for _ in range(max(1, (os.cpu_count() or 1) - 1))]


def batches(host: Host, params: dict, n: int, count: int) -> tuple[list, list, list]:
    """`count` batches of `n` calls: per call, the host's CPU (/proc/PID/stat),
    its threads' on-CPU time (schedstat) and the wall time, each in µs per batch."""
    pid = host.proc.pid
    stat_us, sched_us, wall_us = [], [], []
    for _ in range(count):
        c0, s0 = cpu_times(pid)
        t = ns()
        for _ in range(n):
            host.call("files.exists", params)
        wall = (ns() - t) / 1e3
        c1, s1 = cpu_times(pid)
        stat_us.append((c1 - c0) * 1e6 / n)
        sched_us.append((s1 - s0) * 1e6 / n)
        wall_us.append(wall / n)
    return stat_us, sched_us, wall_us


ANSWER = b'{"jsonrpc":"2.0","id":'


def check_pieces(spool: Spool, note: str, size: int | None = None) -> tuple[str, int, int]:
    """sha256, bytes and pieces of a streamed read's content, from the spooled
    notification lines (each a `note` with `offset` and `content`); the offsets
    must follow each other."""
    h, got, count = hashlib.sha256(), 0, 0
    for line in spool.lines():
        msg = json.loads(line)
        if msg.get("method") != note:
            continue
        p = msg["params"]
        if p["offset"] != got:
            raise RuntimeError(f"{note} at offset {p['offset']}, expected {got}")
        data = p["content"].encode()
        h.update(data)
        got += len(data)
        count += 1
    if size is not None and got != size:
        raise RuntimeError(f"{note}: {got} bytes, not {size}")
    return h.hexdigest(), got, count


def w_files_big(host: Host, a: dict) -> dict:
    """W24 streamed files: `files.write {stream: true}` of `size` bytes in chunks of
    1 MiB, then `files.read {stream: true}`: in binary frames (`encoding: "binary"`,
    the default: a header line `{…, bytes: N}` then N raw bytes, docs/epp-1.md) or,
    with `encoding: "utf8"`, as text `files.write_chunk` / `files.data` lines.
    Every chunk is made once per distinct piece (the content repeats every 64
    bytes) and hashed before the clock starts; binary frames are read into one
    buffer of the file's size (`Into`, as the raw client reads into memory), text
    lines spooled to tmpfs; both are decoded and hashed after the clock stops."""
    box, path, size = a["sandbox"], a["path"], a["size"]
    binary = a.get("encoding", "binary") == "binary"
    run_true(host, box)
    host.next_id += 1
    want = host.next_id
    params = {"sandbox_id": box, "path": path, "size": size, "stream": True}
    if binary:
        params["encoding"] = "binary"
    head = json.dumps({"jsonrpc": "2.0", "id": want, "method": "files.write", "params": params}).encode() + b"\n"
    encoded: dict = {}
    sent = hashlib.sha256()
    chunks = []  # what goes on stdin per piece, shared between equal pieces
    for _, piece in pieces(size, STREAM_CHUNK):
        out = encoded.get(id(piece))
        if out is None:
            if binary:
                out = (b'{"jsonrpc":"2.0","method":"files.write_chunk","params":{"request_id":%d,"bytes":%d}}\n'
                       % (want, len(piece)), piece)
            else:
                out = (json.dumps({"jsonrpc": "2.0", "method": "files.write_chunk",
                                   "params": {"request_id": want, "content": piece.decode()}}).encode() + b"\n",)
            encoded[id(piece)] = out
        sent.update(piece)
        chunks.append(out)
    profile(host, True)
    t = ns()
    stdin = host.proc.stdin
    stdin.write(head)
    for out in chunks:
        for part in out:
            stdin.write(part)
    stdin.flush()
    answer = json.loads(read_raw_answer(host, want))["result"]
    write_s = (ns() - t) / 1e9
    del chunks, encoded
    if answer.get("size") != size:
        raise RuntimeError(f"files.write answered size {answer.get('size')}, not {size}")
    spool = Into(size) if binary else Spool()
    t = ns()
    read = {"sandbox_id": box, "path": path, "stream": True}
    if binary:
        read["encoding"] = "binary"
    want = host.send("files.read", read)
    stdout = host.proc.stdout
    frames = 0
    while True:
        line = stdout.readline()
        if not line:
            raise RuntimeError("epp-host closed its output")
        if line.startswith(ANSWER):
            msg = json.loads(line)
            if msg.get("id") == want:
                break
        if binary:
            spool.read_from(stdout, json.loads(line)["params"]["bytes"])
            frames += 1
        else:
            spool.write(line)
    read_s = (ns() - t) / 1e9
    profile(host, False)
    result = host.answer(msg)
    if binary:
        read_sha, notes = spool.sha256(), frames
        if spool.got != size:
            raise RuntimeError(f"files.data frames: {spool.got} bytes, not {size}")
    else:
        read_sha, got, notes = check_pieces(spool, "files.data", size)
        spool.close()
    if result.get("size") != size:
        raise RuntimeError(f"files.read answered size {result.get('size')}, not {size}")
    return {"write_s": write_s, "read_s": read_s, "bytes": size, "write_sha256": sent.hexdigest(),
            "read_sha256": read_sha, "notes": notes, "encoding": "binary" if binary else "utf8"}


def w_scale_run(host: Host, a: dict) -> dict:
    """W24 scaling: for each count of sandboxes in `series` and each level in
    `levels`, one warm-up batch then batches of that many concurrent
    `commands.run "true"` (at least `min_calls` calls per level); epp-host's
    peak RSS (VmHWM, reset before each level's timed batches) and RSS after."""
    out: dict = {}
    for k in a["series"]:
        boxes = a["sandboxes"][:k]
        for n in a["levels"]:
            run_batch(host, boxes, n)
            reset_peak(host.proc.pid)
            walls, lat = [], []
            for _ in range(max(a["batches"], -(-a.get("min_calls", 0) // n))):
                done = run_batch(host, boxes, n)
                walls.append(max(done))
                lat.extend(done)
            rss, hwm = memory(host.proc.pid)
            out[f"{k}x{n}"] = {"wall_us": walls, "lat_us": lat, "host_rss_kib": rss, "host_hwm_kib": hwm}
    return {"steps": out}


def read_batch(host: Host, boxes: list, path: str, n: int, size: int, check: bool) -> tuple[list, int]:
    """`n` concurrent `files.read {stream: true, encoding: "binary"}` of `path`
    (request i → sandbox i mod len): each call's time from the batch's start to its
    answer; with `check`, every read's content is hashed after the clock stops
    (from a spool of the frames) and compared. Every answer's `size` must be
    `size`. Returns (times, reads checked)."""
    first = host.next_id + 1
    lines = []
    for i in range(n):
        host.next_id += 1
        lines.append(json.dumps({"jsonrpc": "2.0", "id": host.next_id, "method": "files.read",
                                 "params": {"sandbox_id": boxes[i % len(boxes)], "path": path, "stream": True,
                                            "encoding": "binary"}}))
    spool = Spool() if check else None
    t = ns()
    stdout = host.proc.stdout
    host.proc.stdin.write(("\n".join(lines) + "\n").encode())
    host.proc.stdin.flush()
    done = []
    while len(done) < n:
        line = stdout.readline()
        if not line:
            raise RuntimeError("epp-host closed its output")
        if line.startswith(ANSWER):
            msg = json.loads(line)
            if msg.get("id", 0) >= first:
                done.append((ns() - t) // 1000)
                got = host.answer(msg).get("size")
                if got != size:
                    raise RuntimeError(f"files.read {path} answered size {got}, not {size}")
            continue
        # A frame: its header line, then `bytes` raw bytes.
        frame = stdout.read(json.loads(line)["params"]["bytes"])
        if spool is not None:
            spool.write(line)
            spool.write(frame)
    if spool is None:
        return done, 0
    per: dict = {}
    spool.f.seek(0)
    while True:
        line = spool.f.readline()
        if not line:
            break
        p = json.loads(line)["params"]
        data = spool.f.read(p["bytes"])
        h, off = per.setdefault(p["request_id"], (hashlib.sha256(), [0]))
        if p["offset"] != off[0]:
            raise RuntimeError(f"files.data of {p['request_id']} at offset {p['offset']}, expected {off[0]}")
        h.update(data)
        off[0] += len(data)
    spool.close()
    want = a_sha256(size)
    for rid in range(first, first + n):
        h, off = per.get(rid, (hashlib.sha256(), [0]))
        if off[0] != size or h.hexdigest() != want:
            raise RuntimeError(f"files.read {rid}: {off[0]} bytes, sha256 {h.hexdigest()}, expected {want}")
    return done, n


_SHA: dict = {}


def a_sha256(size: int) -> str:
    if size not in _SHA:
        _SHA[size] = content_sha256(size)
    return _SHA[size]


def w_scale_read(host: Host, a: dict) -> dict:
    """W24 scaling: for each level, `n` concurrent streamed reads of a file of
    `size` bytes at `path` (the same in every sandbox), one warm-up batch whose
    content is hashed and compared, then timed batches whose answers' sizes are
    checked; epp-host's peak RSS per level (VmHWM reset before the timed batches)."""
    boxes, path, size = a["sandboxes"], a["path"], a["size"]
    out, checked = {}, 0
    for n in a["levels"]:
        checked += read_batch(host, boxes, path, n, size, True)[1]
        reset_peak(host.proc.pid)
        walls, lat = [], []
        for _ in range(max(a["batches"], -(-a.get("min_calls", 0) // n))):
            done, _ = read_batch(host, boxes, path, n, size, False)
            walls.append(max(done))
            lat.extend(done)
        rss, hwm = memory(host.proc.pid)
        out[f"{len(boxes)}x{n}"] = {"wall_us": walls, "lat_us": lat, "host_rss_kib": rss, "host_hwm_kib": hwm}
    return {"steps": out, "sha_checked": checked}


def w_rpc_run(a: dict) -> dict:
    """W24 MCP overhead, both sides through this one minimal JSON-RPC client
    (stdlib, one thread, write a request and read lines until its answer):
    `via: "run"` is `commands.run "true"` on `epp-host run`; `via: "mcp"` is
    `tools/call commands_run {cmd: "true"}` on `epp-host mcp` after `initialize`
    and `notifications/initialized`. Each answer is decoded and its exit code
    checked, on both sides alike."""
    via, box = a["via"], a["sandbox"]
    host = Host(command=via)
    try:
        if via == "mcp":
            init = host.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "epp-bench", "version": "1"}})
            host.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            host.proc.stdin.flush()

            def one() -> None:
                r = host.call("tools/call", {"name": "commands_run", "arguments": {"sandbox_id": box, "cmd": "true"}})
                if r.get("isError") or r.get("structuredContent", {}).get("exit_code") != 0:
                    raise RuntimeError(f"commands_run \"true\" through MCP: {json.dumps(r)[:500]}")
        else:
            init = host.call("epp.hello", {"protocol": "EPP/1"})

            def one() -> None:
                run_true(host, box)
        lat = []
        for i in range(a["warmup"] + a["n"]):
            t = ns()
            one()
            if i >= a["warmup"]:
                lat.append((ns() - t) // 1000)
        rss, hwm = memory(host.proc.pid)
    finally:
        host.close()
    return {"lat_us": lat, "host_rss_kib": rss, "host_hwm_kib": hwm,
            "server": (init.get("serverInfo") or {}).get("version", "") if isinstance(init, dict) else ""}


WORKLOADS = {"idle": w_idle, "run": w_run, "stream": w_stream, "files": w_files, "files_stream": w_files_stream,
             "concurrent": w_concurrent, "cycle": w_cycle, "session": w_session, "stdin": w_stdin,
             "watch": w_watch, "files_many": w_files_many, "transfer": w_transfer,
             "code": w_code, "code_stream": w_code_stream, "snapshot_cycle": w_snapshot_cycle,
             "cpu": w_cpu, "files_big": w_files_big, "scale_run": w_scale_run, "scale_read": w_scale_read}
# Workloads that start their own epp-host (or another command of it).
OWN_HOST = {"rpc_run": w_rpc_run}


def main() -> None:
    workload, a = args()
    if workload in OWN_HOST:
        result = OWN_HOST[workload](a)
        result.update(zip(("rss_kib", "hwm_kib"), memory()))
        emit(result)
    host = Host()
    try:
        result = WORKLOADS[workload](host, a)
    finally:
        host.close()
    result.update(zip(("rss_kib", "hwm_kib"), memory()))
    emit(result)


if __name__ == "__main__":
    main()
