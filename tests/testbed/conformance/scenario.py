"""What the Python conformance scenarios share: parts that report a mismatch or
an SDK error and let the next part run, and the list of what failed."""

from __future__ import annotations

import os
import traceback

VERBOSE = os.environ.get("TESTBED_VERBOSE") == "1"
FAILURES: list[str] = []


class Mismatch(AssertionError):
    pass


async def section(name: str, fn, *args):
    """Run one part of the scenario; a mismatch or error ends that part only."""
    print(name, flush=True)
    try:
        return await fn(*args)
    except Mismatch as exc:
        FAILURES.append(f"{name}: {exc}")
        print(f"  MISMATCH {exc}", flush=True)
    except Exception as exc:  # noqa: BLE001 - an SDK call failed: report and go on
        if VERBOSE:
            traceback.print_exc()
        FAILURES.append(f"{name}: {type(exc).__name__}: {exc}")
        print(f"  ERROR {type(exc).__name__}: {exc}", flush=True)
    return None


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Mismatch(what)
    print(f"  ok  {what}", flush=True)
