"""The optimizer slots of a dynamic table's rows, found and reset.

A stock Keras optimizer keeps one variable per slot (Adam's `m` and `v`,
...) for each model variable, made by `add_variable_from_reference` and
named `<variable path with "_" for "/">_<slot name>`. When a row of a
dynamic table is given to a new key, those rows of its slots must start
again from the slot's initial value. The optimizers are found among the
live, built `keras.optimizers.Optimizer` objects that update the
table: a layer
does not know its model or optimizer, and `model.fit` is unchanged.
"""

import dataclasses
import gc

import keras
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.optimizers.hybrid_optimizer import HybridOptimizer

# Stock optimizers whose update of a row depends on other rows (norms or
# factors over the whole variable): they cannot update a table row by row.
NOT_ROW_WISE = ("Adafactor", "Lamb", "Muon")
# Slots that do not start at zero: name -> optimizer attribute holding
# their initial value (Adagrad, Ftrl).
_CONSTANT_SLOTS = {"accumulator": "initial_accumulator_value"}
# The exponential moving average of the weights (`use_ema=True`) starts at
# the weights.
_AVERAGE_SLOT = "average"


@dataclasses.dataclass(frozen=True)
class Slot:
    """One optimizer variable shaped like the table.

    Attributes:
        variable: `keras.Variable`. The slot.
        optimizer: String. Its optimizer's class name, for messages.
        initial: Float, or None for "the row's initial value" (EMA).
    """

    variable: keras.Variable
    optimizer: str
    initial: float | None


def find(table: keras.Variable) -> list[Slot]:
    """The slots of `table` in every built optimizer that updates it.

    Raises:
        ValueError: If such an optimizer cannot update `table` row by row.
    """
    prefix = table.path.replace("/", "_") + "_"
    slots = []
    for optimizer in _optimizers_of(table):
        for variable in optimizer.variables:
            if not variable.name.startswith(prefix):
                continue
            name = type(optimizer).__name__
            if name in NOT_ROW_WISE or variable.shape != table.shape:
                raise ValueError(
                    f"`{name}` cannot update a dynamic table row by row "
                    f"(its update of {table.path} mixes rows). Received: "
                    f"optimizer={name}. Use SGD, Adam, AdamW, Adagrad, "
                    "RMSprop, Ftrl or another element-wise optimizer."
                )
            suffix = variable.name[len(prefix) :]
            slots.append(Slot(variable, name, _initial(optimizer, suffix)))
    return slots


def check_optimizer(optimizer, tables: list[str], workers: int) -> None:
    """Refuses an optimizer that cannot train dynamic tables `tables`
    (paths) row by row, or, on several `workers`, one that accumulates
    gradients over steps without a `HybridOptimizer` around it (Keras'
    own accumulation would sum each worker's own rows over workers as a
    dense gradient).

    Raises:
        ValueError: For an optimizer in `NOT_ROW_WISE`, naming it.
        NotImplementedError: On several workers, for
            `gradient_accumulation_steps` of an unwrapped optimizer.
    """
    outer = optimizer
    optimizer = _wrapped(optimizer)
    name = type(optimizer).__name__
    if name in NOT_ROW_WISE:
        raise ValueError(
            f"`{name}` cannot update a dynamic table row by row (its "
            f"update of {tables[0]} mixes rows). Received: optimizer="
            f"{name}. Use SGD, Adam, AdamW, Adagrad, RMSprop, Ftrl or "
            "another element-wise optimizer."
        )
    if workers < 2:
        return
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if steps and not _hybrid_wrapped(outer):
        raise NotImplementedError(
            "`gradient_accumulation_steps` with dynamic tables "
            f"{tables} on several workers needs the optimizer wrapped: "
            "each worker holds only its keys' rows and their gradients. "
            f"Received: {name}(gradient_accumulation_steps={steps}) on "
            f"{workers} workers. Use `optimizer=keras_hybrid."
            f"HybridOptimizer(keras.optimizers.{name}(..., "
            f"gradient_accumulation_steps={steps}))`."
        )


def check_optimizers(table: keras.Variable, workers: int) -> None:
    """`check_optimizer` for every built optimizer that updates `table`
    (at trace time, for a model compiled before it was built)."""
    for optimizer in _optimizers_of(table, unwrap=False):
        check_optimizer(optimizer, [table.path], workers)


def reset_rows(slots: list[Slot], rows: tf.Tensor, initial_rows) -> None:
    """Sets `rows` of every slot to its initial value; `initial_rows` are
    the table's new rows (for slots that start at the weights)."""
    for slot in slots:
        storage = keras_compat.variable_storage(slot.variable)
        if slot.initial is None:
            values = tf.cast(initial_rows, storage.dtype)
        else:
            shape = tf.concat([tf.shape(rows), storage.shape[1:]], 0)
            values = tf.fill(shape, tf.cast(slot.initial, storage.dtype))
        storage.scatter_nd_update(rows[:, None], values)
        # A scatter puts a variable in copy-on-read mode, where each whole
        # read copies it; the optimizer reads its slots whole every step.
        share_reads(storage)


def share_reads(storage) -> None:
    """Turns off copy-on-read for `storage` (a `tf.Variable`), which a
    scatter turned on; an update while a read is held still copies."""
    tf_compat.disable_copy_on_read(storage)


def _initial(optimizer, slot_name: str) -> float | None:
    if slot_name == _AVERAGE_SLOT:
        return None
    attribute = _CONSTANT_SLOTS.get(slot_name)
    if attribute is None:
        return 0.0
    return float(getattr(optimizer, attribute))


def _optimizers_of(table: keras.Variable, unwrap: bool = True) -> list:
    """Built optimizers that update `table` (by identity: another model's
    variable may have the same path), each once. With `unwrap`, a wrapper
    (`LossScaleOptimizer`, `HybridOptimizer`) stands for the optimizer
    it wraps, which owns the slots and their settings; without, only the
    outermost wrapper is kept."""
    found = {}
    for o in gc.get_objects():
        if not (isinstance(o, keras.optimizers.Optimizer) and o.built):
            continue
        if not any(
            v is table for v in keras_compat.last_trainable_variables(o)
        ):
            continue
        found[id(o)] = o
    if not unwrap:
        inner = {
            id(o.inner_optimizer)
            for o in found.values()
            if hasattr(o, "inner_optimizer")
        }
        return [o for key, o in found.items() if key not in inner]
    owners = {}
    for o in found.values():
        owners[id(_wrapped(o))] = _wrapped(o)
    return list(owners.values())


def _hybrid_wrapped(optimizer) -> bool:
    """Whether a `HybridOptimizer` is among `optimizer`'s wrappers."""
    while hasattr(optimizer, "inner_optimizer"):
        if isinstance(optimizer, HybridOptimizer):
            return True
        optimizer = optimizer.inner_optimizer
    return False


def _wrapped(optimizer):
    """The optimizer that updates the rows: the one `optimizer` wraps, if
    it is a `LossScaleOptimizer` or a `HybridOptimizer`."""
    while hasattr(optimizer, "inner_optimizer"):
        optimizer = optimizer.inner_optimizer
    return optimizer
