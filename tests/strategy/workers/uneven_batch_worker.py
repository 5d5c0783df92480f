"""Worker: `uneven_batch_scenarios.train_both` as one plain process, the
reference of `test_uneven_batches_multiprocess.py`."""

import os
import sys

from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.models import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
import uneven_batch_scenarios as scenarios  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_integer("batch_size", 250, "Global batch size.")
flags.DEFINE_integer("num_samples", 700, "Samples.")


def main(argv):
    del argv
    strategy = kh.HybridStrategy(variable_kinds=SPARSE_TABLES)
    results = scenarios.train_both(
        strategy, FLAGS.batch_size, FLAGS.num_samples
    )
    save_result(FLAGS.out_dir, strategy.rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
