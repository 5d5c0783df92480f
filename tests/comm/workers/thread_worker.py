"""Worker: 300 training-step-like calls of two in-graph all-reduces with a
300 s timeout; saves this process's thread count before and after."""

import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")


def _threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("no Threads line in /proc/self/status")


def main(argv):
    del argv
    strategy = kh.HybridStrategy(timeout_seconds=300)
    comm = strategy.communicator

    @tf.function
    def step(x):
        return comm.all_reduce([x, x * 2])

    step(tf.ones([4]))  # trace
    before = _threads()
    for _ in range(300):
        out = step(tf.ones([4]))
    save_result(
        FLAGS.out_dir,
        strategy.rank,
        {"before": before, "after": _threads(), "sum": out[0].numpy()},
    )


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
