"""This worker's share of the global batch, the one factor by which its
loss and gradients count.

Keras divides each worker's mean loss by the number of workers N, and the
workers' gradients are summed: exact only when every worker has B/N rows.
A global batch that does not split evenly (250 rows on 3 workers, or an
epoch's last partial batch) gives worker w `n_w` rows; its mean loss must
then count `n_w / B`, so that the sum over workers is the mean over the
global batch, as on one process. Everything that scales by worker reads
the factor here: Keras' loss scaling and its inverse for the loss tracker
(`patches/loss_scaling.py`), the gradients of a loss a custom
`train_step` averaged by itself, and the elastic path.

`HybridExtended.run_replica_step` opens a `step` around each replica
step with its inputs. The global row count comes from the unsliced batch
in an elastic job (each worker slices it in the step), else from one
scalar all-reduce (`path="control"`), made the first time the step asks
for the share and only then (a step without a loss makes none).
"""

import contextlib
import threading
import weakref

import tensorflow as tf

_local = threading.local()
# Losses scaled by this worker's share, as Keras scales a loss for
# distribution (by `id`; a tensor leaves when it is collected).
_scaled: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def mark_scaled(loss: tf.Tensor) -> tf.Tensor:
    """Records `loss` as a loss scaled by this worker's share (what Keras'
    `scale_loss_for_distribution` returns, or `compute_loss`'s total);
    returns it."""
    _scaled[id(loss)] = loss
    return loss


def is_scaled(value) -> bool:
    """Whether `value` is a loss recorded by `mark_scaled`."""
    return _scaled.get(id(value)) is value


def rows_of(structure) -> tf.Tensor | None:
    """The batch rows of the first tensor with a batch axis in
    `structure` (int64), else None."""
    for leaf in tf.nest.flatten(structure):
        if isinstance(leaf, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
            shape = leaf.shape
            if shape.rank:
                return tf.shape(leaf, out_type=tf.int64)[0]
    return None


@contextlib.contextmanager
def step(args, communicator, global_rows: tf.Tensor | None = None):
    """Within it, `share()` is this worker's share of the step's batch.

    Args:
        args: The replica step's arguments (this worker's rows).
        communicator: The strategy's `Communicator`.
        global_rows: Optional int64 tensor. The global batch's rows, when
            this worker sees the whole batch (elastic jobs).
    """
    outer = getattr(_local, "step", None)
    _local.step = {
        "rows": rows_of(args),
        "global": global_rows,
        "communicator": communicator,
        "graphs": {},
    }
    try:
        yield
    finally:
        _local.step = outer


def share() -> tf.Tensor | None:
    """`n_w / B` as a float64 scalar tensor, or None outside a step (or
    for a step without a batch axis)."""
    total = global_rows()
    if total is None:
        return None
    return tf.cast(_local.step["rows"], tf.float64) / total


def global_rows() -> tf.Tensor | None:
    """The step's global batch rows (float64), or None outside a step."""
    current = getattr(_local, "step", None)
    if current is None or current["rows"] is None:
        return None
    return _global_rows(current)


def factor(communicator) -> tf.Tensor:
    """`share()`, or `1 / N` (N read when the step runs) without one."""
    found = share()
    if found is not None:
        return found
    size = tf.cast(communicator.size_tensor(), tf.float64)
    return 1.0 / size


def _global_rows(current: dict) -> tf.Tensor:
    if current["global"] is not None:
        return tf.cast(current["global"], tf.float64)
    # One all-reduce per graph: a step traced into a scratch graph (the
    # lookups' prefetch) makes its own, as every worker does.
    graph = tf.compat.v1.get_default_graph()
    found = current["graphs"].get(graph)
    if found is None:
        rows = tf.cast(current["rows"], tf.float32)
        (total,) = current["communicator"].all_reduce([rows], path="control")
        found = tf.cast(total, tf.float64)
        current["graphs"][graph] = found
    return found
