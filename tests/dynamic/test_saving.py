"""Saving and serving models with dynamic tables."""

import os
import subprocess
import sys
import tempfile

import keras
import numpy as np

from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.layers import to_static
from keras_hybrid.testing.test_case import TestCase

# Loads a model in a fresh interpreter that cannot import keras_hybrid.
_CLEAN = """
import sys
sys.modules["keras_hybrid"] = None  # importing it now fails
import numpy as np
{body}
np.save(sys.argv[2], np.asarray(out))
"""
_KERAS_LOAD = """
import keras
import tensorflow as tf
keys = np.load(sys.argv[3], allow_pickle=True)
if keys.dtype == object:  # strings: Keras takes them as a tensor
    keys = tf.constant(keys.tolist())
out = keras.saving.load_model(sys.argv[1]).predict(keys, verbose=0)
"""
_TF_SERVE = """
import tensorflow as tf
keys = np.load(sys.argv[3], allow_pickle=True)
served = tf.saved_model.load(sys.argv[1])  # kept: it owns the variables
out = served.serve(tf.constant(keys)).numpy()
"""


def _trained_model(key_dtype, mask_zero=False):
    keys = keras.Input(shape=(3,), dtype=key_dtype)
    layer = DynamicEmbedding(
        4, capacity=6, eviction="lfu", mask_zero=mask_zero, default_value=0.25
    )
    x = keras.layers.Flatten()(layer(keys))
    model = keras.Model(keys, keras.layers.Dense(2)(x))
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    data = rng.integers(0, 12, size=(32, 3))
    if key_dtype == "string":
        data = data.astype(str).astype(object)
    model.fit(_dataset(data, np.ones((32, 2))), epochs=2, verbose=0)
    unseen = (
        np.array([[100, 101, 0]])
        if key_dtype == "int64"
        else np.array([["x", "y", "0"]], object)
    )
    return model, np.concatenate([data, unseen])


def _shared_table_model(key_dtype):
    """A model whose table reads column 0 (rank 1) and columns 1-3 (rank
    2, the mask key among them) of its keys, trained."""
    keys = keras.Input(shape=(4,), dtype=key_dtype)
    layer = DynamicEmbedding(3, capacity=20, mask_zero=True, name="shared")
    target = layer(keys[:, 0])
    history = keras.layers.GlobalAveragePooling1D()(layer(keys[:, 1:]))
    x = keras.layers.Concatenate()([target, history])
    model = keras.Model(keys, keras.layers.Dense(1)(x))
    model.compile(optimizer="sgd", loss="mse")
    data = np.random.default_rng(1).integers(0, 9, size=(16, 4))
    if key_dtype == "string":
        data = data.astype(str).astype(object)
        data[data == "0"] = ""  # the mask key
    model.fit(_dataset(data, np.ones((16, 1))), epochs=1, verbose=0)
    return model, data


def _two_tower_model():
    """A dot product of two Functional towers, each with its own table
    (a retrieval model's shape), trained."""

    def tower(name, table):
        keys = keras.Input(shape=(), dtype="int64")
        rows = DynamicEmbedding(3, capacity=20, name=table)(keys)
        return keras.Model(keys, keras.layers.Dense(3)(rows), name=name)

    keys = keras.Input(shape=(2,), dtype="int64")
    users = tower("user_tower", "users")(keys[:, 0])
    items = tower("item_tower", "items")(keys[:, 1])
    model = keras.Model(keys, keras.layers.Dot(axes=1)([users, items]))
    model.compile(optimizer="sgd", loss="mse")
    data = np.random.default_rng(2).integers(0, 9, size=(16, 2))
    model.fit(data, np.ones((16, 1)), batch_size=4, epochs=1, verbose=0)
    return model, data


def _dataset(x, y):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x.tolist(), y)).batch(4)


def _in_clean_process(body, path, keys):
    with tempfile.TemporaryDirectory() as tmp:
        keys_file = os.path.join(tmp, "keys.npy")
        out_file = os.path.join(tmp, "out.npy")
        np.save(keys_file, keys)
        env = dict(os.environ, PYTHONPATH="")
        subprocess.run(
            [
                sys.executable,
                "-c",
                _CLEAN.format(body=body),
                path,
                out_file,
                keys_file,
            ],
            check=True,
            env=env,
            cwd=tmp,
            timeout=300,
        )
        return np.load(out_file)


