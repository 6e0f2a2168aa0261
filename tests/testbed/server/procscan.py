"""Find and signal the processes of a testbed sandbox by the marker in their environment.

Every process of a sandbox carries ``OPENSANDBOX_TESTBED_SANDBOX=<id>`` and
``OPENSANDBOX_TESTBED_INSTANCE=<token>`` in its environment, inherited from the
execd stand-in or the entrypoint the runtime started. Commands that execd puts in
their own process group, or a PTY shell in its own session, are therefore still
found by reading ``/proc/<pid>/environ``. A process that clears its environment
(``env -i``) escapes the scan; the runtime also signals the process groups it
started itself as a second net.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable

SANDBOX_MARKER = "OPENSANDBOX_TESTBED_SANDBOX"
INSTANCE_MARKER = "OPENSANDBOX_TESTBED_INSTANCE"


def _environ_entries(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        # Gone, a zombie, or not ours.
        return None


def find_pids(name: str, value: str) -> list[int]:
    """Pids whose initial environment holds ``name=value`` (this process excluded)."""
    needle = f"{name}={value}".encode()
    own = os.getpid()
    pids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == own:
            continue
        env = _environ_entries(pid)
        if env is not None and needle in env:
            pids.append(pid)
    return pids


def process_state(pid: int) -> str | None:
    """One-letter state from /proc/<pid>/stat (R, S, T, t, Z, ...), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces or ')'.
    end = data.rfind(b")")
    if end < 0 or end + 2 >= len(data):
        return None
    return chr(data[end + 2])


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_all(name: str, value: str, rounds: int = 20) -> list[int]:
    """SIGSTOP every marked process until a scan finds none still running.

    Repeated because a process may fork between the scan and the signal.
    """
    stopped: set[int] = set()
    for _ in range(rounds):
        pids = find_pids(name, value)
        running = [p for p in pids if process_state(p) not in ("T", "t", "Z", None)]
        if not running:
            break
        signal_pids(running, signal.SIGSTOP)
        stopped.update(running)
        time.sleep(0.01)
    return sorted(stopped)


def continue_all(name: str, value: str) -> list[int]:
    pids = find_pids(name, value)
    signal_pids(pids, signal.SIGCONT)
    return pids


def kill_all(name: str, value: str, timeout: float = 5.0) -> list[int]:
    """SIGKILL every marked process, repeating until none is left (or timeout)."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in find_pids(name, value) if process_state(p) not in ("Z", None)]
        if not pids:
            break
        signal_pids(pids, signal.SIGKILL)
        killed.update(pids)
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return sorted(killed)


if __name__ == "__main__":  # pragma: no cover - manual helper
    import argparse

    parser = argparse.ArgumentParser(description="Kill every process marked with NAME=VALUE")
    parser.add_argument("marker", help="NAME=VALUE, e.g. OPENSANDBOX_TESTBED_INSTANCE=abc")
    parser.add_argument("--list", action="store_true", help="only list the pids")
    args = parser.parse_args()
    key, _, val = args.marker.partition("=")
    if args.list:
        print(" ".join(str(p) for p in find_pids(key, val)))
    else:
        print(" ".join(str(p) for p in kill_all(key, val)))
