"""Which optimizer settings can update a table one shard at a time.

An owner updates only the rows it stores. That is exact for optimizers
whose state and update are per element (SGD, momentum, Adam, AdamW,
Adagrad, RMSprop, Adadelta, Adamax, Nadam, Ftrl, Lion). Anything that needs
a norm or a sum over the whole table inside its update (Adafactor's
factored moments, Lamb's trust ratio, Muon's orthogonalization) would
differ per shard, so it is refused with the workaround. Gradient clipping
by norm (`clipnorm`, `global_clipnorm`) happens before the update, on
norms summed over the owners (`patches/gradient_clipping.py`).
"""

import keras

from keras_hybrid.sparse.sharded_table import ShardedTable

_WHOLE_TABLE_OPTIMIZERS = ("Adafactor", "Lamb", "Muon")


def partitioned_paths(variables) -> list[str]:
    """Paths of the partitioned tables among `variables`."""
    return [
        v.value.path
        for v in variables
        if isinstance(getattr(v, "value", None), ShardedTable)
    ]


def check(optimizer, variables, wrapped: bool) -> None:
    """Raises `NotImplementedError` if `optimizer` cannot update the
    partitioned tables among `variables` shard by shard.

    Args:
        optimizer: The Keras optimizer that applies the updates.
        variables: The variables it trains.
        wrapped: Boolean. Whether a `HybridOptimizer` wraps `optimizer`
            (it takes over gradient accumulation).
    """
    tables = partitioned_paths(variables)
    if not tables:
        return
    keep_dense = (
        f"or keep the table dense with `HybridStrategy(variable_kinds="
        f"{{{tables[0]!r}: 'dense'}})`."
    )
    name = type(optimizer).__name__
    if name in _WHOLE_TABLE_OPTIMIZERS:
        raise NotImplementedError(
            f"{name} needs statistics over a whole table, but {tables} are "
            "partitioned over workers. Use an optimizer with per-element "
            f"state (Adam, AdamW, Adagrad, RMSprop, SGD, ...), {keep_dense}"
        )
    if getattr(optimizer, "use_ema", False):
        raise NotImplementedError(
            f"`use_ema=True` is not supported with partitioned tables "
            f"{tables}. Turn it off, {keep_dense}"
        )
    if optimizer.gradient_accumulation_steps and not wrapped:
        raise NotImplementedError(
            "`gradient_accumulation_steps` with partitioned tables "
            f"{tables} needs the optimizer wrapped: `optimizer="
            "keras_hybrid.HybridOptimizer(keras.optimizers."
            f"{name}(..., gradient_accumulation_steps="
            f"{optimizer.gradient_accumulation_steps}))`."
        )


def is_keras_optimizer(obj) -> bool:
    return isinstance(obj, keras.optimizers.Optimizer)
