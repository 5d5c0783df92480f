"""`HybridStrategy.close()` on real workers: Keras is stock again."""

import os
import sys
import tempfile

import numpy as np
import pytest

from keras_hybrid.testing import run_workers

HERE = os.path.join(os.path.dirname(__file__), "workers")
sys.path.insert(0, HERE)
from stock_keras import keras_objects  # noqa: E402

pytestmark = pytest.mark.multiprocess


def test_close_restores_stock_keras_and_a_new_strategy_patches_again():
    run = run_workers(
        os.path.join(HERE, "close_worker.py"),
        2,
        tempfile.mkdtemp(prefix="close_"),
        timeout=180,
    ).check()
    every_patch = sorted(keras_objects())
    for result in run.results.values():
        for attempt in ("first", "second"):
            assert result[f"patched_unused_{attempt}"] == []
            assert result[f"patched_in_{attempt}"] == every_patch
            assert result[f"watchdog_in_{attempt}"]
            assert result[f"changed_after_{attempt}"] == []
            assert not result[f"watchdog_after_{attempt}"]
            assert result[f"closed_{attempt}"]
    # Both strategies trained in sync.
    assert len(run.results) == 2
    for a, b in zip(
        run.results[0]["weights"][1], run.results[1]["weights"][1], strict=True
    ):
        np.testing.assert_array_equal(a, b)
