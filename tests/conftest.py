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

`make test` runs on pytest-xdist workers (`--dist loadgroup`, `TEST_PROCS`
of them). The tests marked `multiprocess` (they launch workers) or
`netns` (they make network namespaces on one subnet and check that none
are left behind) form two groups, each run by one pytest process one test
after another: `pooled-launches`, the files that run scenarios on the
shared pools of workers (`keras_hybrid.testing.pool`), so one process
keeps the pools; and `launches`, the files that launch their own
processes (elastic jobs, killed workers, the launcher's command line,
emulated hosts). So at most two jobs of TensorFlow workers share the
cores. Every other test file is a group of its own, run by whichever
process is free. The `netns` tests hold an exclusive lock on
`KERAS_HYBRID_NETNS_LOCK` (default `/tmp/keras-hybrid-netns.lock`) per
file, so no two of them, and no benchmark run elsewhere on the machine
under `flock` on the same file, share their subnets.

Each pytest process (controller and xdist workers) freezes what the
imports and the collection made (`gc.freeze`), as the pool workers do:
each `clear_session` and automatic full collection then scans only what
the tests made.

Each pytest process (controller and xdist workers) makes its own
temporary folder and points `TMPDIR` (and `tempfile`) at it before any
test runs, so the folders tests make with `tempfile` and the files their
workers write land there. It is removed when the session passes; when a
test failed it is kept and its path printed, with the workers' outputs.
"""

import collections
import fcntl
import gc
import json
import os
import resource
import shutil
import tempfile
import time

import pytest

from keras_hybrid.testing import pool

os.environ.setdefault("KERAS_HYBRID_CONSOLE_RANKS", "all")

PROFILE_ENV = "KERAS_HYBRID_SUITE_PROFILE"
# The xdist groups of the tests that launch workers or make network
# namespaces (marked so): those that run scenarios on the shared pools,
# and those that launch their own processes. One pytest process runs each
# group, one test after another.
POOLED = "pooled-launches"
LAUNCHES = "launches"
LAUNCH_MARKS = ("multiprocess", "netns")
_profile = collections.defaultdict(
    lambda: {"tests": 0, "wall": 0.0, "self_cpu": 0.0, "child_cpu": 0.0}
)


# Runs before xdist's own hook, which turns the `xdist_group` markers
# into node ids.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        launches = any(item.get_closest_marker(m) for m in LAUNCH_MARKS)
        group = item.location[0]
        if launches:
            group = POOLED if _uses_pools(item) else LAUNCHES
        item.add_marker(pytest.mark.xdist_group(group))


def _uses_pools(item) -> bool:
    """Whether `item`'s module imported the pool module or a function of
    it."""
    module = getattr(item, "module", None)
    if module is None:
        return False
    return any(
        value is pool or getattr(value, "__module__", None) == pool.__name__
        for value in vars(module).values()
    )


def pytest_collection_finish(session):
    # What the imports and the collection made (TensorFlow, Keras, the
    # test modules) lives as long as the session: frozen, it is out of
    # every later collection, and each `clear_session` then scans only
    # what the tests made (0.15 s less per call), as in the pool workers.
    gc.collect()
    gc.freeze()
    # In an xdist worker under `--dist loadgroup`, xdist has put each
    # test's group in its node id by now. If it could not (pytest-xdist
    # #1386, with pytest 9.2), the groups would be lost without a word.
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [i.nodeid for i in session.items if "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (first: "
            f"{lost[0]}); this pytest and pytest-xdist do not work "
            "together (pytest-xdist #1386). Install the versions setup.cfg "
            "pins: pip install -e '.[test]'."
        )


@pytest.fixture(scope="module", autouse=True)
def _netns_lock(request):
    # Module scope and autouse: taken before a file's own module fixtures
    # make its namespaces.
    if not any(m.name == "netns" for m in request.node.iter_markers()):
        yield
        return
    path = os.environ.get(
        "KERAS_HYBRID_NETNS_LOCK", "/tmp/keras-hybrid-netns.lock"
    )
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _profile_path(base: str, worker: str | None) -> str:
    return f"{base}.{worker}" if worker else base


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


_SESSION_TMP = "KERAS_HYBRID_SESSION_TMP"
_previous_tmpdir: list = []


def pytest_configure(config):
    del config
    folder = tempfile.mkdtemp(prefix="keras_hybrid_tests_")
    _previous_tmpdir.append(os.environ.get("TMPDIR"))
    os.environ[_SESSION_TMP] = folder
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder


def _remove_session_tmp(failed: bool) -> None:
    folder = os.environ.pop(_SESSION_TMP, None)
    tempfile.tempdir = None
    previous = _previous_tmpdir.pop() if _previous_tmpdir else None
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    if folder is None:
        return
    if failed:
        print(f"\nThe tests' temporary files are kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus):
    del session
    pool.close_pools()
    _remove_session_tmp(failed=exitstatus != 0)
    path = os.environ.get(PROFILE_ENV)
    if path and _profile:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        with open(_profile_path(path, worker), "w") as f:
            json.dump(_profile, f, indent=1, sort_keys=True)


def _merged_profile(path: str, config) -> dict:
    """This process's profile, or on an xdist controller the sum of its
    workers' files (which it then folds into `path`)."""
    workers = getattr(config.option, "numprocesses", None)
    if not workers or os.environ.get("PYTEST_XDIST_WORKER"):
        return dict(_profile)
    merged = collections.defaultdict(collections.Counter)
    for n in range(int(workers)):
        try:
            with open(_profile_path(path, f"gw{n}")) as f:
                part = json.load(f)
        except OSError:
            continue
        for name, entry in part.items():
            merged[name].update(entry)
    with open(path, "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)
    return merged


def pytest_terminal_summary(terminalreporter, config):
    path = os.environ.get(PROFILE_ENV)
    profile = _merged_profile(path, config) if path else {}
    if not profile:
        return
    rows = sorted(
        profile.items(),
        key=lambda kv: -(kv[1]["self_cpu"] + kv[1]["child_cpu"]),
    )
    write = terminalreporter.write_line
    terminalreporter.section("CPU seconds per test file (costliest 25)")
    write(f"{'cpu':>8} {'wall':>8} {'tests':>5}  file")
    for name, e in rows[:25]:
        cpu = e["self_cpu"] + e["child_cpu"]
        write(f"{cpu:8.1f} {e['wall']:8.1f} {e['tests']:5d}  {name}")
    total = sum(e["self_cpu"] + e["child_cpu"] for e in profile.values())
    wall = sum(e["wall"] for e in profile.values())
    write(f"{total:8.1f} {wall:8.1f} {'':5}  all files")
