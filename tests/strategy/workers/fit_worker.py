"""Worker: trains every model kind with SGD and Adam, saves what it saw.

Run by tests through `keras-hybrid-run`. Ranks seed differently on purpose:
the strategy must broadcast rank 0's initial values.
"""

import json

from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("configs", "[]", "JSON list of [kind, optimizer].")
flags.DEFINE_integer("epochs", 3, "Epochs.")
flags.DEFINE_integer("batch_size", 48, "Global batch size.")
flags.DEFINE_integer("num_samples", 240, "Samples.")
flags.DEFINE_integer("accumulation", 0, "gradient_accumulation_steps.")
flags.DEFINE_boolean("dataset", False, "Feed a tf.data.Dataset.")
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")


def train_one(strategy, kind, optimizer):
    x, y = models.make_data(FLAGS.num_samples)
    extra = {}
    if FLAGS.accumulation:
        extra["gradient_accumulation_steps"] = FLAGS.accumulation
    with strategy.scope():
        model = models.build_model(kind, seed=100 + strategy.rank)
        models.compile_model(model, optimizer, **extra)
    before = strategy.communicator.stats.snapshot()
    if FLAGS.dataset:
        import tensorflow as tf

        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(
            FLAGS.batch_size
        )
        history = model.fit(data, epochs=FLAGS.epochs, verbose=0)
    else:
        history = model.fit(
            x,
            y,
            batch_size=FLAGS.batch_size,
            epochs=FLAGS.epochs,
            shuffle=False,
            verbose=0,
        )
    comm = strategy.communicator.stats.delta(before)
    evaluation = model.evaluate(x, y, batch_size=FLAGS.batch_size, verbose=0)
    return {
        "weights": model.get_weights(),
        "history": history.history,
        "evaluate": evaluation,
        "comm": comm,
    }


def main(argv):
    del argv
    strategy = kh.HybridStrategy(timeout_seconds=FLAGS.timeout)
    results = {
        f"{kind}/{opt}": train_one(strategy, kind, opt)
        for kind, opt in json.loads(FLAGS.configs)
    }
    results["engine"] = strategy.engine
    save_result(FLAGS.out_dir, strategy.rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)
