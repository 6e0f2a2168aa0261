"""What every contender's driver shares: the workloads' inputs and outputs.

Stdlib only: imported by the epp-host driver (system Python) and by the SDK
driver (the SDK venv). A driver runs one workload per process:

    <python> <driver>.py <workload> '<json args>'

and prints one JSON object on stdout (times in microseconds or seconds, memory
in KiB). The raw client (bench/raw) takes the same workloads.
"""

from __future__ import annotations

import json
import os
import sys

# 63 characters + "\n": printable, nothing JSON must escape but the newline.
FILE_LINE = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"


def file_content(size: int) -> bytes:
    """The bytes every contender writes and reads back (bench/raw has the same)."""
    reps = size // len(FILE_LINE) + 1
    return (FILE_LINE * reps)[:size]


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
