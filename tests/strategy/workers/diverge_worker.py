"""Worker whose ranks issue different collectives: must time out, not hang."""

import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh

flags.DEFINE_string("out_dir", None, "Unused; the launch helper passes it.")


def main(argv):
    del argv
    strategy = kh.HybridStrategy(timeout_seconds=5)
    rows = 3 if strategy.rank == 0 else 4  # diverged shapes
    strategy.communicator.all_reduce([tf.ones([rows])])


if __name__ == "__main__":
    app.run(main)
