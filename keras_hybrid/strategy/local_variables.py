"""Variables that stay this worker's own under `HybridStrategy`.

A dynamic table's shard (its rows, their optimizer slots, its key index
state) holds the rows of the keys this worker owns: each worker's copy
is different by design. Such a variable is created inside `scope()`: the
strategy then neither partitions it nor broadcasts its initial value
from the chief, the optimizer slots made for it (Keras makes them
colocated with it) are local too, and per-step state averaging leaves
it alone. Its gradient must come marked as pushed
(`sparse.table_gradients`), or the strategy would sum it over workers.

A trainable local variable, and each slot made for it, is a
`LocalVariable`. Its owner may declare the rows in use
(`set_rows_in_use`): every row past them must be a fixed point of any
element-wise optimizer (zeros with initial slots, and a zero gradient).
The optimizer's update (`rows_updated`, inside `extended.update`) then
reads and writes only rows `[0, n)` of the variable and its slots, so a
dynamic table filled to a tenth of its capacity is updated at a tenth of
the cost, with the same result.
"""

import contextlib
import threading
import weakref

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat

_state = threading.local()
# id(tf.Variable) -> weak reference to it; a tf.Variable is unhashable.
_local: dict[int, weakref.ref] = {}
# id(variable) -> (weak reference to it, callable giving its rows in use).
_rows_in_use: dict[int, tuple] = {}
# id(variable) -> weak references to the slots made for it.
_slots: dict[int, list] = {}
# id(variable) -> (weak reference to it, `allocating(slot name)`).
_slot_guards: dict[int, tuple] = {}
# `tf.Variable` keyword arguments a `LocalVariable` takes from a creator's.
_KEPT = (
    "initial_value",
    "trainable",
    "validate_shape",
    "caching_device",
    "name",
    "dtype",
    "constraint",
    "distribute_strategy",
    "synchronization",
    "aggregation",
    "shape",
)


