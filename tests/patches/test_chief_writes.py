"""On a rank other than 0, Keras' saving and the stock callbacks write
nothing where the user asked (the 2-worker tests show the chief does)."""

import dataclasses
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np

from keras_hybrid.patches import chief_summaries
from keras_hybrid.patches import chief_writes
from keras_hybrid.patches import h5_streaming
from keras_hybrid.patches import registry
from keras_hybrid.testing import TestCase


class _SumOfOne:
    """The all-reduce of a job whose other ranks all agree (flag 0)."""

    def all_reduce(self, tensors, op="sum", path="dense"):
        del op, path
        return list(tensors)


@dataclasses.dataclass
class _Rank:
    rank: int
    size: int = 2
    communicator: object = dataclasses.field(default_factory=_SumOfOne)

    @property
    def is_chief(self):
        return self.rank == 0


def install_chief_writes(strategy):
    """The sets that keep files to the chief, as a strategy installs them."""
    return registry.installing(
        strategy,
        chief_summaries.PATCHES,
        h5_streaming.PATCHES,
        chief_writes.PATCHES,
    )


def small_model():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2, name="d")]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


class ChiefWritesTest(TestCase):
    def install(self, rank):
        self.enterContext(install_chief_writes(_Rank(rank)))

    def test_other_rank_writes_nothing(self):
        self.install(rank=1)
        folder = tempfile.mkdtemp()
        model = small_model()
        x, y = np.ones((8, 3)), np.ones((8, 2))
        model.fit(
            x,
            y,
            epochs=2,
            verbose=0,
            callbacks=[
                keras.callbacks.BackupAndRestore(
                    os.path.join(folder, "backup"), delete_checkpoint=False
                ),
                keras.callbacks.ModelCheckpoint(
                    os.path.join(folder, "m_{epoch}.keras")
                ),
                keras.callbacks.CSVLogger(os.path.join(folder, "log.csv")),
            ],
        )
        model.save(os.path.join(folder, "m.keras"))
        model.save_weights(os.path.join(folder, "w.weights.h5"))
        self.assertEqual(os.listdir(folder), [])

    def test_chief_writes_everything(self):
        self.install(rank=0)
        folder = tempfile.mkdtemp()
        model = small_model()
        model.fit(
            np.ones((8, 3)),
            np.ones((8, 2)),
            verbose=0,
            callbacks=[
                keras.callbacks.BackupAndRestore(
                    os.path.join(folder, "backup"), delete_checkpoint=False
                ),
                keras.callbacks.CSVLogger(os.path.join(folder, "log.csv")),
            ],
        )
        model.save_weights(os.path.join(folder, "w.weights.h5"))
        self.assertEqual(
            sorted(os.listdir(folder)), ["backup", "log.csv", "w.weights.h5"]
        )
        loaded = small_model()
        loaded.load_weights(os.path.join(folder, "w.weights.h5"))
        for got, want in zip(
            loaded.get_weights(), model.get_weights(), strict=True
        ):
            self.assertAllClose(got, want, atol=0)

    def test_uninstall_restores_keras(self):
        from keras.src.callbacks import backup_and_restore
        from keras.src.saving import saving_api

        before = (saving_api.save_model, backup_and_restore.file_utils)
        with install_chief_writes(_Rank(1)):
            self.assertIsNot(saving_api.save_model, before[0])
        self.assertIs(saving_api.save_model, before[0])
        self.assertIs(backup_and_restore.file_utils, before[1])

    def test_a_rank_that_leaves_fit_early_leaves_no_scratch_folder(self):
        """An elastic shrink retires a rank with `SystemExit` inside `fit`,
        so its `CSVLogger` never closes its scratch file: the process's
        scratch root goes at exit anyway."""
        folder, tmp = tempfile.mkdtemp(), tempfile.mkdtemp()
        child = f"""
import os, sys, keras, numpy as np
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_chief_writes import _Rank, small_model
from test_chief_writes import install_chief_writes
class Leave(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(os.listdir({tmp!r}), flush=True)
        raise SystemExit(0)

log = keras.callbacks.CSVLogger(os.path.join({folder!r}, "log.csv"))
with install_chief_writes(_Rank(1)):
    small_model().fit(np.ones((8, 3)), np.ones((8, 2)), verbose=0,
                      callbacks=[log, Leave()])
"""
        done = subprocess.run(
            [sys.executable, "-c", child],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "TMPDIR": tmp},
        )
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        # The file was open in the scratch folder when the rank left ...
        self.assertIn("keras_hybrid_scratch_", done.stdout)
        # ... and neither it nor anything in the user's folder is left.
        self.assertEqual(os.listdir(tmp), [])
        self.assertEqual(os.listdir(folder), [])
