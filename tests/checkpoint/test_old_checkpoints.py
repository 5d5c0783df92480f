"""Checkpoints written by release 0.1.0 restore with today's code.

`release_0_1/files` holds a sharded checkpoint and a `.keras` file of a
model with a partitioned table, trained with Adam on 2 workers by the
previous release (`release_0_1/make_checkpoints.py`), and the weights,
optimizer state and predictions it had. Restored here in one process and
on 3 workers, they must be those exactly.
"""

import os
import sys

import keras
import numpy as np
import pytest

from keras_hybrid.checkpoint import restore_checkpoint
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "release_0_1")
FILES = os.path.join(HERE, "files")
sys.path.insert(0, HERE)
import make_checkpoints as release  # noqa: E402


def expected() -> dict:
    with np.load(os.path.join(FILES, "expected.npz")) as data:
        return {k: data[k] for k in data.files}


def sharded_path() -> str:
    with open(os.path.join(FILES, "sharded_path.txt")) as f:
        return os.path.join(FILES, f.read().strip())


def numbered(arrays: dict, prefix: str) -> list:
    count = sum(1 for k in arrays if k.startswith(prefix))
    return [arrays[f"{prefix}{i}"] for i in range(count)]


class OldCheckpointsTest(OneProcessTestCase):
    def test_sharded_checkpoint_restores_in_one_process(self):
        want = expected()
        model = release.build_model()
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
        restore_checkpoint(model, sharded_path())
        for got, w in zip(
            model.get_weights(), numbered(want, "weight"), strict=True
        ):
            np.testing.assert_array_equal(got, w)
        slots = [np.asarray(v.numpy()) for v in model.optimizer.variables]
        for got, w in zip(slots, numbered(want, "slot"), strict=True):
            np.testing.assert_array_equal(got, w)
        x, _ = release.data()
        np.testing.assert_allclose(
            model.predict(x[:8], verbose=0), want["predictions"], atol=1e-6
        )

    def test_keras_file_loads_in_plain_keras(self):
        want = expected()
        model = keras.saving.load_model(os.path.join(FILES, "model.keras"))
        for got, w in zip(
            model.get_weights(), numbered(want, "weight"), strict=True
        ):
            np.testing.assert_array_equal(got, w)
        x, _ = release.data()
        np.testing.assert_allclose(
            model.predict(x[:8], verbose=0), want["predictions"], atol=1e-6
        )


@pytest.mark.multiprocess
def test_sharded_checkpoint_restores_on_three_workers():
    run = run_scenario(
        os.path.join(HERE, "restore_scenarios.py"),
        "restore",
        3,
        {"checkpoint": sharded_path()},
        timeout=240,
    ).check()
    want = expected()
    for rank, result in run.results.items():
        for got, w in zip(
            result["weights"], numbered(want, "weight"), strict=True
        ):
            np.testing.assert_array_equal(got, w, err_msg=f"rank {rank}")
        for got, w in zip(result["slots"], numbered(want, "slot"), strict=True):
            np.testing.assert_array_equal(got, w, err_msg=f"rank {rank}")
        assert result["table_rows"] < release.VOCAB, "the table is not split"
