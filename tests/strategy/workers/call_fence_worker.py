"""Worker: calls that differ between ranks, and a rank that exits.

`predict` on every rank runs on the shared pool (`call_cases.on_workers`).
Phases (`--phase`):
- `fence`: ranks make different collective calls, nested calls, then
  rank 0 calls alone (rank 1 alive, then exited); errors are caught and
  saved, and every rank exits 0.
- `uncaught`: the issue's Horovod-style script: `get_weights` on rank 0
  only, then `model.save` on every rank; nothing is caught.
- `in_fit`: a callback reads the weights on rank 0 only, inside `fit`;
  nothing is caught.
"""

import os
import pickle
import time

import call_cases  # noqa: I001  (sits beside this script)
import keras
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.comm import call_fence
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("dir", None, "Folder for logs and saved files.")
flags.DEFINE_enum("phase", None, ["fence", "uncaught", "in_fit"], "Phase.")
flags.DEFINE_float("timeout", 30, "HybridStrategy timeout_seconds.")


def _error(fn) -> str | None:
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def fence(strategy):
    rank = strategy.rank
    model = call_cases.build(strategy)
    ids = call_cases.make_ids()
    save_path = os.path.join(FLAGS.dir, "model.keras")
    table = model.get_layer("table").embeddings
    out = {}
    # The script: a read on rank 0 only, then a save everywhere.
    out["get_weights_vs_save"] = _error(
        model.get_weights if rank == 0 else lambda: model.save(save_path)
    )
    out["predict_vs_evaluate"] = _error(
        (lambda: model.predict(ids, verbose=0))
        if rank == 0
        else (lambda: model.evaluate(ids, ids[:, 0] % 3, verbose=0))
    )
    out["numpy_vs_layer"] = _error(
        table.numpy if rank == 0 else model.get_layer("table").get_weights
    )
    # Collectives still work after a mismatch; nested calls fence once.
    fence_ = call_fence.active()
    counts = {}
    for name, call in (
        ("save", lambda: model.save(save_path)),
        ("save_weights", lambda: model.save_weights(save_path + ".weights.h5")),
        (
            "fit",
            lambda: model.fit(
                ids,
                ids[:, 0] % 3,
                batch_size=16,
                validation_data=(ids, ids[:, 0] % 3),
                verbose=0,
            ),
        ),
        ("checkpoint", lambda: strategy.save_checkpoint(model, FLAGS.dir)),
    ):
        before = fence_.count
        call()
        counts[name] = fence_.count - before
    out["counts"] = counts
    out["weights"] = model.get_weights()
    # Rank 0 calls alone: rank 1 is alive (not in a collective), then gone.
    done = os.path.join(FLAGS.dir, "lone_done")
    if rank == 0:
        start = time.monotonic()
        out["lone_alive"] = _error(lambda: model.predict(ids, verbose=0))
        out["lone_alive_seconds"] = time.monotonic() - start
        open(done, "w").close()
        while not _exited(FLAGS.out_dir):
            time.sleep(0.2)
        start = time.monotonic()
        out["lone_exited"] = _error(model.get_weights)
        out["lone_exited_seconds"] = time.monotonic() - start
    else:
        out["pid"] = os.getpid()
        while not os.path.exists(done):
            time.sleep(0.2)
    return out


def _exited(out_dir) -> bool:
    """Whether rank 1 saved its result and its process is gone."""
    path = os.path.join(out_dir, "rank1.pkl")
    if not os.path.exists(path):
        return False
    with open(path, "rb") as f:
        pid = pickle.load(f)["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def uncaught(strategy):
    model = call_cases.build(strategy)
    if strategy.rank == 0:
        model.get_weights()
    model.save(os.path.join(FLAGS.dir, "model.keras"))
    return {"unreachable": True}


class _ChiefReads(keras.callbacks.Callback):
    def __init__(self, strategy):
        super().__init__()
        self.strategy = strategy

    def on_epoch_end(self, epoch, logs=None):
        if self.strategy.is_chief:
            self.model.get_weights()


def in_fit(strategy):
    model = call_cases.build(strategy)
    ids = call_cases.make_ids()
    model.fit(
        ids,
        ids[:, 0] % 3,
        batch_size=16,
        epochs=3,
        verbose=0,
        callbacks=[_ChiefReads(strategy)],
    )
    return {"unreachable": True}


def main(argv):
    del argv
    # Tables partitioned: reads of them are the collectives under test.
    strategy = kh.HybridStrategy(
        timeout_seconds=FLAGS.timeout, variable_kinds=SPARSE_TABLES
    )
    result = globals()[FLAGS.phase](strategy)
    save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "dir", "phase"])
    app.run(main)
