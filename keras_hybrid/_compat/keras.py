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


def loss_scaling_functions() -> tuple:
    """Keras' `(scale, unscale)` loss functions for `tf.distribute`.

    `keras.src.losses.loss.scale_loss_for_distribution` and
    `unscale_loss_for_distribution` multiply a loss by `1 / N` and `N`,
    with N read from the strategy when the step is traced. Keras' TF
    trainer and `compile_utils` look them up on the module at call time.
    """
    from keras.src.losses import loss as loss_module

    return (
        loss_module.scale_loss_for_distribution,
        loss_module.unscale_loss_for_distribution,
    )


def set_loss_scaling_functions(scale, unscale) -> None:
    """Makes `scale` and `unscale` Keras' loss functions of
    `loss_scaling_functions` (pass the old pair back to restore them)."""
    from keras.src.losses import loss as loss_module

    loss_module.scale_loss_for_distribution = scale
    loss_module.unscale_loss_for_distribution = unscale


def traced_step_of(train_function):
    """The `tf.function` inside Keras' TF `train_function`, or None.

    Keras 3's TF trainer returns a plain closure `function(iterator)` that
    calls the `tf.function` `multi_step_on_iterator` (absent when the model
    runs eagerly). Tracing that one ahead, with
    `get_concrete_function(iterator)`, saves the first step its tracing.
    """
    cells = getattr(train_function, "__closure__", None) or ()
    names = getattr(
        getattr(train_function, "__code__", None), "co_freevars", ()
    )
    for name, cell in zip(names, cells, strict=False):
        if name == "multi_step_on_iterator":
            step = cell.cell_contents
            return step if hasattr(step, "get_concrete_function") else None
    return None


def set_validation_gate(model, is_open) -> None:
    """Makes `fit` validate only while `is_open()` is True (None: Keras'
    own rule again).

    Keras' `fit` asks `model._should_eval(epoch, validation_freq)` at each
    epoch end; an instance attribute shadows that method.
    """
    if is_open is None:
        model.__dict__.pop("_should_eval", None)
        return
    should_eval = type(model)._should_eval

    def gated(epoch, validation_freq):
        return is_open() and should_eval(model, epoch, validation_freq)

    model._should_eval = gated
