"""Worker: rank 1 dies (SIGKILL) in the middle of a checkpoint save.

Run by `test_callbacks_multiprocess.py` through `keras-hybrid-run`, since
the dying worker is what it tests: train `STEPS` steps and save into
`--dir` (each rank saves its weights then), train more, and rank 1 is
killed after the first file of the second save. The other scenarios run
on the shared pools (`checkpoint_scenarios.py`).
"""

import os
import signal

import checkpoint_scenarios as scenarios  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("dir", None, "Checkpoint folder.")

STEPS = 5


def crash(strategy):
    model = scenarios.build(strategy)
    scenarios.train(model, 0, STEPS)
    strategy.save_checkpoint(model, FLAGS.dir)
    save_result(FLAGS.out_dir, strategy.rank, {"at_save": model.get_weights()})
    scenarios.train(model, 1, STEPS)
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
    crash(strategy)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "dir"])
    app.run(main)
