"""Worker: one saving or restoring scenario under `HybridStrategy`.

Run by the tests in `tests/checkpoint` through `keras-hybrid-run`. The
model is `sparse_cases`' two-table model (two partitioned tables and a
dense head) with Adam, trained on the same global batches whatever the
worker count, so runs on different worker counts can be compared.

Phases (`--phase`):
- `export`: train, then `model.save`, `save_weights`, `export` into
  `--dir`; save predictions and weights.
- `save`: train `--steps` steps, `strategy.save_checkpoint(--dir)`, train
  `--steps` more; save the weights at both points.
- `resume`: restore `--dir` and train the second `--steps` steps.
- `callbacks`: `ModelCheckpoint(save_best_only)` and `BackupAndRestore`:
  a run interrupted after `--epochs` - 1 epochs, resumed, and compared
  with an uninterrupted one.
- `warm_start`: `keras.models.load_model(--dir/plain.keras)` in the
  strategy's scope.
- `crash`: save at `--steps`, train more, and rank 1 dies (SIGKILL) in the
  middle of the second save.
"""

import os
import signal
import sys

import keras
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.sparse import sharded_table
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "..", "sparse", "workers")
)
import sparse_cases as cases  # noqa: E402

from keras_hybrid.testing import SPARSE_TABLES

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("dir", None, "Checkpoint or export folder.")
flags.DEFINE_enum(
    "phase",
    None,
    ["export", "save", "resume", "callbacks", "warm_start", "crash"],
    "Scenario.",
)
flags.DEFINE_integer("steps", 5, "Steps of each training segment.")
flags.DEFINE_integer("epochs", 3, "Epochs of the callbacks scenario.")

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


def segment(index: int):
    """Global batches of training segment `index` (same on every rank)."""
    x, y = cases.make_data(FLAGS.steps * BATCH * 2, seed=SEGMENT_SEED)
    n = FLAGS.steps * BATCH
    return x[index * n : (index + 1) * n], y[index * n : (index + 1) * n]


def train(model, index: int) -> None:
    x, y = segment(index)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


def probe():
    return cases.make_data(BATCH, seed=99)[0]


def export(strategy):
    # Many small blocks, so streaming a table into files is really tested.
    sharded_table.BLOCK_BYTES = 1024
    model = build(strategy)
    train(model, 0)
    model.save(os.path.join(FLAGS.dir, "model.keras"))
    model.save_weights(os.path.join(FLAGS.dir, "model.weights.h5"))
    model.export(os.path.join(FLAGS.dir, "saved_model"), verbose=False)
    return {
        "weights": model.get_weights(),
        "predictions": model.predict(probe(), batch_size=BATCH, verbose=0),
        "listing": sorted(os.listdir(FLAGS.dir)),
    }


def save(strategy):
    model = build(strategy)
    train(model, 0)
    at_save = model.get_weights()
    path = strategy.save_checkpoint(model, FLAGS.dir)
    train(model, 1)
    return {"at_save": at_save, "final": model.get_weights(), "path": path}


def resume(strategy):
    model = build(strategy)
    manifest = strategy.restore_checkpoint(model, FLAGS.dir)
    restored = model.get_weights()
    train(model, 1)
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


def callbacks(strategy):
    x, y = segment(0)
    backup = os.path.join(FLAGS.dir, "backup")
    best = os.path.join(FLAGS.dir, "best_{epoch}.weights.h5")

    def fit(model, extra, initial_epoch=0):
        return model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=FLAGS.epochs,
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
        fit(interrupted, [_Interrupt(FLAGS.epochs - 1)])
    except RuntimeError as e:
        assert "simulated interruption" in str(e), e
    resumed = build(strategy)
    history = fit(resumed, [])
    reference = build(strategy)
    reference.fit(
        x, y, batch_size=BATCH, epochs=FLAGS.epochs, shuffle=False, verbose=0
    )
    return {
        "resumed": resumed.get_weights(),
        "reference": reference.get_weights(),
        "resumed_epochs": len(history.history["loss"]),
        "listing": sorted(os.listdir(FLAGS.dir)),
    }


def warm_start(strategy):
    with strategy.scope():
        model = keras.models.load_model(os.path.join(FLAGS.dir, "plain.keras"))
    return {
        "kinds": {v.path: strategy.plan[v.path].kind for v in model.weights},
        "weights": model.get_weights(),
        "predictions": model.predict(probe(), batch_size=BATCH, verbose=0),
    }


def crash(strategy):
    model = build(strategy)
    train(model, 0)
    strategy.save_checkpoint(model, FLAGS.dir)
    save_result(FLAGS.out_dir, strategy.rank, {"at_save": model.get_weights()})
    train(model, 1)
    if strategy.rank == 1:
        write_blocks = shard_files.write_blocks

        def die_after_first_file(*args, **kwargs):
            record = write_blocks(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
            return record

        # Rank 1 writes only table rows, block by block.
        shard_files.write_blocks = die_after_first_file
    strategy.save_checkpoint(model, FLAGS.dir)
    raise AssertionError("the second save must not complete")


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=SPARSE_TABLES
    )
    result = globals()[FLAGS.phase](strategy)
    save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "dir", "phase"])
    app.run(main)
