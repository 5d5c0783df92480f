"""The variables a checkpoint holds: the model's and its optimizer's."""

import contextlib
import dataclasses

import keras
import tensorflow as tf

from keras_hybrid.checkpoint import participants
from keras_hybrid.sparse.sharded_table import ShardedTable


@dataclasses.dataclass(frozen=True)
class Entry:
    """One variable to save or restore.

    Attributes:
        path: String. The Keras variable path (unique in the checkpoint).
        variable: The `keras.Variable`.
        table: The `ShardedTable` behind it if it is partitioned, else None.
    """

    path: str
    variable: object
    table: ShardedTable | None

    @property
    def shape(self) -> tuple:
        return tuple(int(d) for d in self.variable.shape)

    @property
    def dtype(self) -> str:
        return str(keras.backend.standardize_dtype(self.variable.dtype))


def entries(
    model: keras.Model, build_optimizer: bool = False, skip: set = frozenset()
) -> list[Entry]:
    """The model's weights, then its optimizer's variables, in order.

    Args:
        model: A built Keras model.
        build_optimizer: Boolean. Whether to build an unbuilt optimizer
            first, so its slots exist to be restored into.
        skip: Set of variable ids saved otherwise (dynamic tables).

    Raises:
        ValueError: If the model is not built, or two variables share a path.
    """
    if not model.built:
        raise ValueError(
            f"Model {model.name!r} is not built: call it on a batch (or "
            "`model.build(input_shape)`) before saving or restoring."
        )
    optimizer = getattr(model, "optimizer", None)
    if build_optimizer and optimizer is not None and not optimizer.built:
        # Slots of partitioned tables are created by the model's strategy.
        with _strategy_scope(model):
            optimizer.build(model.trainable_variables)
    variables = list(model.weights)
    if optimizer is not None and optimizer.built:
        variables += list(optimizer.variables)
    result, seen_ids, seen_paths = [], set(skip), {}
    for v in variables:
        if id(v) in seen_ids:
            continue
        seen_ids.add(id(v))
        if v.path in seen_paths:
            raise ValueError(
                f"Two variables share the path {v.path!r}; a checkpoint "
                "names variables by path. Give the layers unique names."
            )
        seen_paths[v.path] = v
        table = getattr(v, "value", None)
        result.append(
            Entry(v.path, v, table if isinstance(table, ShardedTable) else None)
        )
    return result


def _strategy_scope(model):
    strategy = participants.hybrid_strategy_of(model)
    if strategy is None or tf.distribute.has_strategy():
        return contextlib.nullcontext()
    return strategy.scope()
