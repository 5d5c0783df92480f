"""What a `tf.Variable` creation request says about its Keras variable.

Private hooks touched (tested on Keras 3.15 with TF 2.21):
- Keras' TF `Variable._initialize_with_initializer` passes
  `lambda: initializer(self._shape, dtype=self._dtype)` to `tf.Variable`;
  its closure gives the Keras variable (path, shape) and the initializer,
  so a shard can draw its own rows instead of calling the lambda;
- the Keras name-scope stack (`global_state` "name_scope_stack") names the
  layer whose `build` creates the variable, through `name_scope.caller`.
"""

import dataclasses

import keras
from keras.src.backend.common import global_state


@dataclasses.dataclass(frozen=True)
class KerasVariableInfo:
    """The Keras side of a variable being created.

    Attributes:
        variable: The `keras.Variable` whose storage is being created.
        initializer: Its initializer (callable `(shape, dtype)`).
        layer: The `keras.layers.Layer` whose scope creates it, or None.
    """

    variable: keras.Variable
    initializer: object
    layer: object


def describe(initial_value) -> KerasVariableInfo | None:
    """Returns what `initial_value` reveals, or None for plain TF code."""
    closure = getattr(initial_value, "__closure__", None)
    if not callable(initial_value) or not closure:
        return None
    cells = dict(
        zip(
            initial_value.__code__.co_freevars,
            (cell.cell_contents for cell in closure),
            strict=True,
        )
    )
    variable, initializer = cells.get("self"), cells.get("initializer")
    if not isinstance(variable, keras.Variable) or initializer is None:
        return None
    return KerasVariableInfo(variable, initializer, _creating_layer())


def _creating_layer():
    stack = global_state.get_global_attribute("name_scope_stack", default=[])
    for scope in reversed(stack or []):
        if isinstance(scope.caller, keras.layers.Layer):
            return scope.caller
    return None


def sparse_source(info: KerasVariableInfo) -> str | None:
    """`"layer"` if the variable is a stock embedding table that only
    gathers touch, else None.

    A regularizer or constraint reads the whole table every step (its
    gradient is dense too), so such a table stays dense.
    """
    layer = info.layer
    if not isinstance(layer, keras.layers.Embedding):
        return None
    if info.variable.name != "embeddings" or not info.variable.trainable:
        return None
    if layer.embeddings_regularizer is not None:
        return None
    if layer.embeddings_constraint is not None:
        return None
    return "layer"
