"""Private TensorFlow hooks (see the package docstring for the list)."""

import tensorflow as tf


def keep_variable_key(new: tf.Variable, old: tf.Variable) -> None:
    """Gives `new` the key `old` has in Keras optimizers' state maps.

    Keras' TF optimizer keys per-variable state by `_unique_id`; a variable
    whose storage is replaced keeps its slots this way.
    """
    new._unique_id = old._unique_id


def plain_variable(
    initial_value, name: str, trainable: bool, like: tf.Variable | None = None
) -> tf.Variable:
    """A `ResourceVariable` made without the variable-creator stack (so the
    strategy does not broadcast or partition it).

    `like` is the variable it replaces: the new one belongs to the same
    strategy (`_distribute_strategy`), as a variable the strategy created
    would, so that `colocate_vars_with` accepts it (Keras' optimizer calls
    that for each slot it builds later).
    """
    from tensorflow.python.ops import resource_variable_ops

    return resource_variable_ops.ResourceVariable(
        initial_value=initial_value,
        name=name,
        trainable=trainable,
        distribute_strategy=getattr(like, "_distribute_strategy", None),
    )


_SHAPE_FUNCTIONS = ("shape_internal", "shape_n")


def in_shape_query(depth: int = 16) -> bool:
    """Whether the current eager tensor conversion serves `tf.shape`.

    Eagerly, `tf.shape` of a Keras variable converts the whole value (its
    `__tf_tensor__`), where a graph would only read the static shape.
    Looks `depth` frames up the Python stack for `array_ops.shape_internal`.
    """
    import sys

    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name in _SHAPE_FUNCTIONS and "array_ops" in code.co_filename:
            return True
        frame = frame.f_back
    return False
