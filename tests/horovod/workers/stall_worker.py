"""Worker whose rank 1 never joins rank 0's all-reduce: with the Horovod
engine the stall timeout must stop the job, not hang it."""

import time

import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh

flags.DEFINE_string("out_dir", None, "Unused; the launch helper passes it.")
flags.DEFINE_float("timeout", 5, "Collective timeout in seconds.")
flags.DEFINE_float("sleep", 120, "How long rank 1 stays away.")


def main(argv):
    del argv
    strategy = kh.HybridStrategy(timeout_seconds=flags.FLAGS.timeout)
    if strategy.rank == 1:
        time.sleep(flags.FLAGS.sleep)
        return
    strategy.communicator.all_reduce([tf.ones([3])])


if __name__ == "__main__":
    app.run(main)
