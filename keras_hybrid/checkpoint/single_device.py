"""A single-device copy of a model trained under `HybridStrategy`."""

import keras
import tensorflow as tf


def copy_model(model: keras.Model, build_copy: bool = True):
    """Returns a copy of `model` with its full weights, outside any strategy.

    Every worker must call it at the same time: the weights of partitioned
    tables are gathered (a collective). The copy's variables are ordinary
    single-device variables, so it can be exported or saved like any Keras
    model.

    Args:
        model: A built Keras model.
        build_copy: Boolean. If `False`, only take part in gathering the
            weights (for workers that will not use the copy) and return
            `None`. Defaults to `True`.

    Returns:
        A `keras.Model` of the same config with the same weights, or `None`.

    Raises:
        RuntimeError: If called inside a strategy's `scope()` (the copy's
            variables would be created under that strategy again).
        ValueError: If `model` is not built.
    """
    if tf.distribute.has_strategy():
        raise RuntimeError(
            "A single-device copy of the model (used by `model.export`) "
            "must be made outside `strategy.scope()`: call it after the "
            "`with strategy.scope():` block."
        )
    if not model.built:
        raise ValueError(
            f"Model {model.name!r} is not built: call it on a batch or "
            "`fit` it before exporting."
        )
    weights = model.get_weights()
    if not build_copy:
        return None
    copy = keras.models.clone_model(model)
    copy.set_weights(weights)
    return copy
