"""Helpers for launcher tests that are not fixtures."""

import subprocess
import sys
import time
from pathlib import Path

import pytest


def start_cli(*args):
    """Starts the CLI without waiting; the caller must reap it."""
    return subprocess.Popen(
        [sys.executable, "-m", "keras_hybrid.run", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_files(paths, timeout=30):
    """Waits until every path exists; fails the test on timeout."""
    deadline = time.monotonic() + timeout
    while not all(Path(p).exists() for p in paths):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {paths}")
        time.sleep(0.05)


def is_alive(pid):
    """Whether `pid` runs; zombies (dead, not yet reaped) count as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # The state letter follows the parenthesised command name.
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_gone(pids, seconds=30) -> list:
    """Waits up to `seconds` for every pid to exit; returns those still
    alive."""
    deadline = time.monotonic() + seconds
    while any(map(is_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if is_alive(p)]


def lines_by_rank(text):
    """Maps rank -> list of line bodies from `[rank] body` lines."""
    result = {}
    for line in text.splitlines():
        if line.startswith("["):
            rank, _, body = line[1:].partition("] ")
            result.setdefault(int(rank), []).append(body)
    return result
