"""Horovod engine failures that must be errors, quickly, not hangs."""

import os
import re
import tempfile

import pytest

from keras_hybrid.testing import run_workers

pytestmark = pytest.mark.multiprocess
WAITED = re.compile(r"all-reduce ended after ([0-9.]+) s")

HERE = os.path.join(os.path.dirname(__file__), "workers")
DIVERGE = os.path.join(
    os.path.dirname(HERE), "..", "strategy", "workers", "diverge_worker.py"
)


def test_horovod_rank_that_exits_ends_its_peers_collectives():
    run = run_workers(
        os.path.join(HERE, "early_exit_worker.py"),
        2,
        tempfile.mkdtemp(prefix="early_exit_"),
        args=("--delay=3",),
        timeout=100,
        engine="horovod",
    )
    assert run.returncode != 0
    # Rank 0's all-reduce fails once rank 1 is gone (3 s after both
    # started), well before the launch's timeout of 100 s.
    rank0 = [
        line for line in run.stderr.splitlines() if line.startswith("[0] ")
    ]
    assert any("Horovod has been shut down" in line for line in rank0), (
        run.stderr[-3000:]
    )
    waits = [
        float(m.group(1)) for m in map(WAITED.search, rank0) if m is not None
    ]
    assert len(waits) == 1, run.stderr[-3000:]
    assert waits[0] < 30, f"the all-reduce waited {waits[0]:.0f} s"


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
