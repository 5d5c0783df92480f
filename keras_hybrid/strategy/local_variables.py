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
The optimizer's update (`update_rows_in_use`, inside
`extended.update`) then reads and writes only rows `[0, n)` of the
variable and its slots, so a dynamic table filled to a tenth of its
capacity is updated at a tenth of the cost, with the same result. It
goes a chunk of rows at a time, so its temporaries stay a fraction of
the table's size however full it is.
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
# An update of the rows in use goes in chunks of capacity / CHUNKS rows
# (at least MIN_CHUNK_ROWS): an optimizer's copies and temporaries (Adam
# holds about 8 of a chunk at once) then stay within a share of the table
# and its slots, whatever the rows in use.
CHUNKS = 8
MIN_CHUNK_ROWS = 4096
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
    """A local variable whose reads and writes, inside
    `update_rows_in_use`, cover only the rows of one chunk (see the
    module docstring)."""

    def rows_read(self):
        return getattr(_state, "window", {}).get(id(self))

    def read_rows(self, start, stop):
        # Within one chunk's update: read once, then what was last
        # written.
        last = _state.last
        if id(self) not in last:
            last[id(self)] = super().read_rows(start, stop)
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
            resource=self.handle, indices=tf.range(*rows), updates=value
        )

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        if self.rows_read() is None:
            return super().assign_add(delta, use_locking, name, read_value)
        return self.assign(self.read_value() + delta)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        if self.rows_read() is None:
            return super().assign_sub(delta, use_locking, name, read_value)
        return self.assign(self.read_value() - delta)


def _windowed_write(name: str):
    """`ResourceVariable`'s method `name`, which writes some rows. Within
    a chunk's update its row indices count from the chunk's first row
    (as the cut gradient's do), and the rows last read are stale after
    it."""
    nd = name.startswith("scatter_nd")

    def write(self, target, *args, **kwargs):
        window = self.rows_read()
        if window is not None:
            _state.last.pop(id(self), None)
            start = window[0]
            if nd:
                # [..., rank] indices: the first of each is the row.
                target = tf.convert_to_tensor(target)
                rows = target[..., :1] + tf.cast(start, target.dtype)
                target = tf.concat([rows, target[..., 1:]], -1)
            else:
                rows = target.indices + tf.cast(start, target.indices.dtype)
                target = tf.IndexedSlices(target.values, rows)
        return getattr(super(LocalVariable, self), name)(
            target, *args, **kwargs
        )

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
    setattr(LocalVariable, _name, _windowed_write(_name))


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


def has_rows_in_use(variable) -> bool:
    """Whether `variable` declared its rows in use (`set_rows_in_use`)."""
    entry = _rows_in_use.get(id(variable))
    return entry is not None and entry[0]() is variable


def chunk_rows(variable) -> int:
    """Rows an update of `variable`'s rows in use covers at a time."""
    return max(MIN_CHUNK_ROWS, -(-int(variable.shape[0]) // CHUNKS))


def update_rows_in_use(variable, args: tuple, update) -> tf.Tensor:
    """Runs `update(args)` over rows `[0, n)` of `variable` (which
    declared its rows in use) and its slots, `chunk_rows` rows at a time,
    one chunk after another: within each run every read and write of
    them covers the chunk's rows, and the gradient (the first of `args`)
    is cut to those rows."""
    rows = tf.cast(_rows_in_use[id(variable)][1](), tf.int64)
    members = [variable] + [
        slot
        for slot in (ref() for ref in _slots.get(id(variable), []))
        if slot is not None
    ]
    size = tf.constant(chunk_rows(variable), tf.int64)

    def chunk(start):
        stop = tf.minimum(start + size, rows)
        # Cut before the window opens: the first argument may be a slot
        # (Keras' moving averages are assigned through `update`).
        cut = args
        if args:
            cut = (_rows_of(args[0], start, stop), *args[1:])
        before = getattr(_state, "window", {}), getattr(_state, "last", {})
        window = (start, stop)
        _state.window = {**before[0], **{id(m): window for m in members}}
        _state.last = {}  # id -> the rows last read or written, a tensor
        try:
            update(cut)
        finally:
            _state.window, _state.last = before
        return (stop,)

    # One chunk at a time: the chunks' copies and temporaries do not
    # add up. Returns the end of the last chunk, once all have run.
    return tf.while_loop(
        lambda start: start < rows,
        chunk,
        (tf.constant(0, tf.int64),),
        parallel_iterations=1,
    )[0]


def _rows_of(gradient, start, stop):
    """Rows `[start, stop)` of `gradient`, a tensor or IndexedSlices."""
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        indices = tf.cast(gradient.indices, tf.int64)
        inside = tf.where((indices >= start) & (indices < stop))[:, 0]
        shape = gradient.dense_shape
        if shape is not None:
            count = tf.cast(stop - start, shape.dtype)[None]
            shape = tf.concat([count, shape[1:]], 0)
        return tf.IndexedSlices(
            tf.gather(gradient.values, inside),
            tf.cast(tf.gather(indices, inside) - start, gradient.indices.dtype),
            shape,
        )
    return tf.convert_to_tensor(gradient)[start:stop]
