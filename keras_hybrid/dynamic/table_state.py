"""One worker's part of a dynamic table as NumPy arrays, and back.

A dynamic table's row positions mean nothing outside the worker that
holds them, so whatever carries a table elsewhere (a sharded checkpoint,
an elastic commit, a resize) carries its live keys instead, each with its
row, its optimizer slot rows, its use count and last step, plus the
admission counts of keys still waiting and the table's step and
counters. `own_arrays` takes them from a worker's table; `load` puts a
set of keys back, at rows `0..n-1`.

Arrays, by name:

- per live key: `keys`, `rows`, `uses`, `last_step` and `slot_<name>`
  for each optimizer slot;
- per waiting key: `count_keys`, `count_values` (`DynamicTable.counts`);
- `scalars`: `[step, *COUNTERS]`.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.dynamic import optimizer_slots

# Per-key fields of a live key, besides its slot rows.
ROW_FIELDS = ("keys", "rows", "uses", "last_step")
# Waiting keys and their packed counts.
COUNT_FIELDS = ("count_keys", "count_values")
# `[step, *COUNTERS]` of one worker's table.
SCALARS = "scalars"
# Prefix of a slot's per-key field.
SLOT = "slot_"


def slots_of(table, traced: bool = False) -> dict:
    """`{slot name: keras.Variable}` of `table`'s optimizer slots (Adam's
    `momentum`, `velocity`...), in the built optimizers that update it.

    With `traced`, those the last trace of a training step found, if any
    (`DynamicTable.traced_slots`), without scanning the live objects
    again (about 0.1 s): for state taken while `fit` runs.
    """
    found = table.traced_slots if traced else None
    if not found:  # none traced yet, or none then: look again
        found = optimizer_slots.find(table.embeddings)
    prefix = table.embeddings.path.replace("/", "_") + "_"
    return {s.variable.name[len(prefix) :]: s.variable for s in found}


def key_fields(slots: dict) -> tuple:
    """Names of the per-key arrays of a table with `slots`, in order."""
    return (*ROW_FIELDS, *(SLOT + n for n in sorted(slots)))


def own_arrays(table, slots: dict) -> dict:
    """This worker's live keys of `table` and their state (see above)."""
    live = np.flatnonzero(numpy_of(table.state["live"]))
    count_keys, count_values = table.counts.export()
    arrays = {
        "keys": table.slot_keys.numpy()[live],
        "rows": numpy_of(table.embeddings)[live],
        "uses": numpy_of(table.state["uses"])[live],
        "last_step": numpy_of(table.state["last_step"])[live],
        "count_keys": count_keys.numpy().reshape(-1),
        "count_values": count_values.numpy().reshape(-1),
        SCALARS: np.array(
            [
                numpy_of(table.state[n])
                for n in ("step", *dynamic_table.COUNTERS)
            ],
            np.int64,
        ),
    }
    for name, variable in sorted(slots.items()):
        arrays[SLOT + name] = numpy_of(variable)[live]
    return arrays


def load(table, slots: dict, arrays: dict, where: str = "") -> None:
    """Makes `arrays` (as `own_arrays` returns, `scalars` included) the
    whole state of this worker's `table`: its keys at rows `0..n-1`.

    Args:
        table: `DynamicTable`.
        slots: `{slot name: keras.Variable}` (`slots_of`).
        arrays: Dict of NumPy arrays, as `own_arrays` returns.
        where: String naming this worker in the error message.

    Raises:
        ValueError: If the keys exceed the table's capacity.
    """
    count = len(arrays["keys"])
    if count > table.capacity:
        where = where or "this worker"
        raise ValueError(
            f"Dynamic table {table.name} gets {count} keys on {where}, "
            f"more than its capacity {table.capacity}. Use more workers, "
            "or a larger `capacity`."
        )
    _fill(table.embeddings, arrays["rows"], count)
    for name, variable in slots.items():
        _fill(variable, arrays[SLOT + name], count)
    _fill(table.state["live"], np.ones(count), count)
    _fill(table.state["uses"], arrays["uses"], count)
    _fill(table.state["last_step"], arrays["last_step"], count)
    keys = np.zeros([table.capacity], np.int64)
    keys[:count] = arrays["keys"]
    # Added, not assigned: `slot_keys` is a plain variable, and on TF 2.21
    # `assign` to a variable made before an eager context reset does
    # nothing (`assign_add` works; int64 sums wrap alike in NumPy and TF).
    table.slot_keys.assign_add(keys - table.slot_keys.numpy())
    names = ("step", *dynamic_table.COUNTERS)
    for name, value in zip(names, arrays[SCALARS], strict=True):
        _set(table.state[name], np.int64(value))
    table.reload()
    table.counts.remove(table.counts.export()[0])
    table.counts.insert(
        tf.constant(arrays["count_keys"], tf.int64),
        tf.constant(arrays["count_values"], tf.int64),
    )


def _fill(variable, values: np.ndarray, count: int) -> None:
    """Sets the first `count` rows of `variable` to `values`, zeros after."""
    full = np.zeros(tuple(variable.shape), numpy_of(variable).dtype)
    full[:count] = np.asarray(values).reshape((count, *full.shape[1:]))
    _set(variable, full)


def _set(variable, value: np.ndarray) -> None:
    variable.assign(value)


def numpy_of(variable) -> np.ndarray:
    """A Keras or TF variable's value as a NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(variable))
