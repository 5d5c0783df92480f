"""Under `HybridStrategy`, a stock optimizer updates only a dynamic
table's rows in use (`strategy.local_variables.update_rows_in_use`), with the
result of updating every row: free rows are zeros with initial slots.
The update goes a chunk of rows at a time; here the chunks are small,
so that every table is updated in several."""

import contextlib
import os
import tempfile
from unittest import mock

import keras
import numpy as np

from keras_hybrid import HybridStrategy
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.strategy import local_variables
from keras_hybrid.testing.test_case import TestCase

SEQ, DIM, CAPACITY = 2, 3, 12
# Every element-wise stock optimizer (each keeps slots but SGD), and a
# wrapper.
OPTIMIZERS = {
    "SGD": lambda: keras.optimizers.SGD(0.1),
    "momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "Adam": lambda: keras.optimizers.Adam(0.1),
    "AdamW": lambda: keras.optimizers.AdamW(0.05, weight_decay=0.2),
    "Adagrad": lambda: keras.optimizers.Adagrad(
        0.1, initial_accumulator_value=0.3
    ),
    "RMSprop": lambda: keras.optimizers.RMSprop(0.05, momentum=0.5),
    "Ftrl": lambda: keras.optimizers.Ftrl(
        0.1, initial_accumulator_value=0.2, l2_regularization_strength=0.01
    ),
    "Adamax": lambda: keras.optimizers.Adamax(0.1),
    "Nadam": lambda: keras.optimizers.Nadam(0.1),
    "Lion": lambda: keras.optimizers.Lion(0.05),
    "Adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "EMA": lambda: keras.optimizers.Adam(0.1, use_ema=True),
    "LossScale": lambda: keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam(0.1)
    ),
}


def _data():
    """20 keys over 10 steps of 4 samples: a table of 12 rows fills,
    evicts (LRU) and takes new keys into freed rows. A key appears at
    most once in a batch: in one process, Keras squares a gradient's
    entries before summing those of one row (Adam, Adagrad...), where
    the strategy sums them first."""
    rng = np.random.default_rng(0)
    steps = [rng.permutation(20)[: 4 * SEQ] for _ in range(10)]
    keys = np.concatenate(steps).reshape(-1, SEQ).astype("int64")
    return keys, np.linspace(-1, 1, len(keys), dtype="float32")[:, None]


def _build(make_optimizer, strategy=None, **layer_args):
    """`(model, layer, head)`, built in `strategy`'s scope (or none)."""
    keras.backend.clear_session()
    scope = strategy.scope() if strategy else contextlib.nullcontext()
    with scope:
        keys = keras.Input(shape=(SEQ,), dtype="int64")
        args = {"capacity": CAPACITY, "eviction": "lru", **layer_args}
        layer = DynamicEmbedding(DIM, name="dyn", **args)
        head = keras.layers.Dense(
            1, kernel_initializer=keras.initializers.GlorotUniform(seed=1)
        )
        model = keras.Model(keys, head(keras.layers.Flatten()(layer(keys))))
        model.compile(optimizer=make_optimizer(), loss="mse")
    return model, layer, head


def _train(make_optimizer, strategy=None, **layer_args):
    """`(live keys -> row, head kernel, model, layer)` after one epoch,
    built and trained in `strategy`'s scope (or none)."""
    model, layer, head = _build(make_optimizer, strategy, **layer_args)
    x, y = _data()
    model.fit(x, y, batch_size=4, shuffle=False, verbose=0)
    live, values = layer.live_rows()
    rows = dict(zip(live.tolist(), values, strict=True))
    return rows, head.kernel.numpy(), model, layer


