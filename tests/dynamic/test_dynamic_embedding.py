"""DynamicEmbedding in one process, no strategy."""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase
from tests.dynamic import reference

SEQ, DIM, BATCH = 3, 4, 4


def _keys(samples=40, pool=30, seed=0):
    """Keys from the whole int64 range, drawn Zipf-like from a pool."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(-(2**63), 2**63 - 1, size=pool, dtype=np.int64)
    draw = np.minimum(rng.zipf(1.3, size=(samples, SEQ)) - 1, len(pool) - 1)
    return pool[draw]


def _dynamic_model(**kwargs):
    keys = keras.Input(shape=(SEQ,), dtype="int64")
    layer = DynamicEmbedding(DIM, name="dyn", **kwargs)
    x = keras.layers.Flatten()(layer(keys))
    return keras.Model(keys, keras.layers.Dense(1, name="head")(x)), layer


class ExactnessTest(TestCase):
    """With no eviction, training equals a static Embedding over the same
    keys, admitted by the same rule (each key its own row)."""

    def _compare(self, optimizer, admit_after):
        keys = _keys()
        targets = np.linspace(-1, 1, len(keys), dtype="float32")[:, None]
        model, layer = _dynamic_model(capacity=64, admit_after=admit_after)
        batches = [keys[i : i + BATCH] for i in range(0, len(keys), BATCH)]
        rows, order = reference.admitted_rows(batches * 2, admit_after)
        init = InitialRows("uniform")(tf.constant(order), DIM).numpy()
        ref = reference.static_model(init, SEQ)
        ref.get_layer("head").set_weights(model.get_layer("head").get_weights())
        model.compile(optimizer=optimizer(), loss="mse")
        ref.compile(optimizer=optimizer(), loss="mse")
        fit = dict(batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        got, want = [], []
        for epoch in range(2):
            # The reference's rows change between epochs as keys are
            # admitted, so each epoch is its own fit.
            epoch_rows = rows[epoch * len(batches) : (epoch + 1) * len(batches)]
            got += model.fit(keys, targets, **fit).history["loss"]
            ref_rows = np.concatenate(epoch_rows)
            want += ref.fit(ref_rows, targets, **fit).history["loss"]
        self.assertAllClose(got, want)
        live_keys, live_rows = layer.live_keys()
        table = layer.embeddings.numpy()[live_rows]
        ref_table = ref.layers[1].get_weights()[0]
        position = {key: i for i, key in enumerate(order)}
        self.assertEqual(sorted(live_keys.tolist()), sorted(order))
        self.assertAllClose(table, ref_table[[position[k] for k in live_keys]])
        for a, b in zip(
            model.get_layer("head").get_weights(),
            ref.get_layer("head").get_weights(),
            strict=True,
        ):
            self.assertAllClose(a, b)
        # Predictions agree too (unknown keys: the default row).
        final = {key: i for i, key in enumerate(order)}
        final_rows = np.vectorize(lambda k: final.get(k, -1))(keys)
        self.assertAllClose(
            model.predict(keys, verbose=0), ref.predict(final_rows, verbose=0)
        )
        return np.concatenate(rows)

    def test_sgd_admit_after_1(self):
        self._compare(lambda: keras.optimizers.SGD(0.1), 1)

    def test_sgd_admit_after_2(self):
        rows = self._compare(lambda: keras.optimizers.SGD(0.1), 2)
        # Some lookups must have read the default row, or the test says
        # little about admission.
        self.assertTrue((rows < 0).any())

    def test_adam_admit_after_1(self):
        self._compare(lambda: keras.optimizers.Adam(0.01), 1)

    def test_adam_admit_after_2(self):
        self._compare(lambda: keras.optimizers.Adam(0.01), 2)


class XlaTest(TestCase):
    """Hash tables and unique keys have no XLA kernels: a model with a
    DynamicEmbedding does not support `jit_compile`, so Keras' "auto"
    resolves to False (it would be True in one process with a GPU) and
    an explicit `jit_compile=True` warns and trains without XLA."""

    def test_jit_compile_is_declined_and_training_runs(self):
        model, layer = _dynamic_model(capacity=64)
        self.assertFalse(layer.supports_jit)
        with self.assertWarnsRegex(UserWarning, "jit_compile=False"):
            model.compile(optimizer="sgd", loss="mse", jit_compile=True)
        self.assertFalse(model.jit_compile)
        keys = _keys()
        targets = np.zeros([len(keys), 1], "float32")
        history = model.fit(keys, targets, batch_size=BATCH, verbose=0)
        self.assertEqual(len(history.history["loss"]), 1)
        self.assertGreater(layer.stats()["rows"], 0)
