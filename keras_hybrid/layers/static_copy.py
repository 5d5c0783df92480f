"""`to_static`: a stock Keras model equivalent to one with dynamic tables."""

import keras

from keras_hybrid.layers.dynamic_embedding import DynamicEmbedding


def to_static(model: keras.Model) -> keras.Model:
    """A copy of `model` in which each `DynamicEmbedding` reads through
    stock layers: a lookup over its live keys, `<name>_lookup` (after a
    `<name>_hashing` for string keys held as hashes), then an `Embedding`
    named as the dynamic layer. In a Functional model these are layers
    of the copy, so a table called on keys of several ranks (a target id
    and a history) serves every call; in a Sequential model, the
    `Sequential` that `static_equivalent()` returns takes its place.
    Functional and Sequential models inside the model (towers) are
    copied the same way.

    The copy shares every other layer with `model`; it loads with stock
    Keras (no keras-hybrid) and exports to a SavedModel with stock ops
    only, and predicts what `model` predicts now.

    ```python
    keras_hybrid.layers.to_static(model).save("m.keras")
    ```

    Raises:
        NotImplementedError: For a subclassed model, or a dynamic table
            inside one (only Functional and Sequential models can be
            copied layer by layer).
    """
    if not isinstance(model, keras.Sequential) and not _is_functional(model):
        raise NotImplementedError(
            "`to_static` copies Functional and Sequential models. Received: "
            f"a {type(model).__name__}. Build the model with the Functional "
            "API, or call `static_equivalent()` on each DynamicEmbedding."
        )

    # The equivalents made here, by id (held, so no id is reused).
    equivalents: dict = {}

    def clone(layer):
        if isinstance(layer, DynamicEmbedding):
            equivalent = layer.static_equivalent()
            equivalents[id(equivalent)] = equivalent
            return equivalent
        if _is_tower(layer):
            # A model inside the model that holds tables: copied the same
            # way. Other parts are shared as they are.
            return to_static(layer)
        return layer

    if isinstance(model, keras.Sequential):
        copy = keras.models.clone_model(model, clone_function=clone)
        _check_all_replaced(copy)
        return copy

    def call(layer, *args, **kwargs):
        if id(layer) not in equivalents:
            return layer(*args, **kwargs)
        # The equivalent's layers one by one, not the `Sequential`, whose
        # input is fixed by its first call: a table read by keys of
        # several ranks (a target id and a history) serves them all.
        keys = args[0] if args else kwargs.pop("inputs")
        for part in layer.layers:
            keys = part(keys)
        return keys

    copy = keras.models.clone_model(
        model, clone_function=clone, call_function=call
    )
    _check_all_replaced(copy)
    return copy


def _is_tower(layer) -> bool:
    """Whether `layer` is a Functional or Sequential model that holds a
    dynamic table."""
    if not (isinstance(layer, keras.Sequential) or _is_functional(layer)):
        return False
    return any(
        isinstance(inner, DynamicEmbedding)
        for _, inner in _layers_within(layer)
    )


def _check_all_replaced(model: keras.Model) -> None:
    """Raises `NotImplementedError` naming a dynamic table left in a
    subclassed model inside `model`, which cannot be copied layer by
    layer."""
    for owner, layer in _layers_within(model):
        if isinstance(layer, DynamicEmbedding):
            raise NotImplementedError(
                "`to_static` copies Functional and Sequential models, and "
                f"the DynamicEmbedding {layer.name!r} sits in "
                f"{owner.name!r}, a {type(owner).__name__}. Build that "
                "part with the Functional API, or call "
                "`static_equivalent()` on the DynamicEmbedding."
            )


def _layers_within(model: keras.Model):
    """`(owner, layer)` for every layer inside `model`, nested models'
    layers included."""
    for layer in model.layers:
        yield model, layer
        if isinstance(layer, keras.Model):
            yield from _layers_within(layer)


def _is_functional(model: keras.Model) -> bool:
    # `keras.Model(inputs, outputs)` makes a `Functional`, a class Keras
    # does not export.
    return type(model).__name__ == "Functional"
