"""Ids outside a partitioned table stop every worker, with a clear error;
in one process, the lookups Keras and TensorFlow offer match plain Keras.

On 2 workers only rank 1's slice of a global batch holds the bad id
(id == V, or -1, which Keras' `ops.take` would wrap for a dense table).
Both workers must fail with `InvalidArgumentError` right away, long before
the collective timeout: rank 1 names the table, the id and the valid range;
rank 0 names rank 1 and stops too. No weight changes in the failing step.
"""

import os
import tempfile
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_hybrid import HybridStrategy
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing import run_workers
from keras_hybrid.testing.multiprocess import engines_under_test

WORKER = os.path.join(os.path.dirname(__file__), "workers", "bad_ids_worker.py")
V = 1000
TIMEOUT = 60  # the strategy's collective timeout in the workers


def _rank_output(run, rank):
    prefix = f"[{rank}] "
    lines = (run.stdout + "\n" + run.stderr).splitlines()
    return "\n".join(line for line in lines if line.startswith(prefix))


@pytest.mark.multiprocess
@pytest.mark.parametrize("engine", engines_under_test())
@pytest.mark.parametrize("bad_id", [V, -1], ids=["id_V", "negative"])
def test_bad_id_on_one_rank_stops_all_ranks_quickly(engine, bad_id):
    start = time.monotonic()
    run = run_workers(
        WORKER,
        2,
        tempfile.mkdtemp(prefix=f"bad_ids_{engine}_"),
        args=(f"--rows={V}", f"--bad_id={bad_id}", f"--timeout={TIMEOUT}"),
        timeout=180,
        engine=engine,
    )
    elapsed = time.monotonic() - start
    assert run.returncode != 0, run.stderr[-4000:]
    assert elapsed < TIMEOUT, f"took {elapsed:.0f}s: waited for a timeout?"
    assert sorted(run.results) == [0, 1], run.stderr[-4000:]
    # The data are as intended: only rank 1 looked the bad id up.
    assert bad_id in np.ravel(run.results[1]["my_ids_in_bad_batch"])
    assert bad_id not in np.ravel(run.results[0]["my_ids_in_bad_batch"])
    for rank, result in run.results.items():
        assert result["error_type"] == "InvalidArgumentError", result
        assert result["seconds_to_fail"] < TIMEOUT / 2, result
        assert all(result["weights_unchanged"]), (rank, result)

    bad_rank = _rank_output(run, 1) + run.results[1]["message"]
    assert "item/embeddings" in bad_rank, bad_rank[-3000:]
    assert f"with id {bad_id} on worker 1" in bad_rank, bad_rank[-3000:]
    assert f"[0, {V})" in bad_rank, bad_rank[-3000:]

    other = _rank_output(run, 0) + run.results[0]["message"]
    assert "item/embeddings" in other, other[-3000:]
    assert "worker(s) [1]" in other, other[-3000:]
    assert "worker 0 stops too" in other, other[-3000:]
    assert f"with id {bad_id}" not in other, other[-3000:]


class Lookup(keras.layers.Layer):
    """A custom table read by `ops.take`, `tf.gather` or
    `tf.nn.embedding_lookup`."""

    def __init__(self, mode, rows, dim, **kwargs):
        super().__init__(**kwargs)
        self.mode, self.rows, self.dim = mode, rows, dim

    def build(self, input_shape):
        self.table = self.add_weight(
            shape=(self.rows, self.dim), initializer="uniform", name="table"
        )

    def call(self, ids):
        ids = ops.cast(ids, "int32")
        if self.mode == "take":
            return ops.take(self.table, ids, axis=0)
        if self.mode == "gather":
            return tf.gather(self.table, ids)
        if self.mode == "embedding_lookup":
            # Given a `keras.Variable`, `tf.nn.embedding_lookup` converts it
            # to a tensor first; its `tf.Variable` is gathered by id.
            return tf.nn.embedding_lookup(self.table.value, ids)
        return tf.nn.embedding_lookup(self.table, ids)


