"""`checkpoint.weight_callbacks.check`: the stock callbacks that save
Keras weights files are refused for a model with dynamic tables on
several workers (the two-worker `fit` is in
`tests/dynamic/test_dynamic_multiprocess.py`), whatever form `fit`'s
callbacks take."""

import keras

from keras_hybrid.checkpoint import weight_callbacks
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase


def _model(dynamic: bool) -> keras.Model:
    keys = keras.Input((2,), dtype="int64")
    table = (
        DynamicEmbedding(4, capacity=8)
        if dynamic
        else keras.layers.Embedding(8, 4)
    )
    x = keras.layers.Flatten()(table(keys))
    return keras.Model(keys, keras.layers.Dense(1)(x))


class WeightCallbacksTest(TestCase):
    def test_weights_files_are_refused_in_any_form(self):
        model = _model(dynamic=True)
        for callback in (
            keras.callbacks.BackupAndRestore("/nowhere"),
            keras.callbacks.ModelCheckpoint(
                "/nowhere/w.weights.h5", save_weights_only=True
            ),
        ):
            name = type(callback).__name__
            for callbacks in (
                [callback],
                keras.callbacks.CallbackList([callback]),
            ):
                with self.assertRaisesRegex(NotImplementedError, name):
                    weight_callbacks.check(model, callbacks, workers=2)

    def test_what_works_passes(self):
        backup = [keras.callbacks.BackupAndRestore("/nowhere")]
        # One worker holds every key; a static table is saved whole.
        weight_callbacks.check(_model(dynamic=True), backup, workers=1)
        weight_callbacks.check(_model(dynamic=False), backup, workers=2)
        for callbacks in (
            None,
            [keras.callbacks.ModelCheckpoint("/nowhere/m.keras")],
        ):
            weight_callbacks.check(_model(dynamic=True), callbacks, workers=2)
