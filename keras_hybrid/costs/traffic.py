"""Bytes each worker sends per step, per mode and traffic path.

Charged as `comm.TFCommunicator` charges them (`CommStats` paths):

- ring all-reduce of D bytes: `2 (N - 1) D // N`, per fused bucket;
- all-gather of c rows: `(N - 1) c` rows, padded to the capacity ladder;
- all-to-all: only the rows bound for other workers, every block padded
  to the step's ladder capacity (the largest entry of the count matrix);
  counts and capacity travel in one fixed all-to-all of three int32 per
  peer (O(N) per worker).

Modes (names as in `python -m keras_hybrid.benchmark`):

- `hybrid`: tables partitioned by rows; per lookup one all-to-all of ids,
  one of rows (pull), one of gradient rows (push), plus a tiny all-gather
  of the count matrix; dense gradients ring all-reduced in buckets;
- `ps_only`: tables as in `hybrid`, and every dense variable too goes
  through the shards: it lives whole on one shard (placed greedily by
  size, as TensorFlow's parameter servers do), each worker pushes its
  gradient there and pulls the new value back;
- `dense`: tables densified into the ring all-reduce;
- `allgather`: tables replicated, their `IndexedSlices` all-gathered
  (rows and ids, no dedupe: stock TensorFlow).

A dynamic table (`VariableStats.dynamic`) has only the hybrid's exchange,
in every mode but `dense`: its keys with their counts (16 bytes each) go
to their owners per lookup call, not fused, not hierarchical, without
hot rows, as `dynamic.key_exchange` runs it.

The exchanges of partitioned tables are drawn in `table_exchange`; the
`Exchange` record and its units are in `exchange`.
"""

import dataclasses

import numpy as np

from keras_hybrid.comm.ladder import capacities_of
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.exchange import COUNT_BYTES
from keras_hybrid.costs.exchange import Exchange
from keras_hybrid.costs.table_exchange import hybrid_tables

MODES = ("hybrid", "ps_only", "dense", "allgather")
PATHS = ("dense", "sparse_pull", "sparse_push", "ids", "padding", "control")
DEFAULT_BUCKET_BYTES = 4 * 2**20


def dense_buckets(variables, bucket_bytes: int) -> list[int]:
    """Byte sizes of the fused all-reduces of `variables` (optimizer
    order), grouped by dtype as `Communicator._buckets` does."""
    buckets, open_bucket = [], {}
    for v in variables:
        key = v.dtype_bytes
        if key not in open_bucket or (
            buckets[open_bucket[key]] + v.bytes > bucket_bytes
        ):
            open_bucket[key] = len(buckets)
            buckets.append(0)
        buckets[open_bucket[key]] += v.bytes
    return buckets


def all_reduce(nbytes: int, workers: int, path: str = "dense") -> Exchange:
    sent = 2 * (workers - 1) * int(nbytes) // workers
    return Exchange("all_reduce", {path: sent}, float(nbytes))


def allgather_table(var, workers: int, batch: int) -> list:
    """All-gather of a replicated table's `IndexedSlices` (rows, ids)."""
    n = var.lookups(batch)
    cap = int(capacities_of(n))
    peers = workers - 1
    out = []
    for path, unit in (
        ("sparse_push", var.row_bytes),
        ("ids", var.index_bytes),
    ):
        sizes = Exchange("all_gather", {"control": peers * COUNT_BYTES}, 4)
        out += [
            sizes,
            Exchange(
                "all_gather",
                {path: peers * n * unit, "padding": peers * (cap - n) * unit},
                cap * unit,
            ),
        ]
    return out


def greedy_shards(variables, workers: int) -> tuple:
    """Bytes per shard when whole variables go, largest first, to the
    least loaded shard (TensorFlow's greedy load balancing)."""
    loads = [0.0] * workers
    for v in sorted(variables, key=lambda v: -v.bytes):
        loads[int(np.argmin(loads))] += v.bytes
    return tuple(loads)


def ps_dense(variables, workers: int) -> Exchange:
    """Dense variables through whole-variable shards: push and pull."""
    loads = greedy_shards(variables, workers)
    total = sum(loads)
    # Worker w pushes gradients of what others hold and serves its own
    # variables to the N - 1 others: 2 (N - 1) / N D on average.
    sent = float(np.mean([total - x + (workers - 1) * x for x in loads]))
    return Exchange("ps", {"dense": sent}, total, loads)


