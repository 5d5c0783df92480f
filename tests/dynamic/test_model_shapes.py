"""DynamicEmbedding in model shapes users write, in one process: a
subclassed model whose layers are built by `fit` (Keras traces `call`
symbolically, in a stateless scope), with a user `train_step`, and mixed
precision, whose `LossScaleOptimizer` wraps an optimizer with non-zero
initial slots while rows are freed and given again. Each runs with no
strategy and under a one-process `HybridStrategy`; the several-worker
runs of a subclassed model are in `test_dynamic_multiprocess.py`."""

import contextlib

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid import HybridStrategy
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase

SEQ, DIM, BATCH = 3, 4, 4


def _data(samples=48, pool=40, seed=0):
    rng = np.random.default_rng(seed)
    pool = rng.integers(-(2**63), 2**63 - 1, size=pool, dtype=np.int64)
    draw = np.minimum(rng.zipf(1.3, size=(samples, SEQ)) - 1, len(pool) - 1)
    return pool[draw], np.linspace(-1, 1, samples, dtype="float32")[:, None]


class Tower(keras.Model):
    """Layers made in `__init__`, built by their first call."""

    def __init__(self, **table_args):
        super().__init__()
        self.dyn = DynamicEmbedding(DIM, name="dyn", **table_args)
        self.flatten = keras.layers.Flatten()
        self.head = _head()

    def call(self, keys):
        return self.head(self.flatten(self.dyn(keys)))


class UserStep(Tower):
    """The same with a `train_step` of the user's own."""

    def train_step(self, data):
        keys, targets = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(keys) - targets))
        variables = self.trainable_variables
        grads = tape.gradient(loss, variables)
        self.optimizer.apply(grads, variables)
        return {"mse": loss}


def _head():
    # Seeded: the same initial weights in every model.
    return keras.layers.Dense(
        1,
        kernel_initializer=keras.initializers.GlorotUniform(seed=5),
        name="head",
        dtype="float32",
    )


def _functional(**table_args):
    keys = keras.Input((SEQ,), dtype="int64")
    layer = DynamicEmbedding(DIM, name="dyn", **table_args)
    x = keras.layers.Flatten()(layer(keys))
    return keras.Model(keys, _head()(x))


class SubclassedTest(TestCase):
    """`fit` builds a subclassed model (in its traced step with no
    strategy, symbolically under one): it trains as the functional model
    of the same layers does (rows come from their keys, the head from a
    seeded initializer)."""

    def _trained(self, make_model, under_strategy):
        """`({key: row}, head weights)` after `fit`."""
        keys, targets = _data()
        lifetime = HybridStrategy() if under_strategy else _no_strategy()
        with lifetime as strategy:
            with strategy.scope() if strategy else contextlib.nullcontext():
                model = make_model(capacity=64, admit_after=2)
                model.compile(optimizer="adam", loss="mse")
            model.fit(
                keys,
                targets,
                batch_size=BATCH,
                epochs=2,
                shuffle=False,
                verbose=0,
            )
            rows = dict(zip(*_rows_by_key(model.get_layer("dyn")), strict=True))
            return rows, model.get_layer("head").get_weights()

    def _check(self, make_model, under_strategy=False):
        # The reference in the same setting: the strategy sums a key's
        # gradients before Adam, Keras alone does not.
        want, want_head = self._trained(_functional, under_strategy)
        got, got_head = self._trained(make_model, under_strategy)
        self.assertEqual(sorted(got), sorted(want))
        self.assertGreater(len(got), 10)
        for key, row in want.items():
            np.testing.assert_allclose(got[key], row, atol=1e-6)
        for g, w in zip(got_head, want_head, strict=True):
            np.testing.assert_allclose(g, w, atol=1e-6)

    def test_built_by_fit_with_no_strategy(self):
        self._check(Tower)

    def test_built_by_fit_under_the_strategy(self):
        self._check(Tower, under_strategy=True)

    def test_a_user_train_step(self):
        self._check(UserStep)


class MixedPrecisionTest(TestCase):
    """`LossScaleOptimizer` wraps Adagrad, whose slots start at
    `initial_accumulator_value`: rows freed by eviction get that value
    back, from the wrapped optimizer."""

    def tearDown(self):
        keras.mixed_precision.set_global_policy("float32")
        super().tearDown()

    def _check(self, strategy=None):
        keras.mixed_precision.set_global_policy("mixed_float16")
        keys, targets = _data(samples=96, pool=60)
        with strategy.scope() if strategy else contextlib.nullcontext():
            model = Tower(capacity=16, eviction="lru")
            model.compile(
                optimizer=keras.optimizers.Adagrad(
                    0.1, initial_accumulator_value=0.5
                ),
                loss="mse",
            )
        self.assertIsInstance(
            model.optimizer, keras.optimizers.LossScaleOptimizer
        )
        history = model.fit(
            keys, targets, batch_size=BATCH, verbose=0, shuffle=False
        )
        self.assertTrue(np.isfinite(history.history["loss"]).all())
        stats = model.dyn.stats()
        self.assertGreater(stats["evictions"], 0)
        self.assertEqual(stats["rows"], 16)
        # Rows given after an eviction started from 0.5: every row's
        # accumulator is at least that (Adagrad only adds squares).
        (accumulator,) = [
            v
            for v in model.optimizer.variables
            if v.path.endswith("dyn_embeddings_accumulator")
        ]
        self.assertGreaterEqual(float(np.min(accumulator.numpy())), 0.5)

    def test_with_no_strategy(self):
        self._check()

    def test_under_the_strategy(self):
        with HybridStrategy() as strategy:
            self._check(strategy)


def _rows_by_key(layer):
    keys, rows = layer.live_keys()
    return keys.tolist(), layer.embeddings.numpy()[rows]


def _no_strategy():
    return contextlib.nullcontext(None)
