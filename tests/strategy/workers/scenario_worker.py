"""Worker for single scenarios of `fit`, `predict` and failures.

Each `--case` trains a small model and saves what this rank saw; the test
computes the one-process reference with `scenarios.run_case(case, None)`.
"""

import os
import signal

import keras
import scenarios  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_enum("case", None, scenarios.CASES, "Scenario to run.")
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")
flags.DEFINE_integer("die_rank", -1, "Rank that SIGKILLs itself mid-fit.")
flags.DEFINE_string(
    "indexed_slices", None, "HybridStrategy(indexed_slices=...) if given."
)


class _DieMidEpoch(keras.callbacks.Callback):
    def __init__(self, rank):
        super().__init__()
        self._rank = rank

    def on_train_batch_end(self, batch, logs=None):
        if batch == 2 and self._rank == FLAGS.die_rank:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv):
    del argv
    # The embedding case checks the stock path for a table kept dense:
    # its IndexedSlices all-gathered (the cost rule could densify it).
    extra = {}
    if FLAGS.case == "embedding":
        extra = {
            "variable_kinds": {".*embeddings": "dense"},
            "indexed_slices": "allgather",
        }
    if FLAGS.indexed_slices:
        extra = {
            "variable_kinds": {".*embeddings": "dense"},
            "indexed_slices": FLAGS.indexed_slices,
        }
    strategy = kh.HybridStrategy(timeout_seconds=FLAGS.timeout, **extra)
    result = scenarios.run_case(
        FLAGS.case, strategy, callbacks=[_DieMidEpoch(strategy.rank)]
    )
    save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "case"])
    app.run(main)
