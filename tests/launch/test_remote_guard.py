"""`remote_guard` on this machine: what ssh would run on a remote host."""

import os
import signal
import subprocess
import sys

import pytest

from tests.launch.launch_testing import is_alive
from tests.launch.launch_testing import wait_for_files

pytestmark = pytest.mark.timeout(60)

WORKER = """
import os, signal, sys, time
out = sys.argv[1]
def on_signal(signum, frame):
    with open(os.path.join(out, "signal"), "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(7)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
with open(os.path.join(out, "pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"""
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.path.join(sys.argv[1], "pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"""


def start_guard(tmp_path, source, grace="5"):
    script = tmp_path / "worker.py"
    script.write_text(source)
    proc = subprocess.Popen(
        [sys.executable, "-m", "keras_hybrid.launch.remote_guard"]
        + ["--grace_seconds", grace, "--", sys.executable, str(script)]
        + [str(tmp_path)],
        stdin=subprocess.PIPE,
    )
    wait_for_files([tmp_path / "pid"])
    return proc, int((tmp_path / "pid").read_text())


def test_forwards_the_signal_written_to_stdin(tmp_path):
    proc, _ = start_guard(tmp_path, WORKER)
    proc.stdin.write(f"{int(signal.SIGINT)}\n".encode())
    proc.stdin.flush()
    assert proc.wait(30) == 7  # the worker's own exit code
    assert (tmp_path / "signal").read_text() == "SIGINT"
    proc.stdin.close()


def test_end_of_stdin_stops_the_worker(tmp_path):
    proc, _ = start_guard(tmp_path, WORKER)
    proc.stdin.close()  # the launcher or the connection went away
    assert proc.wait(30) == 7
    assert (tmp_path / "signal").read_text() == "SIGTERM"


def test_worker_ignoring_sigterm_is_killed_after_grace(tmp_path):
    proc, pid = start_guard(tmp_path, STUBBORN, grace="0.5")
    proc.stdin.close()
    assert proc.wait(30) == 128 + signal.SIGKILL
    assert not is_alive(pid)


def test_exit_code_passes_through(tmp_path):
    # stdin stays open, as the launcher keeps it while the job runs.
    proc = subprocess.Popen(
        [sys.executable, "-m", "keras_hybrid.launch.remote_guard", "--"]
        + [sys.executable, "-c", "import sys; print('out'); sys.exit(3)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.wait(30) == 3
    assert proc.stdout.read() == "out\n"
    proc.stdin.close()
    proc.stdout.close()


def test_missing_program_is_127_with_host(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "keras_hybrid.launch.remote_guard", "--"]
        + ["no-such-program-keras-hybrid"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 127
    assert f"on {os.uname().nodename}" in done.stderr
