"""Tables and their optimizer slots move between 4 real workers in memory
(`sparse.resharding`): a shrink onto 3 workers and a grow back onto 4 in
the middle of training, which goes on as in one process.

One scenario on the pool of 4 workers (`workers/resharding_scenarios.py`)
serves every test; the plain Keras reference runs here, with every
gradient made dense (Adam as the workers apply it, see
`tests/checkpoint/test_resharding_multiprocess.py`).
"""

import functools
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid.costs import resize
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "resharding_scenarios.py")
sys.path.insert(0, HERE)
import resharding_scenarios as worker  # noqa: E402
import sparse_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess

ATOL = 1e-5
TABLES = ("table_a/embeddings", "table_b/embeddings")
# The model's tables as the simulator sees them: Adam's m and v move too.
SIMULATED = [
    resize.ResizedTable(cases.VOCAB, (8,), 4, slots=2),
    resize.ResizedTable(cases.VOCAB, (4,), 4, slots=2),
]


@functools.cache
def results() -> dict:
    run = run_scenario(SCENARIO, "reshard", 4).check()
    assert sorted(run.results) == [0, 1, 2, 3]
    return run.results


@functools.cache
def reference() -> list:
    """Plain Keras weights after each of the worker's steps."""
    keras.utils.set_random_seed(cases.SEED)
    model = cases.build_model("two_tables")
    optimizer = keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss=cases.make_loss())
    model.set_weights(results()[0]["initial"])
    x, y = cases.make_data(worker.STEPS * worker.BATCH, seed=worker.DATA_SEED)
    loss_fn = cases.make_loss()
    after = []
    for start in range(0, len(x), worker.BATCH):
        stop = start + worker.BATCH
        with tf.GradientTape() as tape:
            loss = loss_fn(y[start:stop], model(x[start:stop]))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(
            zip(
                [tf.convert_to_tensor(g) for g in grads],
                model.trainable_variables,
                strict=True,
            )
        )
        after.append([w.copy() for w in model.get_weights()])
    return after


def assert_all_close(got, want, msg=""):
    assert len(got) == len(want), msg
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, atol=ATOL, err_msg=f"{msg} #{i}")


def test_tables_and_slots_are_unchanged_by_each_move():
    for rank, result in results().items():
        # Two tables, each with Adam's m and v.
        assert len(result["paths"]) == 6, result["paths"]
        for name in ("shrink", "grow"):
            got, want = result[name]["state"], result[name]["state_before"]
            where = f"rank {rank} {name}"
            assert_all_close(got["weights"], want["weights"], where)
            assert sorted(got["tables"]) == sorted(result["paths"]), where
            for path, value in want["tables"].items():
                assert value.shape[0] == cases.VOCAB, (where, path)
                np.testing.assert_array_equal(got["tables"][path], value)
        # Worker 3's joiner shards were dropped, not gathered.
        assert_all_close(
            result["grow"]["state_before"]["weights"],
            result["after_shrink_step"],
            f"rank {rank} after adopt_partitions",
        )
        # The step between the resizes trained the tables and slots.
        before = result["shrink"]["state"]["tables"]
        after = result["grow"]["state_before"]["tables"]
        for path in result["paths"]:
            assert np.abs(after[path] - before[path]).max() > 0, path


def test_shards_hold_the_new_rows():
    rows = {rank: r for rank, r in results().items()}
    for path in rows[0]["paths"]:
        before = [rows[k]["rows_before"][path] for k in range(4)]
        shrunk = [rows[k]["shrink"]["rows"][path] for k in range(4)]
        grown = [rows[k]["grow"]["rows"][path] for k in range(4)]
        assert before == [125, 125, 125, 125], (path, before)
        assert shrunk[3] == 0 and sum(shrunk) == cases.VOCAB, (path, shrunk)
        assert max(shrunk[:3]) - min(shrunk[:3]) <= 1, (path, shrunk)
        assert grown == [125, 125, 125, 125], (path, grown)
    assert (
        "rows per worker 167 167 166 (500 virtual shards)"
        in (rows[0]["shrink"]["plan"])
    ), rows[0]["shrink"]["plan"]


def test_training_after_each_resize_equals_one_process():
    want = reference()
    for rank, result in results().items():
        assert_all_close(
            result["shrink"]["state_before"]["weights"], want[1], f"rank {rank}"
        )
        assert_all_close(result["after_shrink_step"], want[2], f"rank {rank}")
        assert_all_close(result["final"], want[3], f"rank {rank}")


def test_bytes_match_the_simulator_and_the_minimum():
    # Only pairs that move rows talk, each block padded to its own count's
    # ladder step.
    predicted = resize.resize_traffic(SIMULATED, (4, 3, 4), engine="tf")
    for name, guess in zip(("shrink", "grow"), predicted, strict=True):
        sent = [results()[k][name]["reshard"]["bytes"] for k in range(4)]
        padding = [results()[k][name]["padding"]["bytes"] for k in range(4)]
        returned = [results()[k][name]["returned"] for k in range(4)]
        assert returned == sent, (name, returned, sent)
        np.testing.assert_allclose(sent, guess.sent, rtol=0.02, err_msg=name)
        np.testing.assert_allclose(
            padding, guess.padding, rtol=0.02, err_msg=name
        )
        # Each moved row is a row the balance needs moved.
        assert sum(sent) <= 1.1 * guess.minimum, (name, sent, guess.minimum)
        assert sum(sent) > 0, name
