"""`model.save`, `save_weights` and `export` under `HybridStrategy` on 2
workers write one full single-device model that plain Keras loads."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from keras_hybrid.testing.pool import run_scenario

HERE = os.path.dirname(__file__)
SCENARIOS = os.path.join(HERE, "workers", "checkpoint_scenarios.py")
PLAIN = os.path.join(HERE, "plain_keras_check.py")

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def exported():
    out_dir = tempfile.mkdtemp(prefix="ckpt_export_")
    target = os.path.join(out_dir, "files")
    os.makedirs(target)
    run = run_scenario(
        SCENARIOS, "run", 2, {"phase": "export", "folder": target}
    ).check()
    plain = subprocess.run(
        [sys.executable, PLAIN, target],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert plain.returncode == 0, plain.stderr[-4000:]
    loaded = json.loads(plain.stdout.strip().splitlines()[-1])
    return run.results, loaded


def test_plain_keras_predicts_what_the_workers_predicted(exported):
    results, loaded = exported
    assert not loaded["keras_hybrid_imported"]
    want = results[0]["predictions"]
    np.testing.assert_allclose(results[1]["predictions"], want, atol=1e-6)
    for fmt in ("keras", "weights_h5", "saved_model"):
        np.testing.assert_allclose(
            np.asarray(loaded[fmt]), want, atol=1e-5, err_msg=fmt
        )


def test_keras_file_keeps_optimizer_state(exported):
    _, loaded = exported
    assert loaded["optimizer_iterations"] == 5  # --steps default


def test_only_the_target_files_are_written(exported):
    results, _ = exported
    want = ["model.keras", "model.weights.h5", "saved_model"]
    assert results[0]["listing"] == want
    assert results[1]["listing"] == want
