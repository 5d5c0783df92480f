"""Stock callbacks, warm start and a crash during a save, on 2 workers."""

import os
import sys
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid import checkpoint
from keras_hybrid.testing import run_workers
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.dirname(__file__)
WORKER = os.path.join(HERE, "workers", "checkpoint_worker.py")
SCENARIOS = os.path.join(HERE, "workers", "checkpoint_scenarios.py")
sys.path.insert(0, os.path.join(HERE, "..", "sparse", "workers"))
import sparse_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess


def on_pool(phase: str, target: str):
    return run_scenario(SCENARIOS, "run", 2, {"phase": phase, "folder": target})


def test_backup_and_restore_and_model_checkpoint_on_two_workers():
    """A run interrupted in epoch 3 resumes from epoch 3 on both ranks and
    ends where an uninterrupted run ends; `save_best_only` on the global
    loss writes one file per improving epoch, once."""
    target = tempfile.mkdtemp(prefix="ckpt_callbacks_")
    scratch_before = _scratch_folders()
    results = on_pool("callbacks", target).check().results
    for rank, result in results.items():
        assert result["resumed_epochs"] == 1, rank  # only the last epoch
        for got, want in zip(
            result["resumed"], result["reference"], strict=True
        ):
            np.testing.assert_allclose(got, want, atol=1e-5)
    # BackupAndRestore removed its folder at the end; the best checkpoints
    # are complete files that plain Keras loads.
    assert results[0]["listing"] == results[1]["listing"]
    best = [n for n in results[0]["listing"] if n.startswith("best_")]
    assert best and "backup" not in results[0]["listing"]
    model = cases.build_model("two_tables")
    model.load_weights(os.path.join(target, best[-1]))
    # The other rank's scratch folders (its `CSVLogger` file, ...) are gone.
    # Each pool worker keeps its (empty) scratch root until it exits.
    root = tempfile.gettempdir()
    for name in _scratch_folders() - scratch_before:
        assert os.listdir(os.path.join(root, name)) == [], name


def _scratch_folders() -> set:
    return {
        n
        for n in os.listdir(tempfile.gettempdir())
        if n.startswith("keras_hybrid_scratch_")
    }


def test_single_device_keras_file_warm_starts_partitioned():
    target = tempfile.mkdtemp(prefix="ckpt_warm_")
    keras.utils.set_random_seed(3)
    plain = cases.build_model("two_tables")
    plain.compile(optimizer="adam", loss=cases.make_loss())
    x, y = cases.make_data(96)
    plain.fit(x, y, batch_size=48, verbose=0)
    plain.save(os.path.join(target, "plain.keras"))
    probe = cases.make_data(48, seed=99)[0]
    want = plain.predict(probe, verbose=0)
    results = on_pool("warm_start", target).check().results
    for result in results.values():
        assert result["kinds"]["table_a/embeddings"] == "sparse"
        assert result["kinds"]["head/kernel"] == "dense"
        np.testing.assert_allclose(result["predictions"], want, atol=1e-5)
        for got, w in zip(result["weights"], plain.get_weights(), strict=True):
            np.testing.assert_allclose(got, w, atol=0)


def test_worker_killed_mid_save_leaves_previous_checkpoint_loadable():
    target = tempfile.mkdtemp(prefix="ckpt_crash_")
    run = run_workers(
        WORKER,
        2,
        tempfile.mkdtemp(prefix="ckpt_crash_out_"),
        args=(f"--dir={target}",),
    )
    assert run.returncode != 0
    assert "the second save must not complete" not in run.stderr
    # The second save (step 10) died half-way: its folder has no manifest.
    assert os.path.isdir(os.path.join(target, "ckpt-000000010.tmp"))
    assert checkpoint.latest_checkpoint(target).endswith("ckpt-000000005")
    model = cases.build_model("two_tables")
    model.compile(optimizer="adam", loss=cases.make_loss())
    manifest = checkpoint.restore_checkpoint(model, target)
    assert manifest["step"] == 5
    for got, want in zip(
        model.get_weights(), run.results[0]["at_save"], strict=True
    ):
        np.testing.assert_allclose(got, want, atol=0)
    # The next completed save clears the dead one.
    checkpoint.save_checkpoint(model, target)
    assert not os.path.exists(os.path.join(target, "ckpt-000000010.tmp"))


def test_tensorflow_checkpoint_holds_whole_tables():
    """`tf.train.Checkpoint` written on every rank (the chief's in the
    folder) holds whole tables and slots: a new model restores it on 2
    workers and trains on as the saved one does, and plain Keras in this
    process restores the same weights from the chief's file."""
    target = tempfile.mkdtemp(prefix="ckpt_tf_")
    results = on_pool("tf_checkpoint", target).check().results
    for result in results.values():
        for got, want in zip(
            result["at_restore"], result["at_save"], strict=True
        ):
            np.testing.assert_allclose(got, want, atol=0)
        for got, want in zip(
            result["restored_final"], result["final"], strict=True
        ):
            np.testing.assert_allclose(got, want, atol=1e-6)
    plain = cases.build_model("two_tables")
    plain.compile(optimizer="adam", loss=cases.make_loss())
    tf.train.Checkpoint(model=plain).restore(
        os.path.join(target, "ckpt")
    ).expect_partial()
    for got, want in zip(
        plain.get_weights(), results[0]["at_save"], strict=True
    ):
        np.testing.assert_allclose(got, want, atol=0)
