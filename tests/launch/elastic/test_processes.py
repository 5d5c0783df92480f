"""An elastic job's worker processes, local and through the ssh client."""

import signal
import sys

from keras_hybrid.launch.elastic.processes import ElasticProcess
from keras_hybrid.launch.elastic.processes import ElasticProcesses
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV


def test_a_remote_worker_whose_ssh_fails_is_named_with_its_host(
    monkeypatch,
):
    # A client that fails as ssh does when it cannot reach the host.
    monkeypatch.setenv(SSH_COMMAND_ENV, "sh -c 'exit 255'")
    proc = ElasticProcess(3, "hostB", ["true"], {}, grace_seconds=1)
    assert proc.proc.wait(10) == 255
    assert proc.where() == "task 3 on host hostB"
    assert "could not reach host hostB" in proc.hint()


def test_a_local_worker_gets_the_contract_and_signals():
    code = (
        "import os, sys, time; "
        "sys.exit(int(os.environ['KERAS_HYBRID_TEST_CODE']))"
    )
    proc = ElasticProcess(
        0,
        "localhost",
        [sys.executable, "-c", code],
        {"KERAS_HYBRID_TEST_CODE": "7"},
        grace_seconds=1,
    )
    assert proc.proc.wait(30) == 7
    assert proc.where() == "task 0"
    assert proc.hint() == ""


def test_stop_all_stops_every_worker():
    workers = ElasticProcesses(
        [sys.executable, "-c", "import time; time.sleep(60)"], 5.0
    )
    for task in (0, 1):
        workers.start(task, "localhost", {})
    workers.stop_all(signal.SIGTERM)
    assert [p.poll() for p in workers.procs.values()] == [
        -signal.SIGTERM,
        -signal.SIGTERM,
    ]
