"""State a step assigns from this worker's rows is averaged over workers.

`BatchNormalization` (unsynchronized, Keras' default) updates its moving
mean and variance from the batch it sees. With several workers each sees
its own slice of the global batch, so the workers' copies of these
non-trainable variables would differ: rank 0 would save its own
statistics, an elastic resize broadcast rank 0's, and `evaluate`
normalize each worker's rows with different ones.

After each train or test step of a multi-worker `HybridStrategy`, the
floating-point non-trainable variables of the model that the step
assigned are averaged over the workers (in the step's one all-reduce of
its state, `step_state`), so every worker holds the same state. This is
the value tf.keras' mean-aggregated, sync-on-read moving statistics had
under `MirroredStrategy`: an exponential moving average is linear in the
batch statistics, so
averaging the copies after every step equals averaging them when read.
`BatchNormalization(synchronized=True)` already computes global batch
statistics, so its copies are equal before the mean (which keeps them so,
to rounding).

Which variables a step assigns is recorded while it is built:
`keras.Variable.assign` (which `assign_add` and `assign_sub` call) is
wrapped while a multi-worker strategy is open
(`patches/state_averaging.py`) and notes the variables assigned inside
`recording()`. Trainable weights (updated from all-reduced
gradients), optimizer and metric state (handled elsewhere), integer state
(seed generators, counters), partitioned tables and local variables
(`local_variables`) are never averaged.
Variables assigned directly through their TF variable are not seen.
"""

import contextlib
import threading

import tensorflow as tf

from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.strategy import local_variables
from keras_hybrid.strategy.global_read_variable import GlobalReadVariable

_record = threading.local()


def note_assigned(variable) -> None:
    """Notes that Keras variable `variable` was assigned, inside
    `recording()` (called by the patched `keras.Variable.assign`)."""
    assigned = getattr(_record, "ids", None)
    if assigned is not None:
        assigned.add(id(variable))


@contextlib.contextmanager
def recording():
    """Yields the set of `id`s of Keras variables assigned in the block."""
    previous = getattr(_record, "ids", None)
    _record.ids = set()
    try:
        yield _record.ids
    finally:
        assigned = _record.ids
        _record.ids = previous
        if previous is not None:
            previous.update(assigned)


def averaged(model, assigned_ids) -> list:
    """The variables of `model` whose copies the step made differ: its
    floating-point non-trainable variables assigned in the step, in the
    model's order (the same on every worker)."""
    return [
        v
        for v in model.non_trainable_variables
        if id(v) in assigned_ids
        and not v.trainable
        and tf.as_dtype(v.dtype).is_floating
        and _is_replicated(v)
    ]


def _is_replicated(variable) -> bool:
    """True if the variable is a replicated TF variable: not metric state,
    not a partitioned table."""
    value = getattr(variable, "value", None)
    return (
        isinstance(value, tf.Variable)
        and not isinstance(value, (GlobalReadVariable, ShardedTable))
        and not local_variables.is_local(value)
    )
