"""Pool scenarios: one saving or restoring scenario under `HybridStrategy`.

Run by the tests in `tests/checkpoint` on the shared pools. The model is
`sparse_cases`' two-table model (two partitioned tables and a dense head)
with Adam, trained on the same global batches whatever the worker count,
so runs on different worker counts can be compared.

Phases (`run(phase, ...)`):
- `export`: train, then `model.save`, `save_weights`, `export` into
  `folder`; return predictions and weights.
- `save`: train `steps` steps, `strategy.save_checkpoint(folder)`, train
  `steps` more; return the weights at both points.
- `resume`: restore `folder` and train the second `steps` steps.
- `callbacks`: `ModelCheckpoint(save_best_only)` and `BackupAndRestore`:
  a run interrupted after `epochs` - 1 epochs, resumed, and compared
  with an uninterrupted one.
- `warm_start`: `keras.models.load_model(folder/plain.keras)` in the
  strategy's scope.
- `tf_checkpoint`: a `tf.train.Checkpoint` written on every rank (the
  chief's into `folder`), restored into a new model.
A rank killed in the middle of a save is `checkpoint_worker.py`'s.
"""

import os
import sys
import tempfile

import keras
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.sparse import sharded_table
from keras_hybrid.testing import SPARSE_TABLES

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "..", "sparse", "workers")
)
import sparse_cases as cases  # noqa: E402

PHASES = (
    "export",
    "save",
    "resume",
    "callbacks",
    "warm_start",
    "tf_checkpoint",
)


def run(phase: str, folder: str, steps: int = 5, epochs: int = 3) -> dict:
    """Runs `phase` of `PHASES` on a strategy of its own.

    Args:
        phase: String. One of `PHASES`.
        folder: String. Checkpoint or export folder.
        steps: Int. Steps of each training segment.
        epochs: Int. Epochs of the callbacks scenario.
    """
    if phase not in PHASES:
        raise ValueError(f"`phase` must be one of {PHASES}: {phase!r}")
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=SPARSE_TABLES
    ) as strategy:
        return globals()[phase](strategy, folder, steps, epochs)


BATCH = 48  # divides evenly over 1, 2, 3 and 4 workers
SEGMENT_SEED = 11


def build(strategy, name="two_tables"):
    keras.utils.set_random_seed(cases.SEED)  # every model starts the same
    with strategy.scope():
        model = cases.build_model(name)
        model.compile(
            optimizer=keras.optimizers.Adam(0.01), loss=cases.make_loss()
        )
    return model


def segment(index: int, steps: int):
    """Global batches of training segment `index` (same on every rank)."""
    x, y = cases.make_data(steps * BATCH * 2, seed=SEGMENT_SEED)
    n = steps * BATCH
    return x[index * n : (index + 1) * n], y[index * n : (index + 1) * n]


def train(model, index: int, steps: int) -> None:
    x, y = segment(index, steps)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


def probe():
    return cases.make_data(BATCH, seed=99)[0]


def export(strategy, folder, steps, epochs):
    # Many small blocks, so streaming a table into files is really tested.
    block_bytes = sharded_table.BLOCK_BYTES
    sharded_table.BLOCK_BYTES = 1024
    try:
        model = build(strategy)
        train(model, 0, steps)
        model.save(os.path.join(folder, "model.keras"))
        model.save_weights(os.path.join(folder, "model.weights.h5"))
        model.export(os.path.join(folder, "saved_model"), verbose=False)
    finally:
        sharded_table.BLOCK_BYTES = block_bytes
    return {
        "weights": model.get_weights(),
        "predictions": model.predict(probe(), batch_size=BATCH, verbose=0),
        "listing": sorted(os.listdir(folder)),
    }


def save(strategy, folder, steps, epochs):
    model = build(strategy)
    train(model, 0, steps)
    at_save = model.get_weights()
    path = strategy.save_checkpoint(model, folder)
    train(model, 1, steps)
    return {"at_save": at_save, "final": model.get_weights(), "path": path}


def resume(strategy, folder, steps, epochs):
    model = build(strategy)
    manifest = strategy.restore_checkpoint(model, folder)
    restored = model.get_weights()
    train(model, 1, steps)
    tables = [
        v
        for v in model.weights
        if isinstance(v.value, sharded_table.ShardedTable)
    ]
    return {
        "restored": restored,
        "final": model.get_weights(),
        "step": manifest["step"],
        "saved_by": manifest["num_workers"],
        "local_rows": {v.path: tuple(v.value.shape) for v in tables},
    }


class _Interrupt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise RuntimeError("simulated interruption")


def callbacks(strategy, folder, steps, epochs):
    x, y = segment(0, steps)
    backup = os.path.join(folder, "backup")
    best = os.path.join(folder, "best_{epoch}.weights.h5")

    def fit(model, extra, initial_epoch=0):
        return model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=epochs,
            shuffle=False,
            verbose=0,
            callbacks=[
                keras.callbacks.BackupAndRestore(backup),
                keras.callbacks.ModelCheckpoint(
                    best,
                    monitor="loss",
                    save_best_only=True,
                    save_weights_only=True,
                ),
                *extra,
            ],
        )

    interrupted = build(strategy)
    try:
        fit(interrupted, [_Interrupt(epochs - 1)])
    except RuntimeError as e:
        assert "simulated interruption" in str(e), e
    resumed = build(strategy)
    history = fit(resumed, [])
    reference = build(strategy)
    reference.fit(
        x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0
    )
    return {
        "resumed": resumed.get_weights(),
        "reference": reference.get_weights(),
        "resumed_epochs": len(history.history["loss"]),
        "listing": sorted(os.listdir(folder)),
    }


def warm_start(strategy, folder, steps, epochs):
    with strategy.scope():
        model = keras.models.load_model(os.path.join(folder, "plain.keras"))
    return {
        "kinds": {v.path: strategy.plan[v.path].kind for v in model.weights},
        "weights": model.get_weights(),
        "predictions": model.predict(probe(), batch_size=BATCH, verbose=0),
    }


def tf_checkpoint(strategy, folder, steps, epochs):
    """A custom loop's checkpoint (TF's multi-worker tutorials): every rank
    writes a `tf.train.Checkpoint` of the model and its optimizer, the
    chief into `folder`, the others into folders of their own; a new
    model restores the chief's, and both train one more segment."""
    model = build(strategy)
    train(model, 0, steps)
    at_save = model.get_weights()
    own = folder if strategy.is_chief else tempfile.mkdtemp()
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
        os.path.join(own, "ckpt")
    )
    restored = build(strategy)
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(
        os.path.join(folder, "ckpt")
    ).expect_partial()
    at_restore = restored.get_weights()
    train(model, 1, steps)
    train(restored, 1, steps)
    return {
        "path": path,
        "at_save": at_save,
        "at_restore": at_restore,
        "final": model.get_weights(),
        "restored_final": restored.get_weights(),
    }
