"""Sharded checkpoints of dynamic tables, saved on N workers and resumed
on M, and `model.save` on several workers (real workers through the
shared worker pool).

A run on N workers trains the first of two epochs (Adam, admit_after 3,
so optimizer slots and waiting keys' admission counts matter) and saves
a `ShardedCheckpoint`; a run on M workers restores it and trains the
second epoch. Its second-epoch loss, every key's row, the head and the
predictions must equal the uninterrupted plain-Keras reference of
`test_dynamic_multiprocess` within 1e-5, and every key must live on its
owner among the M workers.
"""

import functools
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid.dynamic.key_owners import KeyOwners
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario
from tests.dynamic.test_dynamic_multiprocess import cases
from tests.dynamic.test_dynamic_multiprocess import expected

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "dynamic_scenarios.py")

pytestmark = pytest.mark.multiprocess
by_engine = pytest.mark.parametrize("engine", engines_under_test())

ATOL = 1e-5
CONFIG = {"optimizer": "adam", "admit_after": 3}
_ROOT = tempfile.mkdtemp(prefix="dynamic_ckpt_")


@functools.cache
def saved(engine: str, num_workers: int, key_dtype="int64") -> tuple:
    """`(directory, {rank: result})` of the first epoch on `num_workers`."""
    directory = os.path.join(_ROOT, f"{engine}_{key_dtype}_from{num_workers}")
    run = run_scenario(
        SCENARIO,
        "save_first_epoch",
        num_workers,
        {**CONFIG, "directory": directory, "key_dtype": key_dtype},
        engine=engine,
        timeout=300,
    ).check()
    return directory, run.results


@functools.cache
def resumed(
    engine: str, saved_on: int, num_workers: int, key_dtype="int64"
) -> dict:
    directory, _ = saved(engine, saved_on, key_dtype)
    copy = f"{directory}to{num_workers}"
    # Each resume saves again at its end: keep the source untouched.
    shutil.copytree(directory, copy)
    run = run_scenario(
        SCENARIO,
        "resume",
        num_workers,
        {**CONFIG, "directory": copy, "key_dtype": key_dtype},
        engine=engine,
        timeout=300,
    ).check()
    return run.results


RESIZES = [(2, 1), (2, 4), (4, 2), (1, 2)]


@by_engine
@pytest.mark.parametrize("saved_on,num_workers", RESIZES)
def test_resume_equals_an_uninterrupted_run(engine, saved_on, num_workers):
    _check_resume(engine, saved_on, num_workers, "int64")


@by_engine
def test_string_keys_resume_on_another_worker_count(engine):
    """String keys are held as their hashes, so a checkpoint of them
    resumes on another worker count as integer keys do."""
    _check_resume(engine, 2, 4, "string")


def _check_resume(engine, saved_on, num_workers, key_dtype) -> None:
    _, first = saved(engine, saved_on, key_dtype)
    # Keys wait for admission at the save: their counts must travel.
    assert sum(r["waiting"] for r in first.values()) > 0
    head = [np.asarray(w) for w in first[0]["initial_head"]]
    want = expected(
        CONFIG["optimizer"],
        CONFIG["admit_after"],
        head,
        strings=key_dtype == "string",
    )
    got = resumed(engine, saved_on, num_workers, key_dtype)
    assert sorted(got) == list(range(num_workers))
    for result in first.values():
        np.testing.assert_allclose(
            result["loss"], want["loss"][:1], atol=ATOL, rtol=0
        )
    for result in got.values():
        assert result["size"] == num_workers
        # Only the second epoch ran: the first came from the checkpoint.
        np.testing.assert_allclose(
            result["loss"], want["loss"][1:], atol=ATOL, rtol=0
        )
        for g, w in zip(result["final_head"], want["head"], strict=True):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
        np.testing.assert_allclose(
            result["predict"], want["predict"], atol=ATOL, rtol=0
        )
    live = np.concatenate([r["keys"] for r in got.values()])
    assert sorted(live.tolist()) == sorted(want["rows"])
    for result in got.values():
        # The counters travel too: admissions since the layer was made.
        assert result["stats"]["rows"] == len(want["rows"])
        assert result["stats"]["admissions"] == len(want["rows"])
    owners = KeyOwners.balanced(num_workers)
    for rank, result in got.items():
        mine = owners.owner_of(tf.constant(result["keys"], tf.int64)).numpy()
        assert (mine == rank).all()
        for key, row in zip(result["keys"], result["rows"], strict=True):
            np.testing.assert_allclose(
                row, want["rows"][key], atol=ATOL, rtol=0, err_msg=str(key)
            )


# Predicts with a `.keras` file in a fresh interpreter that cannot import
# keras_hybrid.
_CLEAN = """
import sys
sys.modules["keras_hybrid"] = None  # importing it now fails
import keras
import numpy as np
import tensorflow as tf
model = keras.saving.load_model(sys.argv[1])
out = model.predict(np.load(sys.argv[3]), batch_size=8, verbose=0)
lookup = model.get_layer("dyn_lookup")  # then the Embedding, "dyn"
np.save(sys.argv[2], out)
np.save(sys.argv[4], np.asarray(lookup.get_vocabulary()[1:], np.int64))
served = tf.saved_model.load(sys.argv[5])  # kept: it owns the variables
np.save(sys.argv[6], served.serve(tf.constant(np.load(sys.argv[3]))).numpy())
"""


@by_engine
@pytest.mark.parametrize("num_workers", (2, 4))
def test_save_and_export_hold_every_workers_keys_for_stock_keras(
    engine, num_workers
):
    stem = os.path.join(_ROOT, f"{engine}_stock{num_workers}")
    path = f"{stem}.keras"
    export = f"{stem}_savedmodel"
    run = run_scenario(
        SCENARIO,
        "save_stock",
        num_workers,
        {"path": path, "export": export},
        engine=engine,
        timeout=300,
    ).check()
    keys = np.concatenate([r["keys"] for r in run.results.values()])
    assert min(len(r["keys"]) for r in run.results.values()) > 0
    data = os.path.join(_ROOT, "keys.npy")
    np.save(data, cases.make_data()[0])
    out = f"{stem}_out.npy"
    vocabulary = f"{stem}_vocabulary.npy"
    served = f"{stem}_served.npy"
    subprocess.run(
        [sys.executable, "-c", _CLEAN, path, out, data, vocabulary]
        + [export, served],
        check=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert sorted(np.load(vocabulary).tolist()) == sorted(keys.tolist())
    for result in run.results.values():
        np.testing.assert_array_equal(np.load(out), result["predict"])
        np.testing.assert_allclose(
            np.load(served), result["predict"], atol=1e-6, rtol=0
        )
