"""Sharded checkpoints restore on another worker count (4 -> 2, 2 -> 3,
4 -> 1 plain Keras) and training continues as if never interrupted."""

import functools
import os
import sys
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid import checkpoint
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.dirname(__file__)
SCENARIOS = os.path.join(HERE, "workers", "checkpoint_scenarios.py")
sys.path.insert(0, os.path.join(HERE, "..", "sparse", "workers"))
import sparse_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess

ATOL = 1e-5
STEPS = 5


@functools.cache
def saved_by(num_workers: int) -> tuple[str, dict]:
    """A checkpoint written by `num_workers` and that run's results."""
    out_dir = tempfile.mkdtemp(prefix=f"ckpt_save{num_workers}_")
    target = os.path.join(out_dir, "ckpt")
    run = run_scenario(
        SCENARIOS,
        "run",
        num_workers,
        {"phase": "save", "folder": target, "steps": STEPS},
    ).check()
    return target, run.results


def resume_on(num_workers: int, target: str) -> dict:
    run = run_scenario(
        SCENARIOS,
        "run",
        num_workers,
        {"phase": "resume", "folder": target, "steps": STEPS},
    ).check()
    return run.results


def assert_all_close(got, want, msg=""):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, atol=ATOL, err_msg=f"{msg} #{i}")


@pytest.mark.parametrize("saved, restored", [(4, 2), (2, 3)])
def test_resume_on_another_worker_count(saved, restored):
    target, save_results = saved_by(saved)
    results = resume_on(restored, target)
    for rank, result in results.items():
        assert result["saved_by"] == saved
        assert result["step"] == STEPS
        assert_all_close(
            result["restored"], save_results[0]["at_save"], f"rank {rank}"
        )
        # Same global batches: as if the first run had gone on.
        assert_all_close(
            result["final"], save_results[0]["final"], f"rank {rank}"
        )
    # Each table is split over the new worker count.
    rows = results[0]["local_rows"]["table_a/embeddings"][0]
    assert rows == -(-cases.VOCAB // restored)


def test_checkpoint_of_four_workers_restores_in_plain_keras():
    """One process, no strategy. Training goes on with every gradient made
    dense: that is Adam as the workers apply it (stock Keras Adam on an
    `IndexedSlices` decays the moments of looked-up rows only)."""
    target, save_results = saved_by(4)
    model = cases.build_model("two_tables")
    optimizer = keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss=cases.make_loss())
    manifest = checkpoint.restore_checkpoint(model, target)
    assert manifest["num_workers"] == 4
    assert int(optimizer.iterations.numpy()) == STEPS
    assert_all_close(model.get_weights(), save_results[0]["at_save"])
    x, y = cases.make_data(STEPS * 48 * 2, seed=11)
    loss_fn = cases.make_loss()
    for start in range(STEPS * 48, 2 * STEPS * 48, 48):
        with tf.GradientTape() as tape:
            logits = model(x[start : start + 48])
            loss = loss_fn(y[start : start + 48], logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(
            zip(
                [tf.convert_to_tensor(g) for g in grads],
                model.trainable_variables,
                strict=True,
            )
        )
    assert_all_close(model.get_weights(), save_results[0]["final"])


def test_layout_on_disk():
    target, _ = saved_by(2)
    (found,) = checkpoint.manifest.list_checkpoints(target)
    assert os.path.basename(found) == f"ckpt-{STEPS:09d}"
    names = sorted(os.listdir(found))
    assert names == [
        "dense",
        "manifest.json",
        "shard-00000-of-00002",
        "shard-00000-of-00002.json",
        "shard-00001-of-00002",
        "shard-00001-of-00002.json",
    ]
