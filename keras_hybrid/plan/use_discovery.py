"""Finds how a step reads each provisional table, by tracing it once.

Before a step function that reads undecided tables first runs, the
strategy traces its Python function once more into a scratch graph that
is never run. In that trace a provisional table answers a gather with a
local stand-in (no communication) and a whole read with a zero tensor of
the table's full shape, and both are recorded. Afterwards, a whole read
counts only if an op other than a shape query uses it.
"""

import dataclasses
import warnings

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.plan import cost_rule
from keras_hybrid.utils.thread_flag import ThreadFlag

_SHAPE_OPS = ("Shape", "ShapeN", "Size", "Rank", "VariableShape")
_PASS_THROUGH = ("Identity", "IdentityN")

_active = ThreadFlag()
_recorder: "list[Recorder]" = []


@dataclasses.dataclass
class TableUse:
    """How one traced step used one table."""

    lookups: int = 0
    whole_reads: list = dataclasses.field(default_factory=list)
    # Gathered inside a `tf.while_loop` (a Keras RNN cell): the exchange's
    # custom gradient cannot leave TF's loop gradient, so such a table is
    # read like a whole one and stays dense.
    in_loop: bool = False

    def whole_reader(self) -> str:
        """The first op that used a whole read, as text, or ""."""
        if self.in_loop:
            return "gathered inside a tf.while_loop"
        for tensor in self.whole_reads:
            users = _real_users(tensor)
            if users:
                return f"read whole by {users[0].type}"
        return ""


class Recorder:
    """Collects `TableUse`s by table path during one discovery trace."""

    def __init__(self) -> None:
        self.uses: dict[str, TableUse] = {}

    def gathered(self, path: str, ids) -> None:
        use = self.uses.setdefault(path, TableUse())
        use.lookups += cost_rule.lookups_of(tf.TensorShape(ids.shape))
        use.in_loop = use.in_loop or tf_compat.in_while_loop()

    def read_whole(self, path: str, tensor) -> None:
        self.uses.setdefault(path, TableUse()).whole_reads.append(tensor)


def active() -> bool:
    """Whether a discovery trace is running on this thread."""
    return bool(_active)


def recorder() -> Recorder:
    return _recorder[-1]


def trace(fn, args, kwargs) -> dict[str, TableUse]:
    """Traces `fn` into a scratch graph; returns table uses by path."""
    python_fn = getattr(fn, "python_function", fn)
    specs = tf.nest.map_structure(_spec, (args, kwargs))
    rec = Recorder()
    _recorder.append(rec)
    try:
        with _active.scope(), warnings.catch_warnings():
            # The scratch trace's gradients of stand-ins are not real.
            warnings.simplefilter("ignore")
            tf.function(python_fn).get_concrete_function(*specs[0], **specs[1])
    finally:
        _recorder.pop()
    return rec.uses


def add_whole_reads(uses: dict, other: dict) -> None:
    """Adds the whole reads of another step's trace (`other`) to `uses`,
    keeping `uses`' lookup counts (those of the step that trains)."""
    for path, use in other.items():
        if use.whole_reads:
            uses.setdefault(path, TableUse()).whole_reads.extend(
                use.whole_reads
            )


def _spec(value):
    if isinstance(value, (tf.Tensor, tf.Variable)) or tf.is_tensor(value):
        return tf.type_spec_from_value(value)
    return value


def _real_users(tensor) -> list:
    """Ops that use `tensor`'s value (not only its shape)."""
    users = []
    for op in tensor.consumers():
        if op.type in _SHAPE_OPS:
            continue
        if op.type in _PASS_THROUGH:
            for out in op.outputs:
                users.extend(_real_users(out))
            continue
        users.append(op)
    return users
