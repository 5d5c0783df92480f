"""What an elastic job refuses, with the reason, before any training: a
worker process started as the elastic launcher starts it (its variables,
a cluster of `--max-np` tasks), in a subprocess since it starts a TF
server."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from keras_hybrid.contract import elastic_board as em
from keras_hybrid.launch.topology import free_ports

_WORKER = """
import keras_hybrid as kh
try:
    kh.HybridStrategy(hot_rows=4)
except NotImplementedError as error:
    print("refused:", error)
else:
    print("accepted")
"""


@pytest.mark.timeout(120)
def test_hot_rows_are_refused_in_an_elastic_job():
    ports = free_ports(2)
    cluster = [f"127.0.0.1:{p}" for p in ports]
    with tempfile.TemporaryDirectory() as directory:
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_CONFIG": json.dumps(
                {
                    "cluster": {"worker": cluster},
                    "task": {"type": "worker", "index": 0},
                }
            ),
            em.DIR_ENV: directory,
            em.MIN_NP_ENV: "2",
            em.MAX_NP_ENV: "2",
            em.MEMBERS_ENV: "0,1",
        }
        proc = subprocess.run(
            [sys.executable, "-c", _WORKER],
            capture_output=True,
            text=True,
            timeout=100,
            env=env,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: Hot rows are not supported in elastic jobs" in (
        proc.stdout
    ), proc.stdout + proc.stderr[-3000:]
    assert "Received: hot_rows=4 in an elastic job" in proc.stdout