@dataclasses.dataclass(frozen=True)
class _HotRows:
    """The hot rows of one table, as a dense variable of the all-reduce."""

    bytes: int
    dtype_bytes: int


def step_exchanges(
    profile,
    mode: str,
    workers: int,
    batch: int,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    design=None,
    per_host: int = 1,
) -> list:
    """Every exchange of one train step on `workers` workers.

    Args:
        profile: A `Profile`.
        mode: String, one of `MODES`.
        workers: Int. Workers in the job.
        batch: Int. Samples per worker and step.
        bucket_bytes: Int. Fusion bucket of the dense all-reduce.
        design: A `Design` of the hybrid's exchange (`hybrid` and
            `ps_only` tables; its `hierarchical` also applies to every
            mode's dense all-reduce). Default: `Design()`.
        per_host: Int. Workers per host (for `design.hierarchical`).

    Raises:
        ValueError: If `mode` is unknown or `workers`/`batch` < 1.
    """
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}. Received: {mode!r}")
    for name, value in (("workers", workers), ("batch", batch)):
        if value < 1:
            raise ValueError(f"`{name}` must be >= 1. Received: {value!r}")
    if workers == 1:
        return []
    design = design or Design()
    dense = list(profile.of_kind("dense"))
    tables = profile.of_kind("sparse")
    out = []
    if mode == "dense":
        dense = list(profile.variables)
    partitioned = []
    for seed, var in enumerate(tables):
        if mode == "dense":
            continue
        if not var.dynamic and (mode == "allgather" or var.rows < workers):
            # A table with fewer rows than shards stays replicated.
            out += allgather_table(var, workers, batch)
        else:
            partitioned.append((var, seed))
    if partitioned:
        out += hybrid_tables(partitioned, workers, batch, design, per_host)
        # Hot rows are static tables' (a dynamic table has none).
        hot = [
            0 if v.dynamic else min(design.hot_rows, v.rows)
            for v, _ in partitioned
        ]
        # As built (`sparse/hot_rows.py`): one all-reduce of the hot rows'
        # values (forward) and one of their gradient (backward) per table.
        dense += [
            _HotRows(h * v.row_bytes, v.dtype_bytes)
            for h, (v, _) in zip(hot, partitioned, strict=True)
            if h
            for _ in range(2)
        ]
    if mode == "ps_only":
        return out + ([ps_dense(dense, workers)] if dense else [])
    buckets = dense_buckets(dense, bucket_bytes)
    hosts = workers // per_host
    if design.hierarchical and per_host > 1 and hosts > 1:
        return out + [
            hierarchical_all_reduce(b, per_host, hosts) for b in buckets
        ]
    return out + [all_reduce(b, workers) for b in buckets]


def hierarchical_all_reduce(nbytes: int, per_host: int, hosts: int) -> Exchange:
    """Reduce-scatter among a host's k workers, ring all-reduce of each
    1/k slice across the hosts, all-gather in the host: bytes per worker
    `2 (k - 1) D / k + 2 (H - 1) D / (k H)`."""
    k = per_host
    sent = 2 * (k - 1) * nbytes / k + 2 * (hosts - 1) * nbytes / (k * hosts)
    return Exchange(
        "all_reduce", {"dense": sent}, float(nbytes), scope="hierarchical"
    )


def cross_host_sparse_bytes(exchanges, workers: int, per_host: int) -> float:
    """Bytes of tables (ids, rows, padding) that one host's interface sends
    per step: a flat exchange spreads a worker's bytes evenly over its
    N - 1 peers, N - k of them on other hosts."""
    if workers // per_host < 2:
        return 0.0
    sparse = ("ids", "sparse_pull", "sparse_push", "padding")
    total = 0.0
    for e in exchanges:
        if e.kind not in ("all_to_all", "all_gather"):
            continue
        sent = sum(e.bytes.get(p, 0.0) for p in sparse)
        if e.scope == "inter":
            total += per_host * sent
        elif e.scope == "flat":
            total += per_host * sent * (workers - per_host) / (workers - 1)
    return total


def bytes_per_path(exchanges) -> dict:
    """Sums the exchanges' bytes per path (all `PATHS`, and `total`)."""
    out = dict.fromkeys(PATHS, 0.0)
    for e in exchanges:
        for path, value in e.bytes.items():
            out[path] += value
    out["total"] = sum(out[p] for p in PATHS)
    return out
