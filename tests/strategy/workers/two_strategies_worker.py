"""Worker that creates two strategies in one process, as notebooks do."""

import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")


def main(argv):
    del argv
    weights = []
    for _ in range(2):
        strategy = kh.HybridStrategy(timeout_seconds=30)
        x, y = models.make_data(96)
        with strategy.scope():
            model = models.build_model("sequential", seed=strategy.rank)
            models.compile_model(model, "sgd")
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        weights.append(model.get_weights())
    other = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}),
        task_type="worker",
        task_id=strategy.rank,
    )
    try:
        kh.HybridStrategy(cluster_resolver=other)
        error = None
    except ValueError as e:
        error = str(e)
    save_result(
        FLAGS.out_dir, strategy.rank, {"weights": weights, "error": error}
    )


if __name__ == "__main__":
    app.run(main)
