"""`keras-hybrid-run` SIGKILLed: every local and remote worker exits within
5 s, and no process of the job is left.

The launcher cannot catch SIGKILL: local workers get SIGKILL from the
kernel when it dies (`launch.lifeline`), remote ones are stopped by
`remote_guard` when their ssh client's standard input closes. Remote hosts
are stood in for by an ssh client that runs the remote command here (as
`test_elastic_driver.py` does), so the guard, its worker and the client
are real processes; one remote worker ignores SIGTERM, so the guard's
SIGKILL must come within the bound too. Each test marks its job's
processes with a variable of its own and looks for any left in `/proc`.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from keras_hybrid.launch.ssh import SSH_COMMAND_ENV
from tests.launch.launch_testing import is_alive

pytestmark = [pytest.mark.timeout(120), pytest.mark.multiprocess]

CLI = [sys.executable, "-m", "keras_hybrid.run"]
MARK = "KERAS_HYBRID_TEST_LAUNCHER_DEATH"
BOUND_SECONDS = 5.0

# Writes its pid, then waits; remote workers (FAKE_HOST set) ignore SIGTERM
# when told to, so that only the guard's SIGKILL stops them.
_WORKER = """
import json, os, signal, sys, time
out, stubborn = sys.argv[1], sys.argv[2] == "stubborn"
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
rank = task.get("index", os.environ.get("KERAS_HYBRID_RANK", "x"))
if stubborn and os.environ.get("FAKE_HOST"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
where = os.environ.get("FAKE_HOST", "local")
with open(os.path.join(out, f"{where}-{rank}-{os.getpid()}.tmp"), "w"):
    pass
os.replace(os.path.join(out, f"{where}-{rank}-{os.getpid()}.tmp"),
           os.path.join(out, f"{where}-{rank}-{os.getpid()}"))
time.sleep(120)
"""
_FAKE_SSH = """#!/bin/sh
while [ "$1" = "-o" ]; do shift 2; done
if [ "$1" = "-G" ]; then echo "hostname 127.0.0.2"; exit 0; fi
FAKE_HOST="$1" exec sh -c "$2"
"""


def _marked(token: str) -> list[int]:
    """Live processes (not zombies) whose environment holds `token`."""
    found = []
    needle = f"{MARK}={token}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(name))
    return found


def _kill_the_launcher(tmp_path, launcher_args, expected_workers):
    fake_ssh = tmp_path / "fake_ssh"
    fake_ssh.write_text(_FAKE_SSH)
    fake_ssh.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    token = uuid.uuid4().hex
    launcher = subprocess.Popen(
        [*CLI, *launcher_args, "--grace_seconds", "30"]
        + [sys.executable, "-c", _WORKER, str(out), "stubborn"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, MARK: token, SSH_COMMAND_ENV: str(fake_ssh)},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len([p for p in out.iterdir() if ".tmp" not in p.name]) < len(
            expected_workers
        ):
            if time.monotonic() > deadline or launcher.poll() is not None:
                pytest.fail(
                    "the workers did not start: "
                    f"{sorted(p.name for p in out.iterdir())}\n"
                    + (launcher.stderr.read() if launcher.poll() else "")
                )
            time.sleep(0.05)
        started = sorted(p.name.rpartition("-")[0] for p in out.iterdir())
        assert started == sorted(expected_workers)
        pids = [int(p.name.rpartition("-")[2]) for p in out.iterdir()]
        assert set(pids) <= set(_marked(token))
        killed = time.monotonic()
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        while _marked(token) and time.monotonic() - killed < 15:
            time.sleep(0.05)
        elapsed = time.monotonic() - killed
        left = _marked(token)
    finally:
        for pid in _marked(token):
            os.kill(pid, signal.SIGKILL)
        launcher.stderr.close()
    assert not left, f"processes left {elapsed:.1f} s after the kill: {left}"
    assert elapsed <= BOUND_SECONDS, f"the last process took {elapsed:.2f} s"
    print(f"every process of the job gone {elapsed:.2f} s after the SIGKILL")
    return elapsed


def test_an_elastic_launchers_workers_exit_with_it(tmp_path):
    hosts = tmp_path / "hosts.sh"
    hosts.write_text("#!/bin/sh\necho localhost:2\necho hostR:2\n")
    hosts.chmod(0o755)
    _kill_the_launcher(
        tmp_path,
        ["--min-np", "2", "--max-np", "4", "--host-discovery-script", hosts],
        ["local-0", "local-1", "hostR-2", "hostR-3"],
    )


@pytest.mark.parametrize(
    "hosts, workers",
    [
        (None, ["local-0", "local-1"]),
        ("hostR:1,hostS:1", ["hostR-0", "hostS-1"]),
    ],
)
def test_a_fixed_launchers_workers_exit_with_it(tmp_path, hosts, workers):
    # A fixed job runs on this machine or on remote hosts, never both.
    flags = ["-np", "2"] if hosts is None else ["--hosts", hosts]
    _kill_the_launcher(tmp_path, flags, workers)


def test_a_local_worker_gets_sigkill_when_its_launcher_ends():
    # The launcher here ends at once, without waiting for its child.
    script = (
        "import subprocess, sys\n"
        "from keras_hybrid.launch.lifeline import exit_with_launcher\n"
        "child = subprocess.Popen(\n"
        "    [sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "    preexec_fn=exit_with_launcher(), start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + BOUND_SECONDS
    while is_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = is_alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive
