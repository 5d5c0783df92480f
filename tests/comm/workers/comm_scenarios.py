"""Pool scenario: runs every collective on rank-dependent inputs and
returns the output.

Run by `tests/comm/test_collectives_multiprocess.py` on the pools of 2
and 3 workers, under `keras-hybrid-run` or `horovodrun` (the engine
follows the launcher). Each case returns its outputs as numpy values and
the `CommStats` delta it caused; a case that raises returns its traceback
so the test can show it, and the scenario goes on with the next case.
"""

import time
import traceback

import comm_cases  # noqa: I001  (sits beside this module)
import numpy as np
import tensorflow as tf

import keras_hybrid as kh


def _np(tree):
    return tf.nest.map_structure(lambda t: np.asarray(t), tree)


def _measure(comm, fn, *args):
    """Runs `fn(*args)`; returns its numpy output and the stats it added."""
    before = comm.stats.snapshot()
    out = fn(*args)
    return {"out": _np(out), "stats": comm.stats.delta(before)}


def all_reduce_eager(comm):
    tensors = [tf.constant(x) for x in comm_cases.all_reduce_inputs(comm.rank)]
    return {
        op: _measure(comm, comm.all_reduce, tensors, op)
        for op in ("sum", "mean", "max")
    }


def all_reduce_function(comm):
    @tf.function
    def step(tensors):
        doubled = [t + t for t in tensors]
        return {
            "sum": comm.all_reduce(tensors, "sum"),
            "mean": comm.all_reduce(tensors, "mean"),
            "max": comm.all_reduce(tensors, "max"),
            # Same content as "sum" in the same graph: a second key.
            "sum_doubled": comm.all_reduce(doubled, "sum"),
        }

    inputs = comm_cases.all_reduce_inputs(comm.rank)
    return [
        _measure(comm, step, [tf.constant(x * k) for x in inputs])
        for k in (1, 3)
    ]


def all_reduce_unknown_shape(comm):
    # A gradient through `tf.tensordot` of a partly unknown shape has no
    # static shape (keras-hub's Transformer feedforward kernels).
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 3], tf.float32),
            tf.TensorSpec([2], tf.float32),
        ]
    )
    def step(unknown, known):
        return comm.all_reduce([known, unknown, unknown * 2.0], "sum")

    r = comm.rank + 1.0
    rows = np.arange(12, dtype=np.float32).reshape(4, 3) * r
    return _measure(comm, step, tf.constant(rows), tf.constant([r, -r]))


def all_reduce_repeated(comm):
    # Eager calls of one content reuse one instance key; a value mixed up
    # between consecutive calls would show here.
    return _measure(
        comm,
        lambda: [
            comm.all_reduce([tf.constant([k * (comm.rank + 1.0)])])[0]
            for k in range(20)
        ],
    )


def all_gather_eager(comm):
    rows = comm_cases.gather_rows(comm.rank, comm.rank + 1)
    return _measure(comm, comm.all_gather, tf.constant(rows), "sparse_pull")


def all_gather_function(comm):
    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def gather(x):
        return comm.all_gather(x, "sparse_pull")

    r = comm.rank
    first = comm_cases.gather_rows(r, r + 1)
    second = comm_cases.gather_rows(r, comm_cases.GATHER_EXTRA_ROWS * r + 17)
    return [_measure(comm, gather, tf.constant(x)) for x in (first, second)]


def all_gather_keyed(comm):
    # A key first named while the step is traced; the third call has
    # fewer rows than the second, so Horovod pads up to the mark.
    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def gather(x):
        return comm.all_gather(x, "sparse_pull", key="site0")

    r = comm.rank
    sizes = (r + 1, comm_cases.GATHER_EXTRA_ROWS * r + 17, r + 1)
    return [
        _measure(comm, gather, tf.constant(comm_cases.gather_rows(r, k)))
        for k in sizes
    ]


def _all_to_all_input(comm, extra):
    blocks = [
        comm_cases.all_to_all_rows(comm.rank, dst, extra)
        for dst in range(comm.size)
    ]
    counts = [len(b) for b in blocks]
    return tf.constant(np.concatenate(blocks)), tf.constant(counts, tf.int32)


def all_to_all_eager(comm):
    x, counts = _all_to_all_input(comm, 0)
    return _measure(comm, comm.all_to_all, x, counts, "sparse_push")


def all_to_all_function(comm):
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 3], tf.float32),
            tf.TensorSpec([comm.size], tf.int32),
        ]
    )
    def exchange(x, counts):
        return comm.all_to_all(x, counts, "sparse_push")

    return [
        _measure(comm, exchange, *_all_to_all_input(comm, extra))
        for extra in (0, comm_cases.ALL_TO_ALL_EXTRA)
    ]


def move_rows(comm):
    """`move_rows` with each exchange of the engine (TF: pairwise, then
    padded; Horovod: its own)."""
    matrix = comm_cases.move_matrix(comm.size)
    x = np.concatenate(
        [comm_cases.move_rows(comm.rank, d) for d in range(comm.size)]
    )
    exchanges = ("pairwise", "padded") if hasattr(comm, "exchange") else ("",)
    out = {}
    for exchange in exchanges:
        saved = getattr(comm, "exchange", None)
        if exchange:
            comm.exchange = exchange
        try:
            out[exchange] = _measure(
                comm, comm.move_rows, tf.constant(x), matrix, "sparse_push"
            )
        finally:
            if exchange:
                comm.exchange = saved
    return out


def broadcast(comm):
    x = tf.constant(comm_cases.broadcast_input(comm.rank))
    last = comm.size - 1
    return {
        "root0": _measure(comm, comm.broadcast, x, 0),
        "root_last": _measure(comm, comm.broadcast, x, last),
        "root_last_function": _measure(
            comm, tf.function(lambda t: comm.broadcast(t, last)), x
        ),
    }


def barrier(comm):
    # Rank 0 arrives late: nobody may leave before it has arrived.
    if comm.rank == 0:
        time.sleep(1.0)
    entered = time.time()
    result = _measure(comm, comm.barrier)
    result["entered"] = entered
    result["left"] = time.time()
    return result


# A collective that fails aborts every later one in the process, so the
# cases least likely to fail run first.
CASES = (
    barrier,
    broadcast,
    all_reduce_eager,
    all_reduce_function,
    all_reduce_unknown_shape,
    all_reduce_repeated,
    all_gather_eager,
    all_gather_function,
    all_gather_keyed,
    all_to_all_eager,
    all_to_all_function,
    move_rows,
)


def all_cases(timeout: float = 30) -> dict:
    """Runs every case of `CASES` in order on one strategy."""
    with kh.HybridStrategy(
        timeout_seconds=timeout, bucket_bytes=comm_cases.BUCKET_BYTES
    ) as strategy:
        comm = strategy.communicator
        results = {
            "rank": comm.rank,
            "size": comm.size,
            "engine": strategy.engine,
        }
        for case in CASES:
            try:
                results[case.__name__] = case(comm)
            except Exception:  # noqa: BLE001  (the test shows the traceback)
                results[case.__name__] = {"error": traceback.format_exc()}
        return results
