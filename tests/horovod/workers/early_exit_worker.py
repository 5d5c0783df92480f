"""Worker whose rank 1 exits while rank 0 waits in an all-reduce: rank 0
must fail with an error, not hang. Rank 0 prints how long its all-reduce
waited."""

import sys
import time

import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh

flags.DEFINE_string("out_dir", None, "Unused; the launch helper passes it.")
flags.DEFINE_float("delay", 3, "Seconds rank 1 waits before it exits.")


def main(argv):
    del argv
    strategy = kh.HybridStrategy()
    if strategy.rank == 1:
        time.sleep(flags.FLAGS.delay)
        return
    start = time.monotonic()
    try:
        strategy.communicator.all_reduce([tf.ones([3])])
    finally:
        # The test bounds this, not the launch, which a loaded machine
        # slows down.
        print(
            f"all-reduce ended after {time.monotonic() - start:.1f} s",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
