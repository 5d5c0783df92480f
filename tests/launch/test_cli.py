"""End-to-end runs of `keras-hybrid-run` with plain-Python workers."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keras_hybrid.launch.topology import free_ports
from tests.launch.launch_testing import is_alive
from tests.launch.launch_testing import lines_by_rank
from tests.launch.launch_testing import start_cli
from tests.launch.launch_testing import wait_for_files

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]

ENV_WORKER = """
    import json, os, sys
    keys = [k for k in os.environ if k.startswith("KERAS_HYBRID_")] + [
        "TF_CONFIG", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
        "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "EXTRA", "CUDA_VISIBLE_DEVICES",
    ]
    print(json.dumps({k: os.environ.get(k) for k in keys}))
    print("to stderr", file=sys.stderr)
    sys.stdout.write("no newline at the end")
"""

# Ranks other than 1 record their pid and their child's pid, then sleep;
# rank 1 waits for those records and then fails as told by argv[2].
FAILING_WORKER = """
    import os, subprocess, sys, time
    from pathlib import Path
    out, mode = Path(sys.argv[1]), sys.argv[2]
    rank = int(os.environ["KERAS_HYBRID_RANK"])
    size = int(os.environ["KERAS_HYBRID_SIZE"])
    if rank == 1:
        deadline = time.time() + 30
        while len(list(out.glob("pids.*"))) < size - 1:
            if time.time() > deadline:
                sys.exit("other ranks never started")
            time.sleep(0.05)
        if mode == "kill":
            os.kill(os.getpid(), 9)
        sys.exit(3)
    child = subprocess.Popen(["sleep", "60"])
    tmp = out / f"tmp.{rank}"
    tmp.write_text(f"{os.getpid()} {child.pid}")
    tmp.rename(out / f"pids.{rank}")
    time.sleep(60)
