"""Bad checkpoints and bad arguments fail loudly, naming what is wrong."""

import os
import sys
import tempfile

import keras
import numpy as np

from keras_hybrid import checkpoint
from keras_hybrid.callbacks import ShardedCheckpoint
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.testing import TestCase

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "sparse", "workers")
)
import sparse_cases as cases  # noqa: E402


def trained(name="two_tables", vocab=None):
    if vocab is None:
        model = cases.build_model(name)
    else:
        ids = keras.Input((cases.SEQ,), dtype="int32")
        x = keras.layers.Embedding(vocab, 8, name="table_a")(ids)
        x = keras.layers.GlobalAveragePooling1D()(x)
        model = keras.Model(ids, keras.layers.Dense(3, name="head")(x))
    model.compile(optimizer="adam", loss=cases.make_loss())
    x, y = cases.make_data(64)
    model.fit(x, y, batch_size=32, verbose=0)
    return model


class CheckpointErrorsTest(TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="ckpt_errors_")
        self.model = trained()
        self.path = checkpoint.save_checkpoint(self.model, self.dir)

    def fresh(self):
        model = cases.build_model("two_tables")
        model.compile(optimizer="adam", loss=cases.make_loss())
        return model

    def test_round_trip_restores_weights_and_optimizer_state(self):
        model = self.fresh()
        manifest = checkpoint.restore_checkpoint(model, self.dir)
        self.assertEqual(manifest["step"], 2)
        for got, want in zip(
            model.get_weights(), self.model.get_weights(), strict=True
        ):
            self.assertAllClose(got, want, atol=0)
        for got, want in zip(
            model.optimizer.variables,
            self.model.optimizer.variables,
            strict=True,
        ):
            self.assertAllClose(got.numpy(), want.numpy(), atol=0)

    def test_missing_variable_is_named(self):
        model = trained("one_table")
        with self.assertRaisesRegex(ValueError, "table_b/embeddings"):
            checkpoint.restore_checkpoint(model, self.dir)

    def test_shape_mismatch_names_variable_and_both_shapes(self):
        other = trained(vocab=600)
        with self.assertRaisesRegex(
            ValueError, r"table_a/embeddings.*\(600, 8\).*\(500, 8\)"
        ):
            checkpoint.restore_checkpoint(other, self.dir)

    def _table_file(self):
        # One process without a strategy saves every variable whole; the
        # same reader checks the shard files of partitioned tables.
        path = os.path.join(self.path, "dense", "0.npy")
        self.assertTrue(os.path.exists(path))
        return path

    def test_missing_file_is_named(self):
        victim = self._table_file()
        os.remove(victim)
        with self.assertRaisesRegex(FileNotFoundError, victim):
            checkpoint.restore_checkpoint(self.fresh(), self.dir)

    def test_truncated_file_is_named(self):
        victim = self._table_file()
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) - 16)
        with self.assertRaisesRegex(ValueError, f"{victim}.*truncated"):
            checkpoint.restore_checkpoint(self.fresh(), self.dir)

    def test_damaged_file_fails_its_crc(self):
        victim = self._table_file()
        with open(victim, "r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(b"\x00\x01\x02\x03")
        with self.assertRaisesRegex(ValueError, f"{victim}.*CRC"):
            checkpoint.restore_checkpoint(self.fresh(), self.dir)

    def test_folder_without_manifest_is_not_a_checkpoint(self):
        os.remove(os.path.join(self.path, "manifest.json"))
        with self.assertRaisesRegex(FileNotFoundError, "No complete"):
            checkpoint.restore_checkpoint(self.fresh(), self.dir)

    def test_keep_prunes_old_checkpoints(self):
        x, y = cases.make_data(64)
        for _ in range(3):
            self.model.fit(x, y, batch_size=32, verbose=0)
            checkpoint.save_checkpoint(self.model, self.dir, keep=2)
        names = sorted(os.listdir(self.dir))
        self.assertEqual(names, ["ckpt-000000006", "ckpt-000000008"])

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "keep"):
            checkpoint.save_checkpoint(self.model, self.dir, keep=0)
        with self.assertRaisesRegex(ValueError, "save_freq"):
            ShardedCheckpoint(self.dir, save_freq="sometimes")
        with self.assertRaisesRegex(ValueError, "directory"):
            ShardedCheckpoint("")


class ShardFilesTest(TestCase):
    def test_scalar_and_rows_round_trip(self):
        folder = tempfile.mkdtemp()
        for value in (np.int64(7), np.arange(12.0).reshape(3, 4)):
            path = os.path.join(folder, "a.npy")
            record = shard_files.write_array(path, np.asarray(value))
            got = shard_files.read_array(path, record)
            self.assertEqual(got.shape, np.shape(value))
            self.assertAllClose(got, value, atol=0)


class ShardedCheckpointCallbackTest(TestCase):
    def test_resumes_epochs_and_state_from_the_newest_checkpoint(self):
        folder = tempfile.mkdtemp(prefix="ckpt_callback_")
        x, y = cases.make_data(64)
        first = trained()
        first.fit(
            x,
            y,
            batch_size=32,
            epochs=2,
            verbose=0,
            callbacks=[ShardedCheckpoint(folder)],
        )
        keras.utils.set_random_seed(5)
        second = cases.build_model("two_tables")
        second.compile(optimizer="adam", loss=cases.make_loss())
        history = second.fit(
            x,
            y,
            batch_size=32,
            epochs=3,
            verbose=0,
            callbacks=[ShardedCheckpoint(folder)],
        )
        self.assertEqual(len(history.history["loss"]), 1)  # epoch 3 only
        first.fit(x, y, batch_size=32, epochs=1, verbose=0)
        for got, want in zip(
            second.get_weights(), first.get_weights(), strict=True
        ):
            self.assertAllClose(got, want)
