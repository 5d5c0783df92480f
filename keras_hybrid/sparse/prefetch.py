"""Finds the ids of a step's lookups before the step runs.

A traced step fuses the exchanges of all its lookups (`fused_exchange`)
only if every lookup's ids are known before the model runs: the next layer
uses a lookup's rows as soon as the gather returns. So before the strategy
traces a step, `discover` traces its Python function once more into a
scratch graph that is never run. There every gather of a partitioned table
records `(table, call index, ids)` and answers with local rows (no
communication). The computations of the ids, and only those, are then
pruned out of the scratch graph (`tf.compat.v1.wrap_function(...).prune`)
into a function of the step's inputs; the optimizer's and metrics' ops of
the scratch trace are left behind.

A lookup keeps the per-call exchange (`lookup.pull`) when its ids cannot
be computed ahead: they depend on another lookup's rows, on a random or
other stateful op, the gather sits inside a control-flow branch or loop,
or the pruning fails. This is logged once per reason.
"""

import dataclasses
import warnings

import tensorflow as tf
from absl import logging

from keras_hybrid.utils.thread_flag import ThreadFlag

# Stateful ops whose value an ids computation may read: they give the same
# value ahead of the step as in it (the step's updates come after its
# lookups), and the run-time check in `fused_exchange` catches the rest.
_READS = (
    "ReadVariableOp",
    # A gather of rows; `ops.take` asks a table's row count of one.
    "ResourceGather",
    "VarHandleOp",
    "VariableShape",
    "LookupTableFindV2",
    "LookupTableSizeV2",
    "Assert",
    "NoOp",
    "Placeholder",
)

_active = ThreadFlag()
_recordings: "list[_Recording]" = []
_logged: set = set()


@dataclasses.dataclass
class Call:
    """One gather of a partitioned table in a traced step.

    Attributes:
        table: The `ShardedTable` gathered from.
        index: Int. How many gathers of this table came before it.
        prefetched: Bool. Whether its ids are computed ahead of the step.
        shape: `tf.TensorShape` of its ids in the scratch trace.
    """

    table: object
    index: int
    prefetched: bool
    shape: tf.TensorShape


@dataclasses.dataclass
class PrefetchPlan:
    """The gathers of one traced step and how to compute their ids ahead.

    Attributes:
        calls: List of `Call`, in trace order.
        ids_fn: Callable on the step's flat input tensors, returning the
            ids of the prefetched calls in order; `None` if none are.
    """

    calls: list
    ids_fn: object = None

    def prefetched(self) -> list:
        return [c for c in self.calls if c.prefetched]


class _Recording:
    def __init__(self) -> None:
        self.graph = None
        self.calls: list = []  # (table, ids tensor, stand-in tensor, graph)
        self.counts: dict = {}


def active() -> bool:
    """Whether a prefetch discovery trace runs on this thread."""
    return bool(_active)


def record(table, ids, stand_in) -> None:
    """Records a gather of `table` by `ids`, answered with `stand_in`."""
    rec = _recordings[-1]
    rec.calls.append((table, ids, stand_in, tf.compat.v1.get_default_graph()))


def discover(fn, args, kwargs) -> PrefetchPlan:
    """Traces `fn(*args, **kwargs)` into a scratch graph (never run) and
    returns its gathers and a function computing their ids ahead."""
    python_fn = getattr(fn, "python_function", fn)
    flat = tf.nest.flatten((args, kwargs), expand_composites=True)
    where = [i for i, v in enumerate(flat) if tf.is_tensor(v)]
    specs = [tf.TensorSpec(flat[i].shape, flat[i].dtype) for i in where]
    rec = _Recording()

    def scratch_step(*tensors):
        leaves = list(flat)
        for i, t in zip(where, tensors, strict=True):
            leaves[i] = t
        a, k = tf.nest.pack_sequence_as(
            (args, kwargs), leaves, expand_composites=True
        )
        rec.graph = tf.compat.v1.get_default_graph()
        python_fn(*a, **k)

    _recordings.append(rec)
    try:
        with _active.scope(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped = tf.compat.v1.wrap_function(scratch_step, specs)
    except Exception as error:  # noqa: BLE001 - the real trace will tell
        # E.g. Python control flow on tensors, which `wrap_function` does
        # not convert: the step itself still runs, one exchange per lookup.
        log_own_exchange(f"the scratch trace failed ({error!r:.200})", "*")
        return PrefetchPlan([])
    finally:
        _recordings.pop()
    return _plan(rec, wrapped, len(specs), where)


def flat_inputs(plan_where, args, kwargs) -> list:
    """The step's tensors in the order `PrefetchPlan.ids_fn` takes them."""
    flat = tf.nest.flatten((args, kwargs), expand_composites=True)
    return [flat[i] for i in plan_where]


def _plan(rec, wrapped, num_inputs, where) -> PrefetchPlan:
    calls, fetches, counts = [], [], {}
    stand_ins = {s.op for _, _, s, _ in rec.calls}
    for table, ids, _, graph in rec.calls:
        index = counts.get(id(table), 0)
        counts[id(table)] = index + 1
        reason = _why_not(ids, graph, rec.graph, stand_ins)
        if reason:
            log_own_exchange(reason, table.path)
        calls.append(Call(table, index, not reason, ids.shape))
        if not reason:
            fetches.append(ids)
    plan = PrefetchPlan(calls)
    if not fetches:
        return plan
    feeds = wrapped.graph.inputs[:num_inputs]
    try:
        pruned = wrapped.prune(feeds, fetches)
    except Exception as error:  # noqa: BLE001 - any failure falls back
        log_own_exchange(
            f"pruning failed ({type(error).__name__}: {error})", ""
        )
        for call in calls:
            call.prefetched = False
        return plan

    shapes = [c.shape for c in calls if c.prefetched]

    def ids_fn(args, kwargs):
        ids = pruned(*flat_inputs(where, args, kwargs))
        # A pruned function's outputs can lose their static shapes (ids
        # from a `tf.lookup` table come out with an unknown rank); the
        # scratch trace saw them.
        for tensor, shape in zip(ids, shapes, strict=True):
            tensor.set_shape(shape)
        return ids

    plan.ids_fn = ids_fn
    return plan


def _why_not(ids, graph, step_graph, stand_ins) -> str:
    """Why the ids of a gather cannot be computed ahead, or ""."""
    if graph is not step_graph:
        return "the gather is inside a control-flow branch or loop"
    seen, stack = set(), [ids.op]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if op in stand_ins:
            return "its ids depend on another lookup's rows"
        if op.op_def.is_stateful and op.type not in _READS:
            return f"its ids depend on stateful op {op.type}"
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return ""


def log_own_exchange(reason: str, path: str) -> None:
    """Logs once per reason and table that a lookup keeps its own
    exchange."""
    if (reason, path) in _logged:
        return
    _logged.add((reason, path))
    logging.info(
        "keras-hybrid: a lookup of table %r keeps its own exchange "
        "(not fused with the step's others): %s.",
        path,
        reason,
    )
