"""Variables that stay this worker's own under `HybridStrategy`.

A dynamic table's shard (its rows, their optimizer slots, its key index
state) holds the rows of the keys this worker owns: each worker's copy
is different by design. Such a variable is created inside `scope()`: the
strategy then neither partitions it nor broadcasts its initial value
from the chief, the optimizer slots made for it (Keras makes them
colocated with it) are local too, and per-step state averaging leaves
it alone. Its gradient must come marked as pushed
(`sparse.table_gradients`), or the strategy would sum it over workers.
"""

import contextlib
import threading
import weakref

_state = threading.local()
# id(tf.Variable) -> weak reference to it; a tf.Variable is unhashable.
_local: dict[int, weakref.ref] = {}


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

    _local[key] = weakref.ref(variable, drop)


def is_local(variable) -> bool:
    """Whether `variable` (a `tf.Variable`, or anything) is local."""
    ref = _local.get(id(variable))
    return ref is not None and ref() is variable
