"""Suite-wide settings.

Tests read every rank's lines from the launcher's console, so the
launcher shows them all (`--console-ranks all`); the tests of the
console's default set the variable back themselves. The shared pools of
worker processes stop when the session ends (`keras_hybrid.testing.pool`).

`KERAS_HYBRID_SUITE_PROFILE=path.json` records, per test file, the wall
time, the CPU time of the test process and that of the processes it
launched (launchers and workers, the shared pools included). The suite is
CPU-bound on this machine, so CPU seconds, not wall seconds, say where
the time goes; the terminal summary lists the 25 costliest files.
"""

import collections
import json
import os
import resource
import time

import pytest

from keras_hybrid.testing import pool

os.environ.setdefault("KERAS_HYBRID_CONSOLE_RANKS", "all")

PROFILE_ENV = "KERAS_HYBRID_SUITE_PROFILE"
_profile = collections.defaultdict(
    lambda: {"tests": 0, "wall": 0.0, "self_cpu": 0.0, "child_cpu": 0.0}
)


def _cpu(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _live_descendants() -> dict:
    """CPU seconds so far of each live descendant process (the shared
    pools' launchers and workers live across tests), read from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    seen, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone
        for task in tasks:
            # Each thread lists the children it started; a thread that
            # ends meanwhile must not hide its siblings' children.
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                continue
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            seen[pid] = (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, ValueError, IndexError):
            continue
    return seen


def _launched_cpu(before: dict, after: dict, reaped: float) -> float:
    """CPU of launched processes during a test: those reaped (their whole
    life, minus what they had used before the test) plus what the live
    ones used meanwhile."""
    gone = sum(cpu for pid, cpu in before.items() if pid not in after)
    live = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    return reaped - gone + live


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    del nextitem
    if not os.environ.get(PROFILE_ENV):
        yield
        return
    start = (
        time.monotonic(),
        _cpu(resource.RUSAGE_SELF),
        _cpu(resource.RUSAGE_CHILDREN),
        _live_descendants(),
    )
    yield
    entry = _profile[item.location[0]]
    entry["tests"] += 1
    entry["wall"] += time.monotonic() - start[0]
    entry["self_cpu"] += _cpu(resource.RUSAGE_SELF) - start[1]
    entry["child_cpu"] += _launched_cpu(
        start[3],
        _live_descendants(),
        _cpu(resource.RUSAGE_CHILDREN) - start[2],
    )


def pytest_sessionfinish(session, exitstatus):
    del session, exitstatus
    pool.close_pools()
    path = os.environ.get(PROFILE_ENV)
    if path and _profile:
        with open(path, "w") as f:
            json.dump(_profile, f, indent=1, sort_keys=True)


def pytest_terminal_summary(terminalreporter):
    if not os.environ.get(PROFILE_ENV) or not _profile:
        return
    rows = sorted(
        _profile.items(),
        key=lambda kv: -(kv[1]["self_cpu"] + kv[1]["child_cpu"]),
    )
    write = terminalreporter.write_line
    terminalreporter.section("CPU seconds per test file (costliest 25)")
    write(f"{'cpu':>8} {'wall':>8} {'tests':>5}  file")
    for name, e in rows[:25]:
        cpu = e["self_cpu"] + e["child_cpu"]
        write(f"{cpu:8.1f} {e['wall']:8.1f} {e['tests']:5d}  {name}")
    total = sum(e["self_cpu"] + e["child_cpu"] for e in _profile.values())
    wall = sum(e["wall"] for e in _profile.values())
    write(f"{total:8.1f} {wall:8.1f} {'':5}  all files")