def _pooled_model(ids_shape, ids_dtype, embed):
    ids = keras.Input(ids_shape, dtype=ids_dtype)
    x = embed(ids)
    if len(ids_shape) == 1:
        x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(ids, keras.layers.Dense(1)(x))


class LookupsInOneProcessTest(OneProcessTestCase):
    """One worker, no launcher: the table is still a `ShardedTable`."""

    def _compare(self, build, x, table_path, variable_kinds=None):
        """Trains a plain copy and a strategy copy from the same weights;
        their predictions and weights after one epoch must match."""
        y = np.random.default_rng(1).normal(size=(len(x), 1))
        y = y.astype("float32")
        plain = build()
        plain.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
        strategy = HybridStrategy(
            variable_kinds=variable_kinds or SPARSE_TABLES
        )
        with strategy.scope():
            hybrid = build()
            hybrid.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
        self.assertEqual(strategy.plan[table_path].kind, "sparse")
        table = [v for v in hybrid.weights if v.path == table_path]
        self.assertIsInstance(table[0].value, ShardedTable)
        hybrid.set_weights(plain.get_weights())
        self.assertAllClose(
            hybrid.predict(x, verbose=0), plain.predict(x, verbose=0)
        )
        fit = dict(batch_size=8, epochs=1, shuffle=False, verbose=0)
        h_hybrid = hybrid.fit(x, y, **fit).history["loss"]
        h_plain = plain.fit(x, y, **fit).history["loss"]
        self.assertAllClose(h_hybrid, h_plain)
        for a, b in zip(hybrid.get_weights(), plain.get_weights(), strict=True):
            self.assertAllClose(a, b)
        self.assertAllClose(
            hybrid.predict(x, verbose=0), plain.predict(x, verbose=0)
        )

    def _ids(self, shape, low=0):
        return np.random.default_rng(0).integers(low, 40, shape)

    def test_float_ids_into_embedding(self):
        x = self._ids((32, 4)).astype("float32")
        self._compare(
            lambda: _pooled_model(
                (4,), "float32", keras.layers.Embedding(40, 6, name="emb")
            ),
            x,
            "emb/embeddings",
        )

    def _compare_custom(self, mode):
        self._compare(
            lambda: _pooled_model(
                (4,), "int32", Lookup(mode, 40, 6, name="lookup")
            ),
            self._ids((32, 4)).astype("int32"),
            "lookup/table",
            variable_kinds={"lookup/table": "sparse"},
        )

    def test_ops_take_on_a_custom_table(self):
        self._compare_custom("take")

    def test_tf_gather_on_a_custom_table(self):
        self._compare_custom("gather")

    def test_tf_nn_embedding_lookup_on_a_custom_table(self):
        self._compare_custom("embedding_lookup")

    def test_embedding_lookup_of_the_keras_variable_names_the_fix(self):
        # `tf.nn.embedding_lookup` converts params that are not TF resource
        # variables (a Keras variable is not) to a tensor before gathering:
        # in one process (where no patch sends it to `tf.gather`) a whole
        # read, refused with the fix in the message.
        strategy = HybridStrategy(variable_kinds={"lookup/table": "sparse"})
        with strategy.scope():
            model = _pooled_model(
                (4,), "int32", Lookup("keras_variable", 40, 6, name="lookup")
            )
        with self.assertRaisesRegex(ValueError, "pass its `.value`"):
            model.predict(self._ids((8, 4)).astype("int32"), verbose=0)

    def test_mask_zero(self):
        x = self._ids((32, 5)).astype("int32")
        x[:, 3:] = 0  # padding the mask hides from the pooling
        self._compare(
            lambda: _pooled_model(
                (5,),
                "int32",
                keras.layers.Embedding(40, 6, mask_zero=True, name="emb"),
            ),
            x,
            "emb/embeddings",
        )

    def test_one_id_per_sample(self):
        self._compare(
            lambda: _pooled_model(
                (), "int32", keras.layers.Embedding(40, 6, name="emb")
            ),
            self._ids((32,)).astype("int32"),
            "emb/embeddings",
        )
