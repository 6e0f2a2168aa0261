"""What the Python conformance scenarios share: parts that report a mismatch or
an SDK error and let the next part run, and the list of what failed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
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


def parse_mode() -> str:
    """The `--mode direct|proxy` argument."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["direct", "proxy"], default="direct")
    return parser.parse_args().mode


def run(title: str, scenario, loggers: tuple[str, ...]) -> int:
    """Runs `scenario()` and reports what failed; the exit status. The SDKs log
    every failed call at ERROR, including the ones a scenario expects."""
    logging.basicConfig(level=logging.WARNING)
    for name in loggers:
        logging.getLogger(name).setLevel(logging.DEBUG if VERBOSE else logging.CRITICAL)
    try:
        asyncio.run(scenario())
    except Exception as exc:  # noqa: BLE001 - create failed: nothing else can run
        traceback.print_exc()
        FAILURES.append(f"create: {type(exc).__name__}: {exc}")
    if FAILURES:
        print(f"{title}: {len(FAILURES)} part(s) failed:", file=sys.stderr)
        for failure in FAILURES:
            print(f"  - {failure}", file=sys.stderr)
        return 1
    print(f"{title}: all checks passed")
    return 0
