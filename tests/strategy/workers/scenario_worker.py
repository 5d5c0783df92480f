"""Worker for the scenarios whose launch is under test: a rank that
SIGKILLs itself mid-fit (`--die_rank`), with the launcher and without.

Each `--case` trains a small model and saves what this rank saw; the
other scenarios run on the shared pool (`scenarios.on_workers`).
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


class _DieMidEpoch(keras.callbacks.Callback):
    def __init__(self, rank):
        super().__init__()
        self._rank = rank

    def on_train_batch_end(self, batch, logs=None):
        if batch == 2 and self._rank == FLAGS.die_rank:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv):
    del argv
    options = scenarios.strategy_options(FLAGS.case)
    strategy = kh.HybridStrategy(timeout_seconds=FLAGS.timeout, **options)
    result = scenarios.run_case(
        FLAGS.case, strategy, callbacks=[_DieMidEpoch(strategy.rank)]
    )
    save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "case"])
    app.run(main)
