"""Version-matrix smoke test: 2 workers fit a model with a partitioned
table, save it to `.keras`, and plain Keras reloads it and predicts the
same. Runs in every environment (`make test`, `make test-horovod`,
`make test-matrix`)."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from keras_hybrid.testing.pool import run_scenario

HERE = os.path.dirname(__file__)
WORKERS = os.path.join(HERE, "workers")
SCENARIOS = os.path.join(WORKERS, "smoke_scenarios.py")
PLAIN = os.path.join(HERE, "plain_keras_load.py")

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def smoke():
    sys.path.insert(0, WORKERS)
    try:
        import smoke_data
    finally:
        sys.path.remove(WORKERS)
    out_dir = tempfile.mkdtemp(prefix="compat_smoke_")
    model_path = os.path.join(out_dir, "model.keras")
    run = run_scenario(
        SCENARIOS,
        "fit_predict_save",
        2,
        {"model_path": model_path},
        timeout=240,
    ).check()
    probe_path = os.path.join(out_dir, "probe.npy")
    np.save(probe_path, smoke_data.make_data(smoke_data.BATCH, seed=2)[0])
    plain = subprocess.run(
        [sys.executable, PLAIN, model_path, probe_path],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert plain.returncode == 0, plain.stderr[-4000:]
    loaded = json.loads(plain.stdout.strip().splitlines()[-1])
    return run.results, loaded, smoke_data


def test_table_is_partitioned_over_the_workers(smoke):
    results, _, worker = smoke
    for rank in (0, 1):
        assert results[rank]["table_type"] == "ShardedTable"
    rows = [results[rank]["local_table_rows"] for rank in (0, 1)]
    assert sum(rows) == worker.ROWS
    assert max(rows) < worker.ROWS


def test_training_reduces_the_loss_alike_on_both_ranks(smoke):
    results, _, _ = smoke
    losses = results[0]["losses"]
    np.testing.assert_allclose(results[1]["losses"], losses, rtol=1e-6)
    assert losses[-1] < losses[0]


def test_plain_keras_predicts_what_the_workers_predicted(smoke):
    results, loaded, worker = smoke
    assert not loaded["keras_hybrid_imported"]
    assert loaded["table_shape"] == [worker.ROWS, 4]
    want = results[0]["predictions"]
    np.testing.assert_allclose(results[1]["predictions"], want, atol=1e-6)
    np.testing.assert_allclose(loaded["predictions"], want, atol=1e-5)
    # 4 steps per epoch, 2 epochs.
    assert loaded["optimizer_iterations"] == 8
