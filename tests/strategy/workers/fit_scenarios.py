"""Pool scenario: trains every model kind with SGD and Adam, returns what
this rank saw.

Ranks seed differently on purpose: the strategy must broadcast rank 0's
initial values.
"""

import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.testing import models


def train(
    configs: list,
    accumulation: int = 0,
    dataset: bool = False,
    epochs: int = 3,
    batch_size: int = 48,
    num_samples: int = 240,
) -> dict:
    """Trains each [kind, optimizer] of `configs` on one strategy.

    Args:
        configs: List of [kind, optimizer] pairs.
        accumulation: Int. `gradient_accumulation_steps`, 0 for none.
        dataset: Boolean. Feed a `tf.data.Dataset` instead of arrays.
        epochs: Int. Epochs.
        batch_size: Int. Global batch size.
        num_samples: Int. Samples.
    """
    with kh.HybridStrategy(timeout_seconds=60) as strategy:
        results = {
            f"{kind}/{opt}": _train_one(
                strategy,
                kind,
                opt,
                accumulation,
                dataset,
                epochs,
                batch_size,
                num_samples,
            )
            for kind, opt in configs
        }
        results["engine"] = strategy.engine
        return results


def _train_one(
    strategy, kind, optimizer, accumulation, dataset, epochs, batch, samples
):
    x, y = models.make_data(samples)
    extra = {}
    if accumulation:
        extra["gradient_accumulation_steps"] = accumulation
    with strategy.scope():
        model = models.build_model(kind, seed=100 + strategy.rank)
        models.compile_model(model, optimizer, **extra)
    before = strategy.communicator.stats.snapshot()
    if dataset:
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
        history = model.fit(data, epochs=epochs, verbose=0)
    else:
        history = model.fit(
            x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0
        )
    comm = strategy.communicator.stats.delta(before)
    evaluation = model.evaluate(x, y, batch_size=batch, verbose=0)
    return {
        "weights": model.get_weights(),
        "history": history.history,
        "evaluate": evaluation,
        "comm": comm,
    }
