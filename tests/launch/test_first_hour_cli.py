"""What a new user of `keras-hybrid-run` meets first, through the real
launcher with plain-Python workers: the console and per-rank log files,
the root cause of a failure, ports, Ctrl-C, the interpreter and flags."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.launch.launch_testing import is_alive
from tests.launch.launch_testing import wait_for_files

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]


def cli(*args, env=None, timeout=60, cwd=None):
    """Runs the launcher with the console's defaults (not the suite's
    `KERAS_HYBRID_CONSOLE_RANKS=all`)."""
    environ = dict(os.environ)
    environ.pop("KERAS_HYBRID_CONSOLE_RANKS", None)
    environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "keras_hybrid.run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=cwd,
    )


CHATTY = """
    import os, sys
    rank = os.environ["KERAS_HYBRID_RANK"]
    print("out of rank", rank)
    err = sys.stderr
    print(f"I1127 10:00:00.000001 1 lib.py:1] info of rank {rank}", file=err)
    print("  second line of that info", file=err)
    print(f"W1127 10:00:00.000002 1 lib.py:2] warning of rank {rank}", file=err)
    cpp = "I0000 00:00:1795769814.454924   21760 port.cc:153]"
    print(f"{cpp} oneDNN banner", file=err)
    # A progress bar redrawn in place, as Keras draws it on a terminal.
    bar = "\\x1b[32m━\\x1b[0m"
    sys.stdout.write(f"1/2 {bar} eta\\b\\b\\b\\r2/2 {bar}{bar} done\\n")
"""


def test_console_shows_rank_0_and_every_ranks_warnings(write_script, tmp_path):
    script = write_script("chatty.py", CHATTY)
    logs = tmp_path / "logs"
    result = cli("-np", 3, "--output-filename", logs, sys.executable, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[0] out of rank 0",
        "[0] 2/2 ━━ done",
    ]
    err = result.stderr.splitlines()
    assert "[0] I1127 10:00:00.000001 1 lib.py:1] info of rank 0" in err
    assert "[0]   second line of that info" in err
    for rank in (0, 1, 2):
        assert (
            f"[{rank}] W1127 10:00:00.000002 1 lib.py:2] warning of rank {rank}"
            in err
        )
    assert not [line for line in err if "info of rank 1" in line]
    assert not [line for line in err if line.startswith("[1]   second")]
    assert not [line for line in err if "oneDNN" in line]
    # Each rank's whole output, TensorFlow's banner and the bar's last
    # state included, in its own file.
    assert sorted(os.listdir(logs)) == [
        "rank.0.log",
        "rank.1.log",
        "rank.2.log",
    ]
    text = (logs / "rank.1.log").read_text()
    for want in ("out of rank 1", "info of rank 1", "second line", "oneDNN"):
        assert want in text
    assert "2/2 ━━ done\n" in text
    assert "\x1b" not in text and "\r" not in text and "\b" not in text


def test_console_ranks_all_and_log_dir_alias(write_script, tmp_path):
    script = write_script("chatty.py", CHATTY)
    result = cli(
        "-np",
        2,
        "--console-ranks",
        "all",
        "--log-dir",
        tmp_path,
        sys.executable,
        script,
    )
    assert result.returncode == 0, result.stderr
    assert "[1] out of rank 1" in result.stdout
    assert (tmp_path / "rank.1.log").exists()


FAILING = """
    import os, signal, sys, time
    rank = int(os.environ["KERAS_HYBRID_RANK"])
    def step():
        raise RuntimeError(f"boom on rank {rank}")
    def aborted(signum, frame):
        # What the others print when their collectives abort.
        raise RuntimeError(
            "model.save is a collective, but not every worker called it: "
            f"rank {rank} called it, rank 1 is unknown: this worker's "
            "collectives were aborted by an earlier failure (restart the job)")
    if rank == 1:
        time.sleep(1)
        step()
    signal.signal(signal.SIGTERM, aborted)
    time.sleep(30)