"""

SIGNAL_WORKER = """
    import os, signal, sys, time
    from pathlib import Path
    rank = os.environ["KERAS_HYBRID_RANK"]
    def handler(signum, frame):
        print("got", signal.Signals(signum).name, flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    Path(sys.argv[1], "ready." + rank).write_text("")
    time.sleep(60)
"""


def _env_records(stdout):
    records = {}
    for rank, bodies in lines_by_rank(stdout).items():
        records[rank] = json.loads(bodies[0])
        assert bodies[1:] == ["no newline at the end"]
    return records


def test_env_contract_with_np(write_script, run_cli):
    script = write_script("env_worker.py", ENV_WORKER)
    result = run_cli(
        "-np", 3, "--threads", 2, "--env", "EXTRA=x y", sys.executable, script
    )
    assert result.returncode == 0, result.stderr
    records = _env_records(result.stdout)
    assert sorted(records) == [0, 1, 2]
    cluster = json.loads(records[0]["TF_CONFIG"])["cluster"]["worker"]
    assert len(cluster) == 3
    assert all(address.startswith("127.0.0.1:") for address in cluster)
    assert len({address.split(":")[1] for address in cluster}) == 3
    for rank, env in records.items():
        assert json.loads(env["TF_CONFIG"]) == {
            "cluster": {"worker": cluster},
            "task": {"type": "worker", "index": rank},
        }
        assert env["KERAS_HYBRID_RANK"] == env["KERAS_HYBRID_LOCAL_RANK"]
        assert env["KERAS_HYBRID_RANK"] == str(rank)
        assert env["KERAS_HYBRID_SIZE"] == env["KERAS_HYBRID_LOCAL_SIZE"] == "3"
        for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            assert env[name] == "2"
        assert env["OMP_NUM_THREADS"] == env["KERAS_HYBRID_THREADS"] == "2"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["EXTRA"] == "x y"
    assert sorted(result.stderr.splitlines()) == [
        "[0] to stderr",
        "[1] to stderr",
        "[2] to stderr",
    ]


def test_single_process_gets_one_worker_cluster(write_script, run_cli):
    script = write_script("env_worker.py", ENV_WORKER)
    result = run_cli("-np", 1, sys.executable, script)
    assert result.returncode == 0, result.stderr
    env = _env_records(result.stdout)[0]
    assert len(json.loads(env["TF_CONFIG"])["cluster"]["worker"]) == 1
    assert env["KERAS_HYBRID_SIZE"] == "1"


def test_localhost_hosts_run_locally(write_script, run_cli):
    script = write_script("env_worker.py", ENV_WORKER)
    port = free_ports(1)[0]
    result = run_cli(
        "--hosts", "localhost:2", "--port", port, sys.executable, script
    )
    assert result.returncode == 0, result.stderr
    records = _env_records(result.stdout)
    expected = [f"localhost:{port}", f"localhost:{port + 1}"]
    for rank in (0, 1):
        tf_config = json.loads(records[rank]["TF_CONFIG"])
        assert tf_config["cluster"]["worker"] == expected
        assert records[rank]["KERAS_HYBRID_LOCAL_RANK"] == str(rank)
        assert records[rank]["KERAS_HYBRID_LOCAL_SIZE"] == "2"


@pytest.mark.parametrize(
    "mode, exit_code, description",
    [
        ("exit", 3, "code 3"),
        ("kill", 137, r"code -9 \(killed by SIGKILL\)"),
    ],
)
def test_failed_rank_stops_the_others(
    write_script, run_cli, tmp_path, mode, exit_code, description
):
    script = write_script("failing_worker.py", FAILING_WORKER)
    start = time.monotonic()
    result = run_cli("-np", 3, sys.executable, script, tmp_path, mode)
    assert time.monotonic() - start < 15
    assert result.returncode == exit_code, result.stderr
    message = (
        f"keras-hybrid-run: worker rank 1 exited with {description}; "
        "stopping the other 2 workers."
    )
    assert any(
        re.fullmatch(message, line) for line in result.stderr.splitlines()
    ), result.stderr
    pids = [
        int(pid)
        for rank in (0, 2)
        for pid in (tmp_path / f"pids.{rank}").read_text().split()
    ]
    # Worker children die too, because each worker has its own group.
    deadline = time.monotonic() + 5
    while any(map(is_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if is_alive(pid)]


def test_worker_ignoring_sigterm_is_killed_after_grace(write_script, run_cli):
    script = write_script(
        "stubborn.py",
        """
        import os, signal, sys, time
        if os.environ["KERAS_HYBRID_RANK"] == "1":
            time.sleep(0.5)
            sys.exit(5)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
        """,
    )
    start = time.monotonic()
    result = run_cli("-np", 2, "--grace_seconds", 1, sys.executable, script)
    assert time.monotonic() - start < 15
    assert result.returncode == 5
    assert "worker rank 1 exited with code 5" in result.stderr
    assert "1 worker(s) still running after 1s; sending SIGKILL" in (
        result.stderr
    )


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"]
)
def test_launcher_forwards_signal(write_script, tmp_path, signum):
    script = write_script("signal_worker.py", SIGNAL_WORKER)
    proc = start_cli("-np", 2, sys.executable, script, tmp_path)
    try:
        wait_for_files([tmp_path / "ready.0", tmp_path / "ready.1"])
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signum
    name = signal.Signals(signum).name
    assert lines_by_rank(stdout) == {0: [f"got {name}"], 1: [f"got {name}"]}
    assert f"received {name}; forwarding it to 2 running" in stderr


def test_timeout_stops_job_with_124(write_script, run_cli):
    script = write_script("sleeper.py", "import time\ntime.sleep(60)\n")
    start = time.monotonic()
    result = run_cli("-np", 2, "--timeout", 2, sys.executable, script)
    assert 2 <= time.monotonic() - start < 15
    assert result.returncode == 124
    assert "job exceeded --timeout 2s; stopping the 2 workers." in (
        result.stderr
    )


def test_missing_program_exits_127(run_cli):
    result = run_cli("-np", 2, "no-such-program-keras-hybrid")
    assert result.returncode == 127
    assert "cannot start worker rank 0" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["-np", "0", "python"], r"`-np` must be >= 1\. Received: -np 0\."),
        (["-np", "-2", "python"], r"Received: -np -2\."),
        (["-np", "2"], r"A command to run is required\."),
        (["python", "x.py"], r"One of `-np`, `--hosts` or `--slurm`"),
        (["--hosts", "h1:", "python"], r"entry 'h1:' is malformed"),
        (["--hosts", "h1:x", "python"], r"slots in 'h1:x' are not an int"),
        (["--hosts", ":2", "python"], r"entry ':2' is malformed"),
        (["--hosts", "h1:0", "python"], r"slots in 'h1:0' are < 1"),
        (["--hosts", "", "python"], r"the list is empty"),
        (
            ["-np", "3", "--hosts", "localhost:2", "python"],
            r"Received: -np 3 with 2 slots\.",
        ),
        (["-np", "1", "--threads", "0", "python"], r"--threads 0\."),
        (["-np", "1", "--env", "X", "python"], r"--env 'X'\."),
        (["-np", "1", "--timeout", "-1", "python"], r"--timeout -1\."),
        (["--slurm", "-np", "2", "python"], r"cannot be combined with -np"),
        (["-np", "x", "python"], r"argument -np: invalid int value: 'x'"),
    ],
)
def test_bad_input_is_a_usage_error(run_cli, args, message):
    result = run_cli(*args, timeout=30)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: keras-hybrid-run")
    error_line = result.stderr.splitlines()[-1]
    assert error_line.startswith("keras-hybrid-run: error: ")
    assert re.search(message, error_line), error_line


def test_console_script_is_installed(write_script):
    script = write_script("ok.py", "print('hello')\n")
    console = Path(sys.executable).with_name("keras-hybrid-run")
    result = subprocess.run(
        [console, "-np", "2", sys.executable, script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] hello", "[1] hello"]


def test_importing_the_launcher_does_not_import_tensorflow():
    code = (
        "import sys, keras_hybrid.launch, keras_hybrid.run; "
        "import keras_hybrid.run; "
        "sys.exit('tensorflow' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert result.returncode == 0