class SavingTest(TestCase):
    def _check(self, key_dtype, mask_zero=False):
        model, keys = _trained_model(key_dtype, mask_zero)
        want = model.predict(_as_input(keys), verbose=0)
        static = to_static(model)
        self.assertAllClose(static.predict(_as_input(keys), verbose=0), want)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.keras")
            static.save(path)
            got = _in_clean_process(_KERAS_LOAD, path, keys)
            self.assertAllClose(got, want)
            exported = os.path.join(tmp, "served")
            static.export(exported, verbose=False)
            got = _in_clean_process(_TF_SERVE, exported, keys)
            self.assertAllClose(got, want)

    def test_int_keys_load_and_serve_without_keras_hybrid(self):
        self._check("int64")

    def test_string_keys_with_mask_load_and_serve_without_keras_hybrid(self):
        self._check("string", mask_zero=True)

    def test_a_table_read_by_keys_of_two_ranks_loads_and_serves(self):
        # A target id and a masked history (ranks 1 and 2) read one
        # table; each stock layer is called on both.
        for key_dtype in ("string", "int64"):
            keras.backend.clear_session()
            model, keys = _shared_table_model(key_dtype)
            want = model.predict(_as_input(keys), verbose=0)
            static = to_static(model)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "m.keras")
                static.save(path)
                got = _in_clean_process(_KERAS_LOAD, path, keys)
                self.assertAllClose(got, want, msg=key_dtype)
                exported = os.path.join(tmp, "served")
                static.export(exported, verbose=False)
                got = _in_clean_process(_TF_SERVE, exported, keys)
                self.assertAllClose(got, want, msg=key_dtype)
            # The table keeps its name; its lookup is named after it.
            self.assertIsInstance(
                static.get_layer("shared"), keras.layers.Embedding
            )
            self.assertIn("shared_lookup", [x.name for x in static.layers])

    def test_towers_inside_the_model_are_copied_with_their_tables(self):
        model, keys = _two_tower_model()
        want = model.predict(keys, verbose=0)
        static = to_static(model)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.keras")
            static.save(path)
            got = _in_clean_process(_KERAS_LOAD, path, keys)
        self.assertAllClose(got, want)
        tower = static.get_layer("user_tower")
        self.assertIsInstance(tower.get_layer("users"), keras.layers.Embedding)

    def test_a_table_inside_a_subclassed_part_is_refused_by_name(self):
        class Tower(keras.Model):
            def __init__(self):
                super().__init__(name="subclassed_tower")
                self.table = DynamicEmbedding(2, capacity=8, name="inner")

            def call(self, keys):
                return self.table(keys)

        keys = keras.Input(shape=(), dtype="int64")
        model = keras.Model(keys, Tower()(keys))
        model.predict(np.arange(4), verbose=0)
        with self.assertRaisesRegex(
            NotImplementedError, "'inner' sits in 'subclassed_tower'"
        ):
            to_static(model)

    def test_the_dynamic_model_exports_to_stock_tensorflow(self):
        # The SavedModel reads the live keys from a MutableHashTable, a
        # stock TensorFlow op; unknown keys read the default row.
        model, keys = _trained_model("int64")
        want = model.predict(keys, verbose=0)
        with tempfile.TemporaryDirectory() as tmp:
            exported = os.path.join(tmp, "served")
            model.export(exported, verbose=False)
            got = _in_clean_process(_TF_SERVE, exported, keys)
        self.assertAllClose(got, want)

    def test_the_dynamic_model_round_trips_with_keras_hybrid(self):
        for key_dtype in ("int64", "string"):
            keras.backend.clear_session()
            model, keys = _trained_model(key_dtype)
            want = model.predict(_as_input(keys), verbose=0)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "m.keras")
                model.save(path)
                loaded = keras.saving.load_model(path)
            got = loaded.predict(_as_input(keys), verbose=0)
            self.assertAllClose(got, want, msg=key_dtype)
            self.assertEqual(
                sorted(loaded.layers[1].live_keys()[0].tolist()),
                sorted(model.layers[1].live_keys()[0].tolist()),
                key_dtype,
            )


def _as_input(keys):
    if keys.dtype == object:
        import tensorflow as tf

        return tf.constant(keys.tolist())
    return keys