@contextlib.contextmanager
def scope():
    """Within, variables created under `HybridStrategy` are local."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth


def active() -> bool:
    """Whether variables created now are local."""
    return getattr(_state, "depth", 0) > 0


def add(variable) -> None:
    """Records `variable` (a `tf.Variable`) as local."""
    key = id(variable)

    def drop(ref: weakref.ref) -> None:
        if _local.get(key) is ref:
            del _local[key]
            # What was declared for it, and the slots made for it.
            for declared in (_rows_in_use, _slot_guards, _slots):
                declared.pop(key, None)

    _local[key] = weakref.ref(variable, drop)


def is_local(variable) -> bool:
    """Whether `variable` (a `tf.Variable`, or anything) is local."""
    ref = _local.get(id(variable))
    return ref is not None and ref() is variable


class LocalVariable(tf_compat.ConvertibleVariable):
    """A local variable whose reads and writes, inside `rows_updated`,
    cover only its rows in use (see the module docstring)."""

    def rows_read(self):
        return getattr(_state, "window", {}).get(id(self))

    def read_rows(self, rows):
        # A read is a copy of the rows (a gather): within one
        # `rows_updated`, read once, then what was last written.
        last = _state.last
        if id(self) not in last:
            last[id(self)] = super().read_rows(rows)
        return last[id(self)]

    def assign(self, value, use_locking=None, name=None, read_value=True):
        rows = self.rows_read()
        if rows is None:
            return super().assign(value, use_locking, name, read_value)
        value = tf.convert_to_tensor(value, self.dtype)
        _state.last[id(self)] = value
        # A scatter: a strided-slice assign of the same rows takes about
        # ten times as long on CPU.
        return tf.raw_ops.ResourceScatterUpdate(
            resource=self.handle, indices=tf.range(rows), updates=value
        )

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        if self.rows_read() is None:
            return super().assign_add(delta, use_locking, name, read_value)
        return self.assign(self.read_value() + delta)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        if self.rows_read() is None:
            return super().assign_sub(delta, use_locking, name, read_value)
        return self.assign(self.read_value() - delta)


def _forgetting_read(name: str):
    """`ResourceVariable`'s method `name`, which writes some rows: the
    rows last read are stale after it."""

    def write(self, *args, **kwargs):
        getattr(_state, "last", {}).pop(id(self), None)
        return getattr(super(LocalVariable, self), name)(*args, **kwargs)

    write.__name__ = name
    return write


for _name in (
    "scatter_add",
    "scatter_sub",
    "scatter_mul",
    "scatter_div",
    "scatter_max",
    "scatter_min",
    "scatter_update",
    "batch_scatter_update",
    "scatter_nd_add",
    "scatter_nd_sub",
    "scatter_nd_update",
    "scatter_nd_max",
    "scatter_nd_min",
):
    setattr(LocalVariable, _name, _forgetting_read(_name))


def create(next_creator, kwargs: dict):
    """A local variable: a `LocalVariable` if it is trainable or a slot of
    a local variable (`colocate_with`), else what `next_creator` makes."""
    reference = kwargs.get("colocate_with")
    if kwargs.get("trainable") or is_local(reference):
        guard = _slot_guards.get(id(reference))
        scope = contextlib.nullcontext()
        if guard is not None and guard[0]() is reference:
            scope = guard[1](kwargs.get("name"))
        with scope:
            variable = LocalVariable(
                **{k: kwargs[k] for k in _KEPT if k in kwargs}
            )
        if is_local(reference):
            _slots.setdefault(id(reference), []).append(weakref.ref(variable))
    else:
        variable = next_creator(**kwargs)
    add(variable)
    return variable


def set_rows_in_use(variable, rows_in_use) -> None:
    """Declares that only rows `[0, rows_in_use())` of `variable` (a
    `LocalVariable`) and of its slots change in an optimizer's update:
    every other row is zeros with initial slots and gets no gradient.
    `rows_in_use` returns an int64 scalar tensor."""
    if not isinstance(variable, LocalVariable):
        raise TypeError(
            "Only a trainable variable created under `HybridStrategy` in "
            f"`local_variables.scope()` has rows in use. Received: "
            f"{type(variable).__name__} {variable.name}."
        )
    _rows_in_use[id(variable)] = (weakref.ref(variable), rows_in_use)


def set_slot_guard(variable, allocating) -> None:
    """Makes each slot of `variable` (Keras makes them colocated with it)
    under `allocating(slot name)`, a context that checks the memory and
    names the table in its error."""
    _slot_guards[id(variable)] = (weakref.ref(variable), allocating)


@contextlib.contextmanager
def rows_updated(variable, args: tuple):
    """Within, `variable` and its slots read and write only their rows in
    use, if it declared them; yields `args` with the gradient (the first)
    cut to those rows."""
    entry = _rows_in_use.get(id(variable))
    if entry is None or entry[0]() is not variable:
        yield args
        return
    rows = tf.cast(entry[1](), tf.int64)
    members = [variable] + [
        slot
        for slot in (ref() for ref in _slots.get(id(variable), []))
        if slot is not None
    ]
    before = getattr(_state, "window", {}), getattr(_state, "last", {})
    _state.window = {**before[0], **{id(m): rows for m in members}}
    _state.last = {}  # id -> the rows last read or written, a tensor
    try:
        if args:
            args = (_first_rows(args[0], rows), *args[1:])
        yield args
    finally:
        _state.window, _state.last = before


def _first_rows(gradient, rows):
    """`gradient` of the first `rows` rows only (the others are zero)."""
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        shape = gradient.dense_shape
        if shape is not None:
            shape = tf.concat([tf.cast(rows, shape.dtype)[None], shape[1:]], 0)
        return tf.IndexedSlices(gradient.values, gradient.indices, shape)
    return tf.convert_to_tensor(gradient)[:rows]
