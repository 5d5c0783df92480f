"""Pool scenario: two strategies in one process, the first still open when
the second starts, as notebooks do; then a third on another cluster."""

import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.testing import models


def two_strategies() -> dict:
    strategies, weights = [], []
    try:
        for _ in range(2):
            strategy = kh.HybridStrategy(timeout_seconds=30)
            strategies.append(strategy)
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
    finally:
        for strategy in reversed(strategies):
            strategy.close()
    return {"weights": weights, "error": error}
