#!/usr/bin/env python3
"""Runs the workloads for every contender against one testbed (workload 16:
the testbed's Docker tier, --docker-url), in interleaved rounds, and writes
the raw samples to a JSON file (merged into the file's samples with --only).

Started by bench/run (which builds everything and starts the testbed); see
bench/README.md. Stdlib only. Every workload runs in a fresh driver process per
round and contender; the contenders' order rotates from round to round so
drift in the machine's load spreads over all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONTENDERS = ("epp", "sdk", "raw")
# The MCP workload (issue 22): `epp-host mcp` and OpenSandbox's own MCP server, through
# one MCP client (bench/drivers/mcp.py).
MCP_CONTENDERS = ("epp", "osmcp")

# 64 MiB of 1 KiB lines (1023 characters + "\n"): 65,536 output events, as execd
# sends one event per line.
STREAM_BYTES = 64 << 20
STREAM_LINE = 1024
STREAM_CMD = (f"L=$(head -c {STREAM_LINE - 1} /dev/zero | tr '\\0' x); "
              f"yes \"$L\" | head -c {STREAM_BYTES}")
FILE_BYTES = 32 << 20
# Workloads 13-14 (code.interpret): a warm context's round trip, and 10 MiB printed
# by the kernel as 10,240 lines of 1 KiB.
CODE_EXPR, CODE_VALUE = "1+1", "2"
CODE_PRINT_BYTES = 10 << 20
CODE_PRINT = "line = 'x' * 1023\nfor _ in range(10240):\n    print(line)"
# Workload 11: small files written in one call vs one call each.
MANY_FILES = 100
SMALL_FILE = 4 << 10
# Workload 12: through the transfer URLs with curl.
TRANSFER_BYTES = 256 << 20
# Sandboxes for workloads 2-5 are created with execd's grace period off: real
# execd (and the stand-in) keep a command's response open 1 s after its last
# event, and the Python SDK reads to the end, which would hide every other cost.
# Workload 2 is also measured once with the default grace, as users see it.
NO_GRACE = {"EXECD_API_GRACE_SHUTDOWN": "0"}
# The image of the shared sandboxes and of the MCP workload's create/kill cycles
# (workload 6's drivers name the same).
IMAGE = "python:3.12-slim"
# Workload 16 (issue 23, Docker tier): create → ready → kill from a snapshot vs from
# IMAGE. The snapshot is made once per run from a sandbox of IMAGE whose entrypoint
# writes SNAPSHOT_FILE first (so a sandbox made from it is checked to hold that file),
# and removed at the end.
SNAPSHOT_FILE = "/epp-bench-snapshot.txt"
# The steps that run on the Docker tier (bench/run starts it only for them).
DOCKER_STEPS = ("snapshot_create",)
# Issue 24 ("close to the wire"): epp-host's CPU per `files.exists` on a warm connection
# (CPU_CALLS calls per batch, CPU_BATCHES batches per round; before them, warm-up calls
# (at least CPU_WARMUP and CPU_WARM_S seconds), CPU_IDLE_S seconds idle, one batch right
# after it, and the warm-up again);
# streamed files of BIG_SIZES bytes (the largest in the short rounds only, --big-mib);
# the scaling curve: SCALE_LEVELS concurrent `commands.run "true"` over each of
# SCALE_SERIES sandboxes, and READ_LEVELS concurrent streamed reads of READ_BYTES;
# every level has at least SCALE_MIN_CALLS timed calls (so its p99 has samples).
CPU_CALLS, CPU_BATCHES, CPU_WARMUP, CPU_PATH = 400, 3, 50, "/tmp"
CPU_WARM_S, CPU_IDLE_S = 0.5, 1.0
BIG_SIZES = (32 << 20, 256 << 20)
SCALE_SERIES = (8, 32)
SCALE_LEVELS = (1, 16, 64, 256)
READ_LEVELS = (1, 4, 16, 64)
READ_BYTES = 4 << 20
SCALE_MIN_CALLS = 32
# The MCP overhead (issue 24): both servers of one epp-host, through one minimal client.
MCP_VIA = ("run", "mcp")
# The MCP workload: what a model is shown for a failing command and a missing file.
MCP_FAIL_CMD = "ls /nope"
MCP_MISSING_PATH = "/nope"


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def data_image_bytes(path: str) -> int:
    """How far the data segments of the component's core modules reach past the
    first one's start: the memory image every instance of it maps (the pool maps
    it whole, a 64 KiB window at a time; bench/profiling.md, eleventh pass)."""
    def leb(b: bytes, i: int) -> tuple[int, int]:
        r = s = 0
        while True:
            x = b[i]
            i += 1
            r |= (x & 0x7F) << s
            s += 7
            if x < 0x80:
                return r, i

    def sections(b: bytes, i: int):
        while i < len(b):
            sid = b[i]
            n, i = leb(b, i + 1)
            yield sid, b[i:i + n]
            i += n

    spans = []

    def module(b: bytes) -> None:
        for sid, body in sections(b, 8):
            if sid != 11:
                continue
            count, j = leb(body, 0)
            for _ in range(count):
                flag, j = leb(body, j)
                start = None
                if flag in (0, 2):
                    if flag == 2:
                        _, j = leb(body, j)
                    # The offset: i32.const (a fixed one; signed LEB, which for the
                    # non-negative offsets a linker writes reads as unsigned) or
                    # global.get, then `end`.
                    op = body[j]
                    value, j = leb(body, j + 1)
                    if op == 0x41:
                        start = value
                    if body[j] != 0x0B:
                        raise ValueError(f"{path}: a data segment's offset is not one constant")
                    j += 1
                length, j = leb(body, j)
                if start is not None:
                    spans.append((start, start + length))
                j += length

    def component(b: bytes) -> None:
        for sid, body in sections(b, 8):
            if sid == 1:
                module(body)
            elif sid == 4:
                component(body)

    with open(path, "rb") as f:
        data = f.read()
    # A signed component carries its signature in a custom section; both kinds parse.
    (module if data[4:8] == b"\x01\x00\x00\x00" else component)(data)
    return max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0


class Bench:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.o = opts
        self.url = opts.url.rstrip("/")
        self.domain = self.url.split("://", 1)[1]
        self.results: dict = {"samples": {}, "steps": {}}
        self.docker_url = (opts.docker_url or "").rstrip("/")
        self.snapshot: dict | None = None
        self.cache_dir = tempfile.mkdtemp(prefix="epp-bench-cache-")
        self.env = dict(os.environ)
        self.env.update({
            "EPP_HOST_BIN": opts.host, "EPP_GUEST_WASM": opts.wasm, "EPP_TRUSTED_KEY": opts.trusted_key,
            "EPP_CACHE_DIR": self.cache_dir,
            "ABX_OPENSANDBOX_BASE_URL": self.url, "ABX_OPENSANDBOX_API_KEY": opts.key,
            "OPEN_SANDBOX_DOMAIN": self.domain, "OPEN_SANDBOX_API_KEY": opts.key,
            "PYTHONDONTWRITEBYTECODE": "1",
        })

    # ------------------------------------------------------------ plumbing

    def api(self, method: str, path: str, body: dict | None = None, docker: bool = False) -> dict:
        """A call to the local testbed's server, or to the Docker tier's (`docker`)."""
        url, key = (self.docker_url, self.o.docker_key) if docker else (self.url, self.o.key)
        req = urllib.request.Request(url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"OPEN-SANDBOX-API-KEY": key,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            data = resp.read()
        return json.loads(data) if data else {}

    def create_sandbox(self, env: dict) -> tuple[str, str]:
        """A shared sandbox (id, execd endpoint), made outside every contender."""
        box = self.api("POST", "/v1/sandboxes", {
            "image": {"uri": IMAGE}, "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 3600, "resourceLimits": {"cpu": "1", "memory": "2Gi"},
            "env": env, "metadata": {"bench": "shared"}})
        ep = self.api("GET", f"/v1/sandboxes/{box['id']}/endpoints/44772")
        return box["id"], ep["endpoint"]

    def drive(self, contender: str, workload: str, args: dict, env: dict | None = None) -> dict:
        """One workload in a fresh driver process; its JSON result. `env` is laid
        over the drivers' environment (the Docker tier's server for workload 16)."""
        if contender == "raw":
            argv = [self.o.raw, workload] + [f"{k}={v}" for k, v in args.items()]
        else:
            python = sys.executable if contender == "epp" else self.o.sdk_python
            argv = [python, os.path.join(HERE, "drivers", f"{contender}.py"), workload, json.dumps(args)]
        return self.spawn(f"{contender} {workload}", argv, env)

    def drive_mcp(self, contender: str, workload: str, args: dict) -> dict:
        """The MCP workload: one MCP server (`epp` or `osmcp`) driven by drivers/mcp.py
        in the MCP venv, in a fresh process."""
        argv = [self.o.mcp_python, os.path.join(HERE, "drivers", "mcp.py"), contender, workload, json.dumps(args)]
        return self.spawn(f"mcp {contender} {workload}", argv)

    def spawn(self, what: str, argv: list[str], env: dict | None = None) -> dict:
        out = subprocess.run(argv, env={**self.env, **(env or {})}, capture_output=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {out.returncode}):\n"
                               f"{out.stderr.decode(errors='replace')[-3000:]}")
        return json.loads(out.stdout.decode().strip().splitlines()[-1])

    def record(self, workload: str, contender: str, sample) -> None:
        self.results["samples"].setdefault(workload, {}).setdefault(contender, []).append(sample)

    def order(self, rnd: int, names=CONTENDERS) -> list[str]:
        k = rnd % len(names)
        return list(names[k:]) + list(names[:k])

    # ------------------------------------------------------------ workloads

    def cold_start(self, rnd: int) -> None:
        """W1: process start → `epp.hello` answered; `import opensandbox` for comparison."""
        def epp(no_cache: bool) -> float:
            argv = [self.o.host, "run", self.o.wasm, "--trusted-key", self.o.trusted_key]
            argv += ["--no-cache"] if no_cache else ["--cache-dir", self.cache_dir]
            t = time.perf_counter()
            p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, env=self.env)
            p.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"epp.hello","params":{}}\n')
            p.stdin.flush()
            line = p.stdout.readline()
            dt = time.perf_counter() - t
            p.stdin.close()
            p.wait(timeout=30)
            if b'"result"' not in line:
                raise RuntimeError(f"epp.hello failed: {line[:300]!r}")
            return dt

        def python(code: str) -> float:
            t = time.perf_counter()
            subprocess.run([self.o.sdk_python, "-c", code], check=True, env=self.env)
            return time.perf_counter() - t

        variants = {
            "epp_warm": (lambda: epp(False), self.o.reps_start),
            "epp_nocache": (lambda: epp(True), max(1, self.o.reps_start // 4)),
            "sdk_import": (lambda: python("import opensandbox"), max(1, self.o.reps_start // 2)),
            "python_bare": (lambda: python("pass"), max(1, self.o.reps_start // 2)),
        }
        for name in self.order(rnd, tuple(variants)):
            fn, reps = variants[name]
            for _ in range(reps):
                self.record("cold_start", name, fn() * 1e6)

    def run_true(self, rnd: int) -> None:
        for c in self.order(rnd):
            a = {"sandbox": self.box[0], "endpoint": self.endpoint[0], "n": self.o.calls, "warmup": 20}
            self.record("run", c, self.drive(c, "run", a)["lat_us"])

    def run_true_grace(self, rnd: int) -> None:
        """W2 once more against a sandbox with execd's default 1 s grace."""
        for c in self.order(rnd):
            a = {"sandbox": self.grace_box, "endpoint": self.grace_endpoint, "n": 5, "warmup": 1,
                 "drain": 0}
            self.record("run_grace", c, self.drive(c, "run", a)["lat_us"])

    def session_run(self, rnd: int) -> None:
        """W8: `sessions.run "true"` / `run_in_session` / raw `POST /session/{id}/run`."""
        for c in self.order(rnd):
            a = {"sandbox": self.box[0], "endpoint": self.endpoint[0], "n": self.o.calls, "warmup": 20}
            self.record("session", c, self.drive(c, "session", a)["lat_us"])

    def stdin_round_trip(self, rnd: int) -> None:
        """W9 (epp-host only: the SDK has no stdin for commands, execd's /command none):
        one line through `cat` started with `stdin: true`, send_input → echoed output."""
        a = {"sandbox": self.box[0], "n": self.o.calls, "warmup": 5}
        self.record("stdin", "epp", self.drive("epp", "stdin", a)["lat_us"])

    def watch(self, rnd: int) -> None:
        """W10 (epp-host only: neither the SDK nor execd has change events): files.watch
        write → event latency; in the short rounds also an idle watch's requests."""
        a = {"sandbox": self.box[0], "n": self.o.watch_writes, "seed": rnd,
             "idle_s": self.o.watch_idle if rnd < self.o.short_rounds else 0}
        r = self.drive("epp", "watch", a)
        sample = {"lat_us": r["lat_us"]}
        if "idle_s" in r:
            sample.update({k: r[k] for k in ("idle_s", "idle_requests", "idle_listings", "idle_per_min")})
        self.record("watch", "epp", sample)

    def stream(self, rnd: int) -> None:
        for c in self.order(rnd):
            r = self.drive(c, "stream", {"sandbox": self.box[0], "endpoint": self.endpoint[0], "cmd": STREAM_CMD})
            lines = STREAM_BYTES // STREAM_LINE
            if r["lines"] != lines:
                raise RuntimeError(f"{c} stream delivered {r['lines']} lines, not {lines}")
            self.record("stream", c, {"mib_s": (STREAM_BYTES >> 20) / r["secs"], "secs": r["secs"],
                                      "decode_s": r.get("decode_s"), "notifications": r.get("notifications")})

    def pipe_floor(self) -> float:
        """Seconds to push a files.write request's bytes through a pipe to
        `cat`: what any stdio protocol pays before the host can act."""
        data = b"x" * (FILE_BYTES + FILE_BYTES // 64 + 200)  # the JSON line: one \\n per 64-byte line
        p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        t = time.perf_counter()
        p.stdin.write(data)
        p.stdin.close()
        p.wait()
        return time.perf_counter() - t

    def files(self, rnd: int) -> None:
        self.record("pipe_floor", "stdio", self.pipe_floor())
        for c in self.order(rnd):
            path = f"/tmp/epp-bench-{os.getpid()}-{c}.txt"
            r = self.drive(c, "files", {"sandbox": self.box[0], "endpoint": self.endpoint[0],
                                        "path": path, "size": FILE_BYTES})
            mib = FILE_BYTES >> 20
            sample = {"write_mib_s": mib / r["write_s"], "read_mib_s": mib / r["read_s"],
                      "encode_s": r.get("encode_s"), "decode_s": r.get("decode_s")}
            if "stream_write_s" in r:  # epp-host: the same file with `stream: true`
                sample.update(stream_write_mib_s=mib / r["stream_write_s"],
                              stream_read_mib_s=mib / r["stream_read_s"], stream_notes=r["stream_notes"])
            self.record("files", c, sample)
            for left in (path, path + ".streamed"):  # epp-host's driver also writes the latter
                try:
                    os.unlink(left)
                except OSError:
                    pass

    def concurrent(self, rnd: int) -> None:
        for c in self.order(rnd):
            a = {"sandboxes": self.box, "endpoints": ",".join(self.endpoint), "n": 64,
                 "batches": self.o.batches}
            if c == "raw":
                a = {k: v for k, v in a.items() if k != "sandboxes"}
            r = self.drive(c, "concurrent", a)
            # Peak memory of the process that talks to OpenSandbox: epp-host
            # itself for (a), the Python process for (b), the raw client for (c).
            hwm = r.get("host_hwm_kib", r["hwm_kib"])
            self.record("concurrent", c, {"wall_us": r["wall_us"], "lat_us": r["lat_us"], "hwm_kib": hwm})

    def cycle(self, rnd: int) -> None:
        for c in self.order(rnd):
            a = {"n": self.o.cycles, "server": self.domain, "key": self.o.key}
            self.record("cycle", c, self.drive(c, "cycle", a)["cycle_us"])

    def idle(self, rnd: int) -> None:
        """W7: memory of each contender's process after start-up and one call."""
        for c in self.order(rnd):
            r = self.drive(c, "idle", {"sandbox": self.box[0]})
            self.record("idle", c, {"rss_kib": r.get("host_rss_kib", r["rss_kib"]),
                                    "hwm_kib": r.get("host_hwm_kib", r["hwm_kib"])})

    # ------------------------------------------------------------ issue 15: files

    def files_many(self, rnd: int) -> None:
        """W11: 100 files of 4 KiB in one call vs 100 calls (epp-host's `files.write
        {files}`, the SDK's `write_files`), and each single write's and read's latency."""
        for c in self.order(rnd, ("epp", "sdk")):
            a = {"sandbox": self.box[0], "n": MANY_FILES, "size": SMALL_FILE,
                 "dir": f"/tmp/epp-bench-many-{os.getpid()}-{c}"}
            r = self.drive(c, "files_many", a)
            self.record("files_many", c, {k: r[k] for k in ("one_call_us", "calls_us", "write_us", "read_us")})

    def transfer_source(self) -> tuple[str, str]:
        """The local file curl uploads (made once) and its sha256."""
        if not hasattr(self, "transfer_src"):
            sys.path.insert(0, os.path.join(HERE, "drivers"))
            from common import file_content
            self.transfer_src = os.path.join(self.cache_dir, "transfer.src")
            data = file_content(TRANSFER_BYTES)
            with open(self.transfer_src, "wb") as f:
                f.write(data)
            self.transfer_sha = hashlib.sha256(data).hexdigest()
        return self.transfer_src, self.transfer_sha

    def transfer(self, rnd: int) -> None:
        """W12: 256 MiB up and down through `files.upload_url` / `download_url` with
        curl vs the raw client's own upload and download; sha256 checked at both ends
        (the testbed's sandboxes share this machine's file system)."""
        src, sha = self.transfer_source()
        for c in self.order(rnd, ("epp", "raw")):
            path = f"/tmp/epp-bench-transfer-{os.getpid()}-{c}.bin"
            # Into memory, as the raw client's download: tmpfs where there is one
            # (a disk file adds the machine's writeback to curl's time).
            shm = "/dev/shm"
            dst = os.path.join(shm if os.access(shm, os.W_OK) else self.cache_dir, f"epp-bench-{os.getpid()}.dst")
            if c == "epp":
                r = self.drive(c, "transfer", {"sandbox": self.box[0], "path": path, "src": src, "dst": dst})
            else:
                r = self.drive(c, "files", {"endpoint": self.endpoint[0], "path": path, "size": TRANSFER_BYTES})
            ends = [path] + ([dst] if c == "epp" else [])
            for end in ends:
                with open(end, "rb") as f:
                    got = hashlib.file_digest(f, "sha256").hexdigest()
                if got != sha:
                    raise RuntimeError(f"{c} transfer: sha256 of {end} is {got}, not {sha}")
                os.unlink(end)
            mib = TRANSFER_BYTES >> 20
            self.record("transfer", c, {"write_mib_s": mib / r["write_s"], "read_mib_s": mib / r["read_s"],
                                        "sha256_ok": len(ends)})

    # ------------------------------------------------------------ issue 14: code

    def create_code_sandbox(self) -> tuple[str, str]:
        """A sandbox from the `code` template's image (a Jupyter server behind execd),
        ready once execd has made a context (it retries until Jupyter answers). Jupyter's
        IOPub rate limit is lifted (TESTBED_JUPYTER_LIMIT_RATE=0), else W14's 10 MiB
        would be cut by it, for every contender alike."""
        box = self.api("POST", "/v1/sandboxes", {
            "image": {"uri": "opensandbox/code-interpreter:v1.1.0"},
            "entrypoint": ["/opt/code-interpreter/code-interpreter.sh"],
            "timeout": 3600, "resourceLimits": {"cpu": "1", "memory": "2Gi"},
            "env": {"TESTBED_JUPYTER_LIMIT_RATE": "0"}, "metadata": {"bench": "code"}})
        ep = self.api("GET", f"/v1/sandboxes/{box['id']}/endpoints/44772")["endpoint"]
        req = urllib.request.Request(f"http://{ep}/code/context", method="POST",
                                     data=b'{"language":"python"}', headers={"Content-Type": "application/json"})
        # The context is left alone: deleting a kernel that is still starting waits
        # for Jupyter's shutdown of it (seen to take over 30 s on a loaded machine).
        with urllib.request.urlopen(req, timeout=180) as resp:
            json.loads(resp.read())["id"]
        return box["id"], ep

    def code_run(self, rnd: int) -> None:
        """W13: `code.run "1+1"` in a warm context / the code-interpreter SDK's
        `codes.run` / raw `POST /code`; each contender makes its own context."""
        for c in self.order(rnd):
            a = {"sandbox": self.code_box, "endpoint": self.code_endpoint, "n": self.o.calls // 2,
                 "warmup": 10, "code": CODE_EXPR, "expect": CODE_VALUE}
            if c == "raw":
                a = {k: v for k, v in a.items() if k not in ("sandbox", "expect")}
            self.record("code", c, self.drive(c, "code", a)["lat_us"])

    def code_stream(self, rnd: int) -> None:
        """W14: 10 MiB printed by the kernel, streamed (epp-host's `code.output`
        notifications vs raw `POST /code`)."""
        for c in self.order(rnd, ("epp", "raw")):
            a = {"sandbox": self.code_box, "endpoint": self.code_endpoint, "code": CODE_PRINT}
            if c == "raw":
                a = {k: v for k, v in a.items() if k != "sandbox"}
            r = self.drive(c, "code_stream", a)
            if r["text_bytes"] != CODE_PRINT_BYTES:
                raise RuntimeError(f"{c} code stream delivered {r['text_bytes']} bytes, not {CODE_PRINT_BYTES}")
            self.record("code_stream", c, {"mib_s": (CODE_PRINT_BYTES / (1 << 20)) / r["secs"], "secs": r["secs"]})

    # ------------------------------------------------------------ issue 22: MCP

    def mcp_list(self, rnd: int) -> None:
        """MCP: each MCP server after initialize and tools/list: the listing
        (tools, bytes of its result's JSON) and the server process's memory,
        one second idle."""
        for c in self.order(rnd, MCP_CONTENDERS):
            r = self.drive_mcp(c, "idle", {"settle_s": 1.0})
            self.record("mcp_list", c, {k: r[k] for k in ("tools", "list_bytes", "names", "server_rss_kib",
                                                           "server_hwm_kib", "protocol", "server")})

    def mcp_run(self, rnd: int) -> None:
        """MCP: `commands_run "true"` / opensandbox-mcp's `command_run "true"`."""
        for c in self.order(rnd, MCP_CONTENDERS):
            a = {"sandbox": self.box[0], "n": self.o.calls, "warmup": 20}
            self.record("mcp_run", c, self.drive_mcp(c, "run", a)["lat_us"])

    def mcp_cycle(self, rnd: int) -> None:
        """MCP: `sandbox_create` then `sandbox_kill` through each server."""
        for c in self.order(rnd, MCP_CONTENDERS):
            a = {"n": self.o.cycles, "image": IMAGE}
            self.record("mcp_cycle", c, self.drive_mcp(c, "cycle", a)["cycle_us"])

    def mcp_errors(self, rnd: int) -> None:
        """MCP (first round only: nothing here is timed): each server's result for a
        failing command and for reading a missing file, as the client gets it."""
        for c in self.order(rnd, MCP_CONTENDERS):
            a = {"sandbox": self.box[0], "cmd": MCP_FAIL_CMD, "path": MCP_MISSING_PATH}
            r = self.drive_mcp(c, "errors", a)
            self.record("mcp_errors", c, {k: r[k] for k in ("failed_command", "missing_file")})

    # ------------------------------------------------------------ issue 24: close to the wire

    def execd(self, endpoint: str, cmd: str) -> str:
        """A command run by bench.py itself through a sandbox's execd (no contender
        involved); its stdout. The shared sandboxes end a response at the last event."""
        req = urllib.request.Request(f"http://{endpoint}/command", method="POST",
                                     data=json.dumps({"command": cmd, "background": False}).encode(),
                                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            body = resp.read().decode()
        out = []
        for frame in body.split("\n\n"):
            frame = frame.strip()
            if frame.startswith("data:"):
                frame = frame[5:].strip()
            if not frame:
                continue
            ev = json.loads(frame)
            if ev.get("type") == "stdout":
                out.append(ev.get("text", ""))
            elif ev.get("type") == "error":
                raise RuntimeError(f"execd {cmd!r}: {ev}")
        return "".join(out)

    def sandbox_sha256(self, endpoint: str, path: str, remove: bool = True) -> str:
        """sha256 of a file as the sandbox has it (`sha256sum` in the sandbox); the
        file is removed after."""
        out = self.execd(endpoint, f"sha256sum '{path}'" + (f"; rm -f '{path}'" if remove else ""))
        return out.split()[0] if out.strip() else f"(no file: {out!r})"

    def expected_sha(self, size: int) -> str:
        if not hasattr(self, "shas"):
            sys.path.insert(0, os.path.join(HERE, "drivers"))
            self.shas = {}
        if size not in self.shas:
            from common import content_sha256
            self.shas[size] = content_sha256(size)
        return self.shas[size]

    def host_cpu(self, rnd: int) -> None:
        """W24 (epp-host only): the host process's user+sys CPU (/proc/PID/stat) per
        `files.exists` on a warm connection, CPU_BATCHES batches of CPU_CALLS calls, after
        warm-up calls, the idle measurement (CPU_IDLE_S), one batch right after it (kept as
        `after_idle_*`: this VM is slower for a while after a quiet second) and the warm-up
        again; as shipped (instances reused, as the provider declares) and with
        `--fresh-instances` (a fresh instance per call), in alternating order; then
        both again with all CPUs but one kept busy by nice-19 spinners (fewer idle
        CPUs to wake: closer to what the host's own work costs)."""
        a = {"sandbox": self.box[0], "path": CPU_PATH, "n": CPU_CALLS, "warmup": CPU_WARMUP,
             "warm_s": CPU_WARM_S, "idle_s": CPU_IDLE_S, "batches": CPU_BATCHES}
        variants = [("epp", {}), ("epp_fresh", {"EPP_HOST_ARGS": "--fresh-instances"})]
        busy = [(f"{name}_busy", env) for name, env in variants]
        for name, env in (variants if rnd % 2 == 0 else variants[::-1]) + busy:
            r = self.drive("epp", "cpu", {**a, "busy": name.endswith("_busy")}, env)
            self.record("host_cpu", name, {k: r[k] for k in ("cpu_us", "sched_us", "wall_us", "calls", "clk_tck",
                                                             "idle_cpu_us_per_s", "idle_sched_us_per_s",
                                                             "after_idle_cpu_us", "after_idle_sched_us",
                                                             "after_idle_wall_us")})

    def files_big(self, rnd: int) -> None:
        """W24: streamed `files.write` / `files.read` (epp-host `stream: true`, 1 MiB
        chunks; the SDK's `write_files` of a stream and `read_bytes_stream`; the raw
        client's upload and download) of each of BIG_SIZES (the largest in the short
        rounds only). sha256 of what the driver sent, of the file in the sandbox
        (`sha256sum` there, through execd by bench.py) and of what came back must all
        be the bench content's; else the step fails."""
        small, big = self.big_sizes()
        sizes = [small] + ([big] if rnd < self.o.short_rounds else [])
        for size in sizes:
            want = self.expected_sha(size)
            for c in self.order(rnd):
                path = f"/tmp/epp-bench-big-{os.getpid()}-{c}.bin"
                a = {"sandbox": self.box[0], "endpoint": self.endpoint[0], "path": path, "size": size}
                if c == "raw":
                    a = {"endpoint": self.endpoint[0], "path": path, "size": size, "sha": 1}
                r = self.drive(c, "files_big" if c != "raw" else "files", a)
                got = {"sent": r.get("write_sha256"), "in the sandbox": self.sandbox_sha256(self.endpoint[0], path),
                       "read back": r.get("read_sha256")}
                bad = {k: v for k, v in got.items() if v != want}
                if bad:
                    raise RuntimeError(f"{c} streamed files, {size} bytes: sha256 mismatch (expected {want}): "
                                       + ", ".join(f"{k} {v}" for k, v in bad.items()))
                mib = size / (1 << 20)
                self.record("files_big", c, {"bytes": size, "write_mib_s": mib / r["write_s"],
                                             "read_mib_s": mib / r["read_s"], "sha256_ok": len(got),
                                             "round": rnd, "driver_hwm_kib": r.get("hwm_kib")})

    def big_sizes(self) -> tuple:
        return (BIG_SIZES[0], self.o.big_mib << 20) if self.o.big_mib else BIG_SIZES

    def scaling(self, rnd: int) -> None:
        """W24 scaling curve (short rounds): per contender one driver process for
        SCALE_LEVELS concurrent `commands.run "true"` over each of SCALE_SERIES
        sandboxes, one for READ_LEVELS concurrent streamed reads of READ_BYTES over
        8 sandboxes; wall, per-call times and the peak RSS of the process speaking
        HTTP (epp-host itself for epp) at each level."""
        # The shared 8 and more of their kind, kept apart (every other step uses the 8).
        boxes, endpoints = self.box + self.scale_box, self.endpoint + self.scale_endpoint
        if len(boxes) < max(SCALE_SERIES):
            log(f"creating {max(SCALE_SERIES) - len(boxes)} more sandboxes for the scaling curve")
            while len(boxes) < max(SCALE_SERIES):
                b, e = self.create_sandbox(NO_GRACE)
                self.scale_box.append(b)
                self.scale_endpoint.append(e)
                boxes, endpoints = boxes + [b], endpoints + [e]
        path = f"/tmp/epp-bench-scale-{os.getpid()}.bin"
        if not getattr(self, "scale_file", None):
            self.put_file(path, READ_BYTES)
            self.scale_file = path
        min_calls = SCALE_MIN_CALLS if self.o.batches > 1 else 0
        for c in self.order(rnd):
            a = {"sandboxes": boxes, "endpoints": ",".join(endpoints), "series": list(SCALE_SERIES),
                 "levels": list(SCALE_LEVELS), "batches": self.o.batches, "min_calls": min_calls}
            if c == "raw":
                a = {k: (",".join(map(str, v)) if isinstance(v, list) else v) for k, v in a.items() if k != "sandboxes"}
            r = self.drive(c, "scale_run", a)
            self.record("scale_run", c, self.scale_steps(r))
            a = {"sandboxes": self.box[:8], "endpoints": ",".join(self.endpoint[:8]), "path": path,
                 "size": READ_BYTES, "levels": list(READ_LEVELS), "batches": self.o.batches, "min_calls": min_calls}
            if c == "raw":
                a = {k: (",".join(map(str, v)) if isinstance(v, list) else v) for k, v in a.items() if k != "sandboxes"}
            r = self.drive(c, "scale_read", a)
            self.record("scale_read", c, {**self.scale_steps(r),
                                          "_checked": r.get("sha_checked", r.get("compared", 0))})

    @staticmethod
    def scale_steps(r: dict) -> dict:
        """A driver's levels, each with the peak RSS of the process that speaks HTTP."""
        return {k: {"wall_us": v["wall_us"], "lat_us": v["lat_us"],
                    "hwm_kib": v.get("host_hwm_kib", v.get("hwm_kib")), "rss_kib": v.get("host_rss_kib", v.get("rss_kib"))}
                for k, v in r["steps"].items()}

    def put_file(self, path: str, size: int) -> None:
        """The scaling curve's file, uploaded by bench.py into each of the first 8
        sandboxes through execd, and checked there."""
        sys.path.insert(0, os.path.join(HERE, "drivers"))
        from common import file_content
        data = file_content(size)
        boundary = "benchscalefile0b1c"
        meta = json.dumps({"path": path, "mode": 644})
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
                f"Content-Type: application/json\r\n\r\n{meta}\r\n--{boundary}\r\n"
                f"Content-Disposition: form-data; name=\"file\"; filename=\"file\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--".encode()
        for ep in self.endpoint[:8]:
            req = urllib.request.Request(f"http://{ep}/files/upload", method="POST", data=body,
                                         headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                resp.read()
            got = self.sandbox_sha256(ep, path, remove=False)
            if got != self.expected_sha(size):
                raise RuntimeError(f"the scaling file in {ep}: sha256 {got}")

    def mcp_overhead(self, rnd: int) -> None:
        """W24: `commands_run "true"` through `epp-host mcp` vs `commands.run "true"`
        through `epp-host run`, both driven by one minimal JSON-RPC stdio client
        (drivers/epp.py rpc_run), the two back to back in each round (order rotating)."""
        for via in self.order(rnd, MCP_VIA):
            a = {"via": via, "sandbox": self.box[0], "n": self.o.calls, "warmup": 20}
            r = self.drive("epp", "rpc_run", a)
            self.record("mcp_overhead", via, {"lat_us": r["lat_us"], "hwm_kib": r["host_hwm_kib"]})

    # ------------------------------------------------------------ issue 23: snapshots (Docker tier)

    def docker_env(self) -> dict:
        """The drivers' settings for the Docker tier's server (epp-host, SDK)."""
        domain = self.docker_url.split("://", 1)[1]
        return {"ABX_OPENSANDBOX_BASE_URL": self.docker_url, "ABX_OPENSANDBOX_API_KEY": self.o.docker_key,
                "OPEN_SANDBOX_DOMAIN": domain, "OPEN_SANDBOX_API_KEY": self.o.docker_key}

    def docker_wait_ping(self, box: str, deadline_s: float = 60) -> str:
        """Waits until execd of a Docker-tier sandbox answers /ping; its endpoint."""
        ep = self.api("GET", f"/v1/sandboxes/{box}/endpoints/44772", docker=True)["endpoint"]
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                with urllib.request.urlopen(f"http://{ep}/ping", timeout=5) as resp:
                    if resp.status == 200:
                        return ep
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def docker_image_bytes(self, ref: str) -> int | None:
        """The size docker reports for an image of the Docker tier's engine, if known."""
        if not self.o.docker_host:
            return None
        try:
            out = subprocess.run(["docker", "-H", self.o.docker_host, "image", "inspect", "--format",
                                  "{{.Size}}", ref], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else None

    def make_snapshot(self) -> None:
        """Workload 16's snapshot, made once through the server's API (not timed): a
        sandbox of IMAGE writes SNAPSHOT_FILE, is snapshotted (`docker commit`) and
        deleted; one sandbox made from the snapshot must hold that file. The first
        create of a Docker-tier run also fetches execd's archive, so this warms up."""
        name = f"epp-bench-{os.getpid()}"
        content = f"made by bench.py for snapshot {name}"
        t0 = time.perf_counter()
        box = self.api("POST", "/v1/sandboxes", {
            "image": {"uri": IMAGE}, "timeout": 600, "resourceLimits": {"cpu": "1", "memory": "2Gi"},
            "entrypoint": ["sh", "-c", f"echo '{content}' > {SNAPSHOT_FILE} && exec tail -f /dev/null"],
            "metadata": {"bench": "snapshot-source"}}, docker=True)["id"]
        try:
            self.docker_wait_ping(box)
            t = time.perf_counter()
            snap = self.api("POST", f"/v1/sandboxes/{box}/snapshots", {"name": name}, docker=True)
            self.snapshot = {"id": snap["id"], "name": name}
            deadline = time.monotonic() + 120
            while snap["status"]["state"] != "Ready":
                if snap["status"]["state"] not in ("Creating", "Pending") or time.monotonic() > deadline:
                    raise RuntimeError(f"snapshot {snap['id']} did not become ready: {snap['status']}")
                time.sleep(0.2)
                snap = self.api("GET", f"/v1/snapshots/{snap['id']}", docker=True)
            build_s = time.perf_counter() - t
        finally:
            self.api("DELETE", f"/v1/sandboxes/{box}", docker=True)
        check = self.api("POST", "/v1/sandboxes", {
            "snapshotId": self.snapshot["id"], "timeout": 600, "resourceLimits": {"cpu": "1", "memory": "2Gi"},
            "metadata": {"bench": "snapshot-check"}}, docker=True)["id"]
        try:
            ep = self.docker_wait_ping(check)
            with urllib.request.urlopen(f"http://{ep}/files/download?path={SNAPSHOT_FILE}", timeout=30) as resp:
                got = resp.read().decode().strip()
        finally:
            self.api("DELETE", f"/v1/sandboxes/{check}", docker=True)
        if got != content:
            raise RuntimeError(f"a sandbox made from snapshot {name} has {got!r} in {SNAPSHOT_FILE}, not {content!r}")
        self.snapshot.update(build_s=build_s, setup_s=time.perf_counter() - t0, file_checked=True,
                             image_bytes=self.docker_image_bytes(IMAGE),
                             snapshot_bytes=self.docker_image_bytes(f"opensandbox-snapshots:{self.snapshot['id']}"))
        log(f"snapshot {name} ({self.snapshot['id']}) ready in {build_s:.1f} s; {SNAPSHOT_FILE} found in a sandbox "
            f"made from it")

    def remove_snapshot(self) -> None:
        """Deletes workload 16's snapshot (and with it its image) and checks it is gone."""
        if not self.snapshot:
            return
        sid = self.snapshot["id"]
        self.api("DELETE", f"/v1/snapshots/{sid}", docker=True)
        try:
            self.api("GET", f"/v1/snapshots/{sid}", docker=True)
            gone = False
        except urllib.error.HTTPError as e:
            gone = e.code == 404
        self.snapshot["removed"] = gone
        if self.o.docker_host:
            self.snapshot["image_removed"] = self.docker_image_bytes(f"opensandbox-snapshots:{sid}") is None
        log(f"snapshot {self.snapshot['name']} removed" + ("" if gone else " (but the server still lists it)"))

    def snapshot_create(self, rnd: int) -> None:
        """W16 (Docker tier): create → ready → kill from the snapshot and from IMAGE,
        alternating within each driver process (which kind goes first alternates per
        round); epp-host `sandbox.create {template: NAME}` / the default template, the
        SDK `Sandbox.create(snapshot_id=ID)` / `Sandbox.create(IMAGE)`, raw the provider's
        HTTP calls."""
        for c in self.order(rnd):
            a = {"n": self.o.cycles, "first": ("image", "snapshot")[rnd % 2], "image": IMAGE,
                 "server": self.docker_url.split("://", 1)[1], "key": self.o.docker_key,
                 "snapshot": self.snapshot["name"], "snapshot_id": self.snapshot["id"]}
            r = self.drive(c, "snapshot_cycle", a, env=self.docker_env())
            self.record("snapshot_cycle", c, {"image_us": r["image_us"], "snapshot_us": r["snapshot_us"]})

    # ------------------------------------------------------------ the run

    def machine(self) -> dict:
        def cmd(argv):
            try:
                return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                return ""
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        except OSError:
            pass
        mem_kib = 0
        with open("/proc/meminfo") as f:
            mem_kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
        return {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem_kib / 1048576, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "rustc": cmd(["rustc", "--version"]),
            "epp_host": cmd([self.o.host, "--version"]),
            "sdk": cmd([self.o.sdk_python, "-c",
                        "import importlib.metadata as m; print('opensandbox', m.version('opensandbox'), "
                        "'httpx', m.version('httpx'))"]),
            "mcp": cmd([self.o.mcp_python, "-c",
                        "import importlib.metadata as m; print('mcp', m.version('mcp') + ', opensandbox-mcp', "
                        "m.version('opensandbox-mcp'))"]),
            "server": "opensandbox-server 1.1.1 (tests/testbed, local-process runtime)",
            "component_bytes": os.path.getsize(self.o.wasm),
            "data_image_bytes": data_image_bytes(self.o.wasm),
            "host_binary_bytes": os.path.getsize(self.o.host),
            "load_before": os.getloadavg(),
        }

    def main(self) -> None:
        started = time.time()
        self.results["machine"] = self.machine()
        self.results["config"] = {
            "rounds": self.o.rounds, "short_rounds": self.o.short_rounds, "calls": self.o.calls, "batches": self.o.batches,
            "cycles": self.o.cycles, "reps_start": self.o.reps_start,
            "watch_writes": self.o.watch_writes, "watch_idle": self.o.watch_idle,
            "stream_bytes": STREAM_BYTES, "stream_line": STREAM_LINE, "file_bytes": FILE_BYTES,
            "many_files": MANY_FILES, "small_file": SMALL_FILE, "transfer_bytes": TRANSFER_BYTES,
            "code_expr": CODE_EXPR, "code_print_bytes": CODE_PRINT_BYTES,
            "image": IMAGE, "mcp_fail_cmd": MCP_FAIL_CMD, "mcp_missing_path": MCP_MISSING_PATH,
            "cpu_calls": CPU_CALLS, "cpu_batches": CPU_BATCHES, "cpu_warmup": CPU_WARMUP, "cpu_path": CPU_PATH,
            "cpu_warm_s": CPU_WARM_S, "cpu_idle_s": CPU_IDLE_S,
            "big_sizes": list(self.big_sizes()), "scale_series": list(SCALE_SERIES),
            "scale_levels": list(SCALE_LEVELS), "read_levels": list(READ_LEVELS), "read_bytes": READ_BYTES,
            "scale_min_calls": SCALE_MIN_CALLS if self.o.batches > 1 else 0,
        }
        steps = [("cold start", self.cold_start), ("idle memory", self.idle),
                 ("commands.run round trip", self.run_true), ("streaming", self.stream),
                 ("files", self.files), ("concurrency", self.concurrent),
                 ("create/kill cycle", self.cycle), ("round trip, default grace", self.run_true_grace),
                 ("sessions.run round trip", self.session_run), ("stdin round trip", self.stdin_round_trip),
                 ("files.watch latency", self.watch), ("100 small files", self.files_many),
                 ("256 MiB through transfer URLs", self.transfer),
                 ("code.run round trip", self.code_run), ("code output streaming", self.code_stream),
                 ("MCP servers: tools/list, idle memory", self.mcp_list),
                 ("MCP servers: commands_run round trip", self.mcp_run),
                 ("MCP servers: create/kill cycle", self.mcp_cycle),
                 ("MCP servers: what a failed call shows", self.mcp_errors),
                 ("epp-host CPU per files.exists", self.host_cpu),
                 ("streamed files, 32 and 256 MiB, sha256 checked", self.files_big),
                 ("scaling curve: concurrent runs and streamed reads", self.scaling),
                 ("MCP overhead: epp-host mcp vs run, one client", self.mcp_overhead),
                 ("Docker tier: create from a snapshot vs from the image", self.snapshot_create)]
        if self.o.only:
            keep = set(self.o.only.split(","))
            unknown = keep - {st.__name__ for _, st in steps}
            if unknown:
                shutil.rmtree(self.cache_dir, ignore_errors=True)
                sys.exit(f"bench: --only names no step {', '.join(sorted(unknown))}")
            steps = [(n, st) for n, st in steps if st.__name__ in keep]
        if not self.docker_url and any(st.__name__ in DOCKER_STEPS for _, st in steps):
            log("no --docker-url: skipping " + ", ".join(DOCKER_STEPS) + " (the Docker tier's workloads)")
            steps = [(n, st) for n, st in steps if st.__name__ not in DOCKER_STEPS]
        names = {st.__name__ for _, st in steps}
        self.box, self.endpoint, extra = [], [], []
        self.scale_box, self.scale_endpoint = [], []
        try:
            # The local tier's shared sandboxes, when a selected step uses them.
            if names - set(DOCKER_STEPS):
                log("creating the shared sandboxes")
                made = [self.create_sandbox(NO_GRACE) for _ in range(8)]
                self.box = [b for b, _ in made]
                self.endpoint = [e for _, e in made]
                self.grace_box, self.grace_endpoint = self.create_sandbox({})
                extra.append(self.grace_box)
            if names & {"code_run", "code_stream"}:
                self.code_box, self.code_endpoint = self.create_code_sandbox()
                extra.append(self.code_box)
            if "snapshot_create" in names:
                log("Docker tier: making the snapshot of workload 16")
                self.make_snapshot()
            # Fill the compile cache once (not timed): "warm" means a cache hit.
            self.drive("epp", "idle", {"settle_s": 0})
            for rnd in range(self.o.rounds):
                for name, step in steps:
                    if (step in (self.cycle, self.run_true_grace, self.mcp_cycle, self.snapshot_create, self.scaling)
                            and rnd >= self.o.short_rounds):
                        continue
                    if step == self.mcp_errors and rnd > 0:
                        continue
                    log(f"round {rnd + 1}/{self.o.rounds}: {name}")
                    meta = self.results["steps"].setdefault(step.__name__, {
                        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                        "load_before": os.getloadavg(), "rounds": 0, "seconds": 0.0,
                        # This run's knobs, kept with the step: merged into another run's
                        # samples (--only), the step's section still states its own.
                        "config": self.results["config"]})
                    t = time.perf_counter()
                    step(rnd)
                    meta["seconds"] = round(meta["seconds"] + time.perf_counter() - t, 1)
                    meta["rounds"] += 1
                    meta["load_after"] = os.getloadavg()
        finally:
            if getattr(self, "scale_file", None):
                for ep in self.endpoint[:8]:
                    try:
                        self.execd(ep, f"rm -f '{self.scale_file}'")
                    except OSError:
                        pass
            for b in self.box + self.scale_box + extra:
                try:
                    self.api("DELETE", f"/v1/sandboxes/{b}")
                except OSError:
                    pass
            if self.snapshot:
                try:
                    self.remove_snapshot()
                except OSError as e:
                    log(f"removing snapshot {self.snapshot['name']} failed: {e}")
            # The compile cache and workload 12's 256 MiB source file.
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        if self.snapshot:
            self.results["docker"] = {**self.snapshot, "engine": self.engine_version(),
                                      "rounds": self.results["steps"]["snapshot_create"]["rounds"],
                                      "cycles": self.o.cycles, "image": IMAGE}
        self.results["machine"]["load_after"] = os.getloadavg()
        self.results["duration_s"] = round(time.time() - started)
        out = self.merged() if self.o.only else self.results
        with open(self.o.out, "w") as f:
            json.dump(out, f)
        log(f"samples written to {self.o.out} ({self.results['duration_s']} s)")

    def engine_version(self) -> str:
        if not self.o.docker_host:
            return ""
        try:
            out = subprocess.run(["docker", "-H", self.o.docker_host, "version", "--format", "{{.Server.Version}}"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip()

    def merged(self) -> dict:
        """A run of some steps (--only) goes into the samples already in --out: each
        workload it measured replaces that workload's samples there, the rest (and the
        other run's machine, config and duration, which the report's header shows) stay.
        Without a readable file there, this run's samples alone."""
        try:
            with open(self.o.out) as f:
                old = json.load(f)
            if not isinstance(old.get("samples"), dict):
                raise ValueError("no samples")
        except (OSError, ValueError) as e:
            log(f"nothing to merge into in {self.o.out} ({e}): writing this run's samples alone")
            return self.results
        old["samples"].update(self.results["samples"])
        old.setdefault("steps", {}).update(self.results["steps"])
        if "docker" in self.results:
            old["docker"] = self.results["docker"]
        log(f"merged {', '.join(sorted(self.results['samples'])) or 'nothing'} into the samples of {self.o.out} "
            f"({old.get('machine', {}).get('date', 'undated')})")
        return old


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True, help="the testbed's base URL")
    p.add_argument("--key", required=True, help="its API key")
    p.add_argument("--host", required=True, help="release epp-host binary")
    p.add_argument("--wasm", required=True, help="signed provider component")
    p.add_argument("--trusted-key", required=True)
    p.add_argument("--raw", required=True, help="the raw HTTP client (bench/raw)")
    p.add_argument("--sdk-python", required=True, help="python of the SDK venv")
    p.add_argument("--mcp-python", required=True,
                   help="python of the MCP venv (mcp==2.3.0, opensandbox-mcp==1.1.1; the MCP workload)")
    p.add_argument("--out", required=True, help="where the samples go (JSON)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--short-rounds", type=int, default=3,
                   help="rounds of the slow workloads (6, W2 with grace, MCP create/kill, 16)")
    p.add_argument("--calls", type=int, default=200, help="workloads 2, 8, 9, MCP: timed calls per round")
    p.add_argument("--batches", type=int, default=3, help="workload 5: timed batches of 64 per round")
    p.add_argument("--cycles", type=int, default=2,
                   help="workloads 6, MCP: create/kill cycles per round; 16: of each kind per round")
    p.add_argument("--reps-start", type=int, default=8, help="workload 1: warm starts per round")
    p.add_argument("--watch-writes", type=int, default=20, help="workload 10: timed writes per round")
    p.add_argument("--watch-idle", type=float, default=6.0,
                   help="workload 10: seconds an idle watch's requests are counted (short rounds)")
    p.add_argument("--big-mib", type=int, default=0,
                   help="issue 24's streamed files: the large size in MiB (default 256; 32 MiB always runs)")
    p.add_argument("--only", default="", help="comma list of steps (cold_start, idle, run_true, stream, files, "
                   "concurrent, cycle, run_true_grace, session_run, stdin_round_trip, watch, files_many, transfer, "
                   "code_run, code_stream, mcp_list, mcp_run, mcp_cycle, mcp_errors, snapshot_create, "
                   "host_cpu, files_big, scaling, mcp_overhead); "
                   "their samples are merged into those already in --out")
    p.add_argument("--docker-url", default="", help="the Docker tier's base URL (workload 16, snapshot_create; "
                   "without it that step is skipped)")
    p.add_argument("--docker-key", default="", help="its API key")
    p.add_argument("--docker-host", default="", help="its engine (unix://…), for `docker image inspect` sizes")
    Bench(p.parse_args()).main()


if __name__ == "__main__":
    main()
