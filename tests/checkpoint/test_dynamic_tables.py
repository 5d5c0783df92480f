"""Dynamic tables in a sharded checkpoint, in one process: a round trip,
and checkpoints that must not be read (cut short, or a file missing)."""

import os
import shutil
import tempfile

import keras
import numpy as np

from keras_hybrid import checkpoint
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase


def _model():
    keys = keras.Input(shape=(2,), dtype="int64")
    layer = DynamicEmbedding(3, capacity=8, admit_after=2, name="dyn")
    x = keras.layers.Flatten()(layer(keys))
    model = keras.Model(keys, keras.layers.Dense(1)(x))
    model.compile(optimizer="adam", loss="mse")
    return model, layer


class DynamicCheckpointTest(TestCase):
    def setUp(self):
        super().setUp()
        self.directory = tempfile.mkdtemp(prefix="dynamic_ckpt_")
        self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)
        self.model, self.layer = _model()
        keys = np.array([[1, 2], [3, 1], [1, 4], [5, 2]], np.int64)
        self.model.fit(keys, np.ones([4, 1]), batch_size=2, verbose=0)
        self.path = checkpoint.save_checkpoint(self.model, self.directory)

    def _state(self, model, layer):
        keys, rows = layer.live_keys()
        order = np.argsort(keys)
        slots = [
            v.numpy()[rows][order]
            for v in model.optimizer.variables
            if v.name.startswith("dyn_embeddings_")
        ]
        waiting = layer.table.counts.export()
        return {
            "keys": keys[order],
            "rows": layer.embeddings.numpy()[rows][order],
            "slots": slots,
            "waiting": sorted(waiting[0].numpy().tolist()),
            "stats": layer.stats(),
        }

    def test_round_trip(self):
        want = self._state(self.model, self.layer)
        self.assertGreater(len(want["keys"]), 0)
        self.assertGreater(len(want["waiting"]), 0)
        self.assertEqual(len(want["slots"]), 2)  # Adam: m and v
        model, layer = _model()
        model(np.zeros([1, 2], np.int64))
        checkpoint.restore_checkpoint(model, self.directory)
        got = self._state(model, layer)
        np.testing.assert_array_equal(got["keys"], want["keys"])
        np.testing.assert_array_equal(got["rows"], want["rows"])
        for g, w in zip(got["slots"], want["slots"], strict=True):
            np.testing.assert_array_equal(g, w)
        self.assertEqual(got["waiting"], want["waiting"])
        self.assertEqual(got["stats"], want["stats"])

    def test_a_save_cut_short_is_never_read(self):
        # The chief's files alone, without the manifest that only comes
        # once every worker has written: not a checkpoint.
        os.remove(os.path.join(self.path, "manifest.json"))
        self.assertIsNone(checkpoint.latest_checkpoint(self.directory))

    def test_a_missing_dynamic_file_is_an_error(self):
        shard = os.path.join(self.path, "shard-00000-of-00001")
        os.remove(os.path.join(shard, "dynamic-0-keys.npy"))
        model, _ = _model()
        model(np.zeros([1, 2], np.int64))
        with self.assertRaisesRegex(FileNotFoundError, "dynamic-0-keys"):
            checkpoint.restore_checkpoint(model, self.directory)
