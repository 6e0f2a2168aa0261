"""What every contender's driver shares: the workloads' inputs and outputs.

Stdlib only: imported by the epp-host driver (system Python) and by the SDK
driver (the SDK venv). A driver runs one workload per process:

    <python> <driver>.py <workload> '<json args>'

and prints one JSON object on stdout (times in microseconds or seconds, memory
in KiB). The raw client (bench/raw) takes the same workloads.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

# 63 characters + "\n": printable, nothing JSON must escape but the newline.
FILE_LINE = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"


def file_content(size: int) -> bytes:
    """The bytes every contender writes and reads back (bench/raw has the same)."""
    reps = size // len(FILE_LINE) + 1
    return (FILE_LINE * reps)[:size]


def content_at(offset: int, length: int) -> bytes:
    """`length` bytes of file_content starting at `offset` (a file far too big to
    hold is made and hashed piece by piece)."""
    start = offset % len(FILE_LINE)
    reps = (start + length) // len(FILE_LINE) + 1
    return (FILE_LINE * reps)[start:start + length]


def pieces(size: int, chunk: int):
    """(offset, bytes) of file_content(size) in pieces of `chunk` bytes; a piece
    that recurs (every full piece when `chunk` is a multiple of the line) is made
    once."""
    made: dict = {}
    for off in range(0, size, chunk):
        n = min(chunk, size - off)
        key = (off % len(FILE_LINE), n)
        if key not in made:
            made[key] = content_at(off, n)
        yield off, made[key]


def content_sha256(size: int) -> str:
    """sha256 of file_content(size), computed piece by piece."""
    h = hashlib.sha256()
    for _, piece in pieces(size, 1 << 20):
        h.update(piece)
    return h.hexdigest()


class Spool:
    """Lines (or bytes) kept on tmpfs while a clock runs, read back after it stops:
    what a big streamed read delivers is checked without holding it in memory and
    without hashing or decoding inside the timed part."""

    def __init__(self) -> None:
        shm = "/dev/shm"
        self.f = tempfile.TemporaryFile(dir=shm if os.access(shm, os.W_OK) else None)
        self.write = self.f.write

    def lines(self):
        self.f.seek(0)
        yield from self.f

    def blocks(self, size: int = 1 << 20):
        self.f.seek(0)
        while True:
            b = self.f.read(size)
            if not b:
                return
            yield b

    def close(self) -> None:
        self.f.close()


class Into:
    """What a big read delivers, copied into one buffer of the expected size made
    before the clock starts, as the raw client collects its download into memory:
    no allocation and no file write per chunk inside the timed part. (A tmpfs
    spool cost the epp driver twice the CPU, 120–130 against 60–70 ms per 256 MiB
    read, and 15–20 % of the read's throughput on two cores; bench/profiling.md.)
    Holds the whole file, as the raw client does."""

    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.got = 0

    def _room(self, n: int) -> memoryview:
        end = self.got + n
        if end > len(self.buf):
            raise RuntimeError(f"the read delivered more than the {len(self.buf)} bytes expected")
        return self.view[self.got:end]

    def write(self, b: bytes) -> None:
        self._room(len(b))[:] = b
        self.got += len(b)

    def read_from(self, f, n: int) -> None:
        """Exactly `n` bytes of the binary stream `f`, read straight into the buffer."""
        room = self._room(n)
        while room:
            k = f.readinto(room)
            if not k:
                raise RuntimeError("the stream ended inside a frame")
            room = room[k:]
        self.got += n

    def sha256(self) -> str:
        return hashlib.sha256(self.view[:self.got]).hexdigest()


def cpu_times(pid: int | str = "self") -> tuple[float, float]:
    """(user+sys seconds from /proc/PID/stat, on-CPU seconds summed over
    /proc/PID/task/*/schedstat) of a process. The first counts in clock ticks
    (usually 10 ms) and includes exited threads; the second is in ns but covers
    only threads alive now."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    ns_ = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns_ += int(f.read().split()[0])
        except OSError:
            pass  # the thread ended
    return ticks / os.sysconf("SC_CLK_TCK"), ns_ / 1e9


def reset_peak(pid: int | str) -> None:
    """VmHWM of `pid` back to its VmRSS (Linux ≥ 4.0: clear_refs 5), so the next
    reading is the peak of what runs in between."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def args() -> tuple[str, dict]:
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} <workload> '<json args>'")
    return sys.argv[1], json.loads(sys.argv[2])


def memory(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(rest.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def emit(result: dict) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    # Skip interpreter teardown (and the SDK's close noise): the result is out.
    os._exit(0)
