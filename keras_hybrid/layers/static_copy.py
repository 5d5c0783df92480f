"""`to_static`: a stock Keras model equivalent to one with dynamic tables."""

import keras

from keras_hybrid.layers.dynamic_embedding import DynamicEmbedding


def to_static(model: keras.Model) -> keras.Model:
    """A copy of `model` in which each `DynamicEmbedding` is its
    `static_equivalent()` (a lookup over the live keys and an `Embedding`).

    The copy shares every other layer with `model`; it loads with stock
    Keras (no keras-hybrid) and exports to a SavedModel with stock ops
    only, and predicts what `model` predicts now.

    ```python
    keras_hybrid.layers.to_static(model).save("m.keras")
    ```

    Raises:
        NotImplementedError: For a subclassed model (only Functional and
            Sequential models can be copied layer by layer).
    """
    if not isinstance(model, keras.Sequential) and not _is_functional(model):
        raise NotImplementedError(
            "`to_static` copies Functional and Sequential models. Received: "
            f"a {type(model).__name__}. Build the model with the Functional "
            "API, or call `static_equivalent()` on each DynamicEmbedding."
        )

    def clone(layer):
        if isinstance(layer, DynamicEmbedding):
            return layer.static_equivalent()
        return layer

    return keras.models.clone_model(model, clone_function=clone)


def _is_functional(model: keras.Model) -> bool:
    # `keras.Model(inputs, outputs)` makes a `Functional`, a class Keras
    # does not export.
    return type(model).__name__ == "Functional"