"""


def test_last_lines_quote_the_root_cause(write_script):
    script = write_script("failing.py", FAILING)
    result = cli("-np", 3, "--grace-seconds", 5, sys.executable, script)
    assert result.returncode == 1
    last = result.stderr.splitlines()[-5:]
    assert last[1] == (
        "keras-hybrid-run: the failure started on rank 1: RuntimeError: "
        "boom on rank 1"
    ), "\n".join(last)
    assert re.fullmatch(
        r"keras-hybrid-run:   at .*failing\.py:5 in step: "
        r'raise RuntimeError\(f"boom on rank \{rank\}"\)',
        last[2],
    ), last[2]
    consequences = sorted(last[3:])
    for rank, line in zip((0, 2), consequences, strict=True):
        assert line.startswith(
            f"keras-hybrid-run: rank {rank} failed as a consequence of rank "
            "1's failure: RuntimeError: model.save is a collective"
        ), line


def test_port_in_use_is_found_before_any_worker_starts(write_script, tmp_path):
    script = write_script("touch.py", "open(__import__('sys').argv[1], 'w')\n")
    with _busy_after_a_free_port() as busy:
        port = busy.getsockname()[1]
        start = time.monotonic()
        result = cli(
            "-np",
            2,
            "--port",
            port - 1,
            sys.executable,
            script,
            tmp_path / "ran",
        )
        elapsed = time.monotonic() - start
    assert result.returncode == 2
    assert elapsed < 1.0, elapsed
    last = result.stderr.splitlines()[-1]
    assert f"Port {port} (rank 1 on 127.0.0.1) is in use" in last, last
    assert "`--port`" in last
    assert not (tmp_path / "ran").exists()


def _busy_after_a_free_port() -> socket.socket:
    """A listening socket on a port P whose port P - 1 was free just now
    (any process may hold the port below a free one)."""
    for _ in range(50):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        try:
            with socket.socket() as below:
                below.bind(("127.0.0.1", busy.getsockname()[1] - 1))
        except OSError:
            busy.close()
            continue
        return busy
    pytest.fail("no free port below a free port in 50 tries")


def test_port_works_with_np(write_script):
    script = write_script(
        "addr.py",
        "import json, os\n"
        "print(json.loads(os.environ['TF_CONFIG'])['cluster']['worker'])\n",
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = cli("-np", 2, "--port", port, sys.executable, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"[0] ['127.0.0.1:{port}', '127.0.0.1:{port + 1}']"
    )


def test_ctrl_c_stops_every_worker_within_2_seconds(write_script, tmp_path):
    # Workers that ignore SIGINT, as one blocked in a TensorFlow op does.
    script = write_script(
        "stuck.py",
        """
        import os, signal, sys, time
        from pathlib import Path
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        rank = os.environ["KERAS_HYBRID_RANK"]
        Path(sys.argv[1], rank).write_text(str(os.getpid()))
        time.sleep(60)
        """,
    )
    environ = {
        k: v for k, v in os.environ.items() if k != "KERAS_HYBRID_CONSOLE_RANKS"
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_hybrid.run",
            "-np",
            "2",
            sys.executable,
            str(script),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    try:
        wait_for_files([tmp_path / "0", tmp_path / "1"])
        pids = [int((tmp_path / r).read_text()) for r in ("0", "1")]
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        elapsed = time.monotonic() - start
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 130
    assert elapsed < 2.0, elapsed
    assert not [pid for pid in pids if is_alive(pid)]


@pytest.mark.parametrize(
    "executable", [False, True], ids=["missing", "not_executable"]
)
def test_discovery_script_that_cannot_run_fails_at_once(tmp_path, executable):
    script = tmp_path / "discover.sh"
    if executable:
        script.write_text("#!/bin/sh\necho localhost:2\n")
    start = time.monotonic()
    result = cli(
        "--host-discovery-script",
        script,
        "--min-np",
        2,
        "--elastic-timeout",
        60,
        "python",
        "-c",
        "1",
    )
    assert time.monotonic() - start < 5
    assert result.returncode == 2
    problem = "is not executable" if executable else "does not exist"
    assert (
        f"`--host-discovery-script` {problem}" in result.stderr.splitlines()[-1]
    )


def test_a_py_script_runs_under_the_launchers_python(write_script, tmp_path):
    script = write_script(
        "where.py",
        "import os, shutil, sys\n"
        "print(sys.executable, os.environ['PATH'].split(os.pathsep)[0],"
        " os.environ['TF_CPP_MIN_LOG_LEVEL'])\n",
    )
    # From another directory, with a PATH whose python is not this one.
    result = cli(
        "-np",
        2,
        script.name,
        env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path.parent / script.parent.name,
    )
    assert result.returncode == 0, result.stderr
    bin_dir = os.path.dirname(sys.executable)
    assert result.stdout.split() == ["[0]", sys.executable, bin_dir, "1"]
    result = cli(
        "-np", 1, sys.executable, script, env={"TF_CPP_MIN_LOG_LEVEL": "0"}
    )
    assert result.stdout.split()[-1] == "0"


@pytest.mark.parametrize(
    "flags",
    [
        ["--grace-seconds", "3"],
        ["--grace_seconds", "3"],
        ["-H", "localhost:2"],
        ["--hosts", "localhost:2"],
    ],
)
def test_flag_spellings(write_script, flags):
    script = write_script("ok.py", "print('ok')\n")
    np_flags = [] if flags[0] in ("-H", "--hosts") else ["-np", "2"]
    result = cli(*np_flags, *flags, sys.executable, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0] ok\n"


def test_hostfile(write_script, tmp_path):
    script = write_script(
        "ok.py", "import os; print(os.environ['KERAS_HYBRID_SIZE'])\n"
    )
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nlocalhost slots=3\n")
    result = cli("--hostfile", hostfile, sys.executable, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0] 3\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["-n", "2", "python"], r"unrecognized arguments: -n"),
        (["-np", "2", "--grace", "1", "python"], r"unrecognized arguments"),
        (["-np", "2", "--threads", "0", "python"], r"--threads 0\."),
    ],
)
def test_usage_errors_end_with_the_message(args, message):
    result = cli(*args)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("usage: keras-hybrid-run [-np N | -H HOSTS")
    assert len(lines) <= 3, result.stderr
    assert lines[-1].startswith("keras-hybrid-run: error: ")
    assert re.search(message, lines[-1]), lines[-1]
