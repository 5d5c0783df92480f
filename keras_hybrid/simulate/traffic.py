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

The unique ids of a worker fall on owners as a multinomial (the
partition's bijection scatters ids), drawn with a fixed seed to get the
padding of the ladder.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import capacity
from keras_hybrid.sparse.row_partition import RowPartition

MODES = ("hybrid", "ps_only", "dense", "allgather")
PATHS = ("dense", "sparse_pull", "sparse_push", "ids", "padding", "control")
ID_BYTES = 8  # `lookup.pull` sends ids as int64 local row indices
COUNT_BYTES = 4  # int32 counts of `all_gather`
# `plan_exchange` sends each peer an int32 count, flag and largest count.
PLAN_BYTES_PER_PEER = 12
DEFAULT_BUCKET_BYTES = 4 * 2**20
# Count matrices drawn per prediction: 16, fewer from 128 workers on (the
# largest of N^2 entries varies less as N grows; a draw costs N^2).
_DRAWS = 16


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One collective of a step, as one worker sees it.

    Attributes:
        kind: String: `"all_reduce"`, `"all_gather"`, `"all_to_all"` or
            `"ps"` (pushes to and pulls from shards holding whole
            variables).
        bytes: Dict `{path: bytes}` this worker is charged (mean).
        wire: Float. What the algorithm moves per worker, padding
            included: the buffer of an all-reduce, the padded block of an
            all-gather, all padded blocks of an all-to-all, the dense
            bytes of `"ps"`.
        shard_bytes: Tuple of floats. For `"ps"`: bytes stored per shard.
    """

    kind: str
    bytes: dict
    wire: float
    shard_bytes: tuple = ()


def ladder(counts) -> np.ndarray:
    """Capacities of `comm.capacity` for an array of counts (int64)."""
    counts = np.asarray(counts, np.int64)
    cap = capacity.capacity_for(tf.constant(counts.reshape(-1)))
    return cap.numpy().astype(np.int64).reshape(counts.shape)


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


def count_matrices(ids_per_worker, partition: RowPartition) -> np.ndarray:
    """`C[i, j]`: unique ids worker i looked up that shard j owns.

    Args:
        ids_per_worker: Sequence, one array of ids per worker.
        partition: The table's `RowPartition`.
    """
    size = partition.num_shards
    counts = np.zeros((size, size), np.int64)
    for i, ids in enumerate(ids_per_worker):
        owner = partition.shard_of(np.unique(np.asarray(ids, np.int64)))
        counts[i] = np.bincount(owner, minlength=size)
    return counts


def exchange_bytes(counts: np.ndarray, row_bytes: int) -> dict:
    """Bytes per worker (arrays `[..., N]`) of one lookup's pull and push
    for count matrices `counts` (`[..., N, N]`); `slots` are the padded
    rows of each of its all-to-alls."""
    size = counts.shape[-1]
    own = np.diagonal(counts, axis1=-2, axis2=-1)
    out = counts.sum(axis=-1) - own
    served = counts.sum(axis=-2) - own
    peak = counts.max(axis=(-2, -1))
    slots = (size - 1) * ladder(peak)[..., None]
    control = (size - 1) * PLAN_BYTES_PER_PEER
    return {
        "ids": out * ID_BYTES,
        "sparse_pull": served * row_bytes,
        "sparse_push": out * row_bytes,
        "padding": (slots - out) * (ID_BYTES + row_bytes)
        + (slots - served) * row_bytes,
        "control": np.full(out.shape, control, np.int64),
        "slots": slots,
    }


def _draw_counts(unique: float, workers: int, rng) -> np.ndarray:
    """`[draws, N, N]` count matrices for `unique` ids per worker."""
    draws = max(4, min(_DRAWS, 1024 // workers))
    low = int(np.floor(unique))
    extra = rng.random((draws, workers)) < unique - low
    u = low + extra
    return rng.multinomial(u.astype(np.int64), np.full(workers, 1 / workers))


def hybrid_table(var, workers: int, batch: int, seed: int = 0) -> list:
    """The exchanges of a partitioned table: four per lookup call."""
    out = []
    for call in range(var.calls):
        rng = np.random.default_rng([seed, call])
        unique = var.unique_ids(batch, call)
        out += _pull_push(var, _draw_counts(unique, workers, rng))
    return out


def _pull_push(var, counts) -> list:
    """Exchanges of one lookup call, for drawn count matrices."""
    workers = counts.shape[-1]
    b = {
        k: float(v.mean())
        for k, v in exchange_bytes(counts, var.row_bytes).items()
    }
    slots = b.pop("slots")
    pads = {
        "ids": slots * ID_BYTES - b["ids"],
        "sparse_pull": slots * var.row_bytes - b["sparse_pull"],
        "sparse_push": slots * var.row_bytes - b["sparse_push"],
    }
    counts_exchange = Exchange(
        "all_to_all",
        {"control": (workers - 1) * PLAN_BYTES_PER_PEER},
        (workers - 1) * PLAN_BYTES_PER_PEER,
    )
    return [counts_exchange] + [
        Exchange(
            "all_to_all",
            {path: b[path], "padding": pads[path]},
            slots * (ID_BYTES if path == "ids" else var.row_bytes),
        )
        for path in ("ids", "sparse_pull", "sparse_push")
    ]


def allgather_table(var, workers: int, batch: int) -> list:
    """All-gather of a replicated table's `IndexedSlices` (rows, ids)."""
    n = var.lookups(batch)
    cap = int(ladder(n))
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


def step_exchanges(
    profile,
    mode: str,
    workers: int,
    batch: int,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> list:
    """Every exchange of one train step on `workers` workers.

    Args:
        profile: A `Profile`.
        mode: String, one of `MODES`.
        workers: Int. Workers in the job.
        batch: Int. Samples per worker and step.
        bucket_bytes: Int. Fusion bucket of the dense all-reduce.

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
    dense = list(profile.of_kind("dense"))
    tables = profile.of_kind("sparse")
    out = []
    if mode == "dense":
        dense = list(profile.variables)
    for seed, var in enumerate(tables):
        if mode == "dense":
            continue
        if mode == "allgather" or var.rows < workers:
            # A table with fewer rows than shards stays replicated.
            out += allgather_table(var, workers, batch)
        else:
            out += hybrid_table(var, workers, batch, seed)
    if mode == "ps_only":
        return out + ([ps_dense(dense, workers)] if dense else [])
    buckets = dense_buckets(dense, bucket_bytes)
    return out + [all_reduce(b, workers) for b in buckets]


def bytes_per_path(exchanges) -> dict:
    """Sums the exchanges' bytes per path (all `PATHS`, and `total`)."""
    out = dict.fromkeys(PATHS, 0.0)
    for e in exchanges:
        for path, value in e.bytes.items():
            out[path] += value
    out["total"] = sum(out[p] for p in PATHS)
    return out
