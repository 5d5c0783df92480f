"""`keras-hybrid-run --hosts` over real ssh, across emulated hosts.

Two network namespaces act as hosts `hostA` and `hostB`, each running its
own sshd (`keras_hybrid.emulation.hosts`). The launcher runs in the
root namespace and reaches them only through ssh:

- four workers (hostA:2, hostB:2) train a partitioned embedding table, so
  pulls and pushes cross hosts, and end with the weights of plain Keras in
  one process, within 1e-5;
- a host whose link goes down is reported with its name and ranks, and no
  worker is left behind on either host;
- SIGINT to the launcher reaches the remote workers as SIGINT.

Needs root and OpenSSH's server: the module installs Debian's
`openssh-server` when it is missing and apt is there, else it skips and
says why.
"""

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_hybrid.emulation import hosts as emulated_hosts
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV
from tests.launch.launch_testing import lines_by_rank

HERE = os.path.dirname(os.path.abspath(__file__))
SPARSE_WORKERS = os.path.join(os.path.dirname(HERE), "sparse", "workers")
EQUIVALENCE_WORKER = os.path.join(SPARSE_WORKERS, "equivalence_worker.py")
HOSTS = "hostA:2,hostB:2"
ATOL = 1e-5

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.netns,
    pytest.mark.timeout(240),
]


@pytest.fixture(scope="module")
def hosts():
    problem = emulated_hosts.install_problem()
    if problem:
        pytest.skip(f"multi-host over ssh not tested: {problem}")
    with emulated_hosts.EmulatedHosts(["hostA", "hostB"]) as emulated:
        yield emulated
    # Teardown ran: nothing of the hosts is left.
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True
    ).stdout
    assert not any(ns in listed for ns in emulated.namespaces.values())


def launcher_argv(*command, grace_seconds=3):
    return [
        sys.executable,
        "-m",
        "keras_hybrid.run",
        "--hosts",
        HOSTS,
        "--threads",
        "1",
        "--grace_seconds",
        str(grace_seconds),
        "--env",
        "TF_CPP_MIN_LOG_LEVEL=2",
        *command,
    ]


def launcher_env(hosts):
    return {**os.environ, SSH_COMMAND_ENV: hosts.ssh_command}


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def plain_keras_final(initial):
    """One process, global batch, the workers' initial weights, SGD."""
    sys.path.insert(0, SPARSE_WORKERS)
    try:
        import sparse_cases as cases
    finally:
        sys.path.remove(SPARSE_WORKERS)
    import keras

    keras.backend.clear_session()
    model = cases.build_model("one_table")
    model.set_weights(initial)
    model.compile(optimizer=cases.make_optimizer("sgd"), loss=cases.make_loss())
    x, y = cases.make_data()
    model.fit(x, y, batch_size=cases.BATCH, epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def test_training_across_hosts_equals_one_process(hosts, tmp_path):
    configs = json.dumps([["one_table", "sgd", 0]])
    run = subprocess.run(
        launcher_argv(
            sys.executable,
            EQUIVALENCE_WORKER,
            f"--out_dir={tmp_path}",
            f"--configs={configs}",
        ),
        env=launcher_env(hosts),
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    results = {}
    for rank in range(4):
        with open(tmp_path / f"rank{rank}.pkl", "rb") as f:
            results[rank] = pickle.load(f)
    key = "one_table/sgd"
    assert all(r["size"] == 4 for r in results.values())
    # The table is partitioned: its rows moved between the hosts.
    assert results[0][key]["kinds"]["table/embeddings"] == "sparse"
    want = plain_keras_final(results[0][key]["initial"])
    assert (
        max(
            float(np.abs(w - i).max())
            for w, i in zip(want, results[0][key]["initial"], strict=True)
        )
        > 1e-2
    ), "no training"
    for rank, result in results.items():
        for got, ref in zip(result[key]["final"], want, strict=True):
            np.testing.assert_allclose(
                got, ref, atol=ATOL, rtol=0, err_msg=f"rank {rank}"
            )


SLEEPER = """
import os, signal, sys, time
out = sys.argv[1]
rank = os.environ["KERAS_HYBRID_RANK"]
def on_signal(signum, frame):
    with open(os.path.join(out, f"signal{rank}"), "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(3)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
open(os.path.join(out, f"ready{rank}"), "w").close()
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def sleeper(tmp_path):
    path = tmp_path / "sleeper.py"
    path.write_text(SLEEPER)
    out = tmp_path / "out"
    out.mkdir()
    return path, out


def start_sleepers(hosts, sleeper):
    path, out = sleeper
    proc = subprocess.Popen(
        launcher_argv(sys.executable, str(path), str(out)),
        env=launcher_env(hosts),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ready = [out / f"ready{rank}" for rank in range(4)]
    try:
        wait_until(lambda: all(p.exists() for p in ready), 60, "4 workers")
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc


def test_lost_host_is_reported_with_host_and_ranks(hosts, sleeper):
    proc = start_sleepers(hosts, sleeper)
    hosts.set_link("hostB", up=False)
    try:
        _, stderr = proc.communicate(timeout=60)
        # hostB's sshd notices the silent client too and ends the
        # sessions, so its workers do not outlive the job.
        wait_until(
            lambda: not hosts.worker_pids("hostB"), 30, "hostB's workers"
        )
    finally:
        hosts.set_link("hostB", up=True)
    assert proc.returncode == 255, stderr
    assert "on host hostB exited with code 255" in stderr, stderr
    assert "host hostB runs ranks 2, 3" in stderr, stderr
    assert "on host hostA exited" not in stderr, stderr
    wait_until(lambda: not hosts.worker_pids("hostA"), 30, "hostA's workers")
    # hostA's workers were stopped through their guards, politely.
    _, out = sleeper
    assert (out / "signal0").read_text() == "SIGTERM"
    assert (out / "signal1").read_text() == "SIGTERM"


def test_sigint_reaches_remote_workers(hosts, sleeper):
    proc = start_sleepers(hosts, sleeper)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, stderr
    _, out = sleeper
    for rank in range(4):
        assert (out / f"signal{rank}").read_text() == "SIGINT", rank
    # Output kept its rank prefixes across ssh.
    assert lines_by_rank(stdout) == {r: ["ready"] for r in range(4)}
    wait_until(
        lambda: (
            not hosts.worker_pids("hostA") and not hosts.worker_pids("hostB")
        ),
        30,
        "no worker left on either host",
    )
