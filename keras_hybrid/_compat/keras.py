"""Private Keras 3 hooks (see the package docstring for the list)."""

import keras
from keras.src.backend.common import symbolic_scope


def variable_info(initial_value):
    """`(keras.Variable, initializer)` behind a `tf.Variable` request.

    Keras' TF `Variable._initialize_with_initializer` passes
    `lambda: initializer(self._shape, dtype=self._dtype)` to `tf.Variable`;
    its closure names the Keras variable and its initializer. Returns None
    for anything else (plain TF code).
    """
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
    return variable, initializer


def in_symbolic_scope() -> bool:
    """Whether Keras is computing output specs (a graph never run)."""
    return symbolic_scope.in_symbolic_scope()


def set_variable_storage(variable: keras.Variable, storage) -> None:
    """Makes `storage` (a `tf.Variable`) the value of Keras `variable`."""
    variable._value = storage