class RowsInUseTest(TestCase):
    def setUp(self):
        super().setUp()
        # Small chunks: a 12-row table is updated 3 rows at a time, a
        # 40-row one 8 at a time (its 20 rows in use: 3 chunks, the last
        # one short).
        for name, value in (("CHUNKS", 5), ("MIN_CHUNK_ROWS", 1)):
            patch = mock.patch.object(local_variables, name, value)
            patch.start()
            self.addCleanup(patch.stop)

    def test_every_stock_optimizer_trains_as_if_it_updated_every_row(self):
        for name, make in OPTIMIZERS.items():
            rows, kernel, _, layer = _train(make)
            self.assertGreater(layer.stats()["evictions"], 0, name)
            with HybridStrategy() as strategy:
                windowed, windowed_kernel, _, _ = _train(make, strategy)
            self.assertEqual(sorted(rows), sorted(windowed), name)
            for key, row in rows.items():
                np.testing.assert_allclose(
                    windowed[key], row, rtol=1e-5, atol=1e-6, err_msg=name
                )
            np.testing.assert_allclose(
                windowed_kernel, kernel, rtol=1e-5, atol=1e-6, err_msg=name
            )

    def test_a_regularized_table_too(self):
        args = {"embeddings_regularizer": keras.regularizers.L2(0.1)}
        make = OPTIMIZERS["Adam"]
        rows, _, _, _ = _train(make, **args)
        with HybridStrategy() as strategy:
            windowed, _, _, _ = _train(make, strategy, **args)
        for key, row in rows.items():
            np.testing.assert_allclose(windowed[key], row, rtol=1e-5)

    def test_rows_past_the_last_live_row_are_not_updated(self):
        with HybridStrategy() as strategy:
            make = OPTIMIZERS["momentum"]
            _, _, model, layer = _train(make, strategy, capacity=40)
            in_use = int(layer.table.rows_in_use())
            self.assertEqual(in_use, 20)  # one row per key
            (momentum,) = [
                v
                for v in model.optimizer.variables
                if v.name == "dyn_embeddings_momentum"
            ]
            # Rows past the rows in use are free: zeros, zero slots. A
            # planted value shows whether the update reads and writes them
            # (a whole update would decay it by the momentum, 0.9).
            planted = momentum.numpy()
            planted[in_use:] = 1.0
            momentum.assign(planted)
            x, y = _data()
            model.fit(x[:4], y[:4], batch_size=4, verbose=0)
            self.assertLessEqual(int(layer.table.rows_in_use()), in_use)
            np.testing.assert_array_equal(momentum.numpy()[in_use:], 1.0)
            self.assertFalse(
                np.array_equal(momentum.numpy()[:in_use], planted[:in_use])
            )

    def test_freed_rows_get_their_slots_back(self):
        keras.backend.clear_session()
        keys = keras.Input(shape=(1,), dtype="int64")
        layer_ttl = DynamicEmbedding(DIM, capacity=4, eviction="ttl:1")
        model = keras.Model(keys, keras.ops.sum(layer_ttl(keys), axis=(1, 2)))
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
        fit = {"batch_size": 1, "shuffle": False, "verbose": 0}
        model.fit(np.array([[5], [6]]), np.ones(2), **fit)
        # Key 5 (row 0) expires two steps after its last use.
        model.fit(np.array([[6], [6]]), np.ones(2), **fit)
        self.assertEqual(layer_ttl.live_keys()[1].tolist(), [1])
        for slot in model.optimizer.variables:
            if slot.name.startswith("dynamic_embedding_embeddings_"):
                np.testing.assert_array_equal(slot.numpy()[0], 0.0)
        np.testing.assert_array_equal(layer_ttl.embeddings.numpy()[0], 0.0)

    def test_loaded_weights_set_the_rows_in_use(self):
        _, _, model, layer = _train(OPTIMIZERS["SGD"], capacity=40)
        self.assertEqual(int(layer.table.rows_in_use()), 20)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.weights.h5")
            model.save_weights(path)
            loaded, layer, _ = _build(OPTIMIZERS["SGD"], capacity=40)
            self.assertEqual(int(layer.table.rows_in_use()), 1)
            loaded.load_weights(path)
        self.assertEqual(int(layer.table.rows_in_use()), 20)
