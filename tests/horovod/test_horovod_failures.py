"""Horovod engine failures that must be errors, quickly, not hangs."""

import os
import tempfile
import time

import pytest

from keras_hybrid.testing import run_workers

pytestmark = pytest.mark.multiprocess

HERE = os.path.join(os.path.dirname(__file__), "workers")
DIVERGE = os.path.join(
    os.path.dirname(HERE), "..", "strategy", "workers", "diverge_worker.py"
)


def test_horovod_rank_that_exits_ends_its_peers_collectives():
    start = time.monotonic()
    run = run_workers(
        os.path.join(HERE, "early_exit_worker.py"),
        2,
        tempfile.mkdtemp(prefix="early_exit_"),
        args=("--delay=3",),
        timeout=100,
        engine="horovod",
    )
    elapsed = time.monotonic() - start
    assert run.returncode != 0
    # Rank 0's all-reduce fails once rank 1 is gone.
    rank0 = [
        line for line in run.stderr.splitlines() if line.startswith("[0] ")
    ]
    assert any("Horovod has been shut down" in line for line in rank0), (
        run.stderr[-3000:]
    )
    assert elapsed < 60, f"took {elapsed:.0f}s"


def test_horovod_engine_under_keras_hybrid_run_is_refused():
    # keras-hybrid-run starts TF-engine workers (TF_CONFIG, no Horovod
    # rendezvous): each would be a Horovod job of one process.
    run = run_workers(
        os.path.normpath(DIVERGE),
        2,
        tempfile.mkdtemp(prefix="hvd_misuse_"),
        timeout=100,
        env={"KERAS_HYBRID_ENGINE": "horovod"},
        engine="tf",
    )
    assert run.returncode != 0
    assert "Start Horovod jobs with `horovodrun" in run.stderr, run.stderr
