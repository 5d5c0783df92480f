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
from keras_hybrid.simulate import hot_rows
from keras_hybrid.simulate.design import Design
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
        scope: String. `"flat"`: among all workers; for a hierarchical
            exchange (`Design.hierarchical`), `"intra"`: among the workers
            of each host, `"inter"`: among one worker per host (one such
            group per local rank, sharing the host's interface); for an
            all-reduce, `"hierarchical"`: reduce-scatter in the host, ring
            across hosts, all-gather in the host.
    """

    kind: str
    bytes: dict
    wire: float
    shard_bytes: tuple = ()
    scope: str = "flat"


def ladder(counts, pairwise: bool = False) -> np.ndarray:
    """Capacities of `comm.capacity` for an array of counts (int64); with
    `pairwise`, of a pairwise block (`capacity.pair_capacity_for`: never
    empty)."""
    counts = np.asarray(counts, np.int64)
    rule = capacity.pair_capacity_for if pairwise else capacity.capacity_for
    cap = rule(tf.constant(counts.reshape(-1)))
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


def exchange_bytes(
    counts: np.ndarray, row_bytes: int, padding: str = "per_pair"
) -> dict:
    """Bytes per worker (arrays `[..., N]`) of one lookup's pull and push
    for count matrices `counts` (`[..., N, N]`, `C[i, j]`: ids worker i
    asks worker j for).

    `padding` is `"per_pair"` (the TF engine's pairwise exchange: the
    block i -> j padded to the ladder step of `C[i, j]`, and the pulled
    block j -> i to the same) or `"max_pair"` (`AllToAllV2`: every block
    padded to the ladder step of the largest count of the step). `slots`
    are the padded rows worker i sends in its id and push all-to-alls.
    """
    if padding not in ("per_pair", "max_pair"):
        raise ValueError(
            "`padding` must be 'per_pair' or 'max_pair'. Received: "
            f"padding={padding!r}"
        )
    size = counts.shape[-1]
    peer = _peer_mask("flat", size, 1)
    out, slots, served_slots = _stage_bytes(counts, False, padding, peer)
    served = (counts * peer).sum(axis=-2)
    control = (size - 1) * PLAN_BYTES_PER_PEER
    return {
        "ids": out * ID_BYTES,
        "sparse_pull": served * row_bytes,
        "sparse_push": out * row_bytes,
        "padding": (slots - out) * (ID_BYTES + row_bytes)
        + (served_slots - served) * row_bytes,
        "control": np.full(out.shape, control, np.int64),
        "slots": slots,
    }


def _draw_counts(unique: float, workers: int, rng, owners=None) -> np.ndarray:
    """`[draws, N, owners]` count matrices for `unique` ids per worker
    spread evenly over `owners` (default `N`) owners."""
    owners = workers if owners is None else owners
    draws = max(4, min(_DRAWS, 1024 // workers))
    low = int(np.floor(unique))
    extra = rng.random((draws, workers)) < unique - low
    u = low + extra
    return rng.multinomial(u.astype(np.int64), np.full(owners, 1 / owners))


def hybrid_table(var, workers: int, batch: int, seed: int = 0) -> list:
    """The exchanges of a partitioned table as the package runs them today:
    four all-to-alls per lookup call (counts, ids, pull, push)."""
    return hybrid_tables([(var, seed)], workers, batch)


def hybrid_tables(
    tables, workers: int, batch: int, design=None, per_host: int = 1
) -> list:
    """The sparse exchanges of a step for partitioned tables.

    Args:
        tables: Sequence of `(var, seed)`: a table's `VariableStats` (or
            anything with `calls`, `row_bytes`, `rows`, `lookups` and
            `unique_ids`) and the seed of its draws.
        workers: Int. Workers in the job.
        batch: Int. Samples per worker and step.
        design: A `Design` (default: today's exchange).
        per_host: Int. Workers per host (used by `design.hierarchical`).
    """
    design = design or Design()
    hosts = workers // per_host
    hierarchical = design.hierarchical and per_host > 1 and hosts > 1
    stages = []  # (lookup index, path, scope, sent, padded sent, padded recv)
    controls = []
    lookups = 0
    for var, seed in tables:
        for call in range(var.calls):
            rng = np.random.default_rng([seed, call])
            unique = var.unique_ids(batch, call) * _cold(
                var, batch, call, design
            )
            if hierarchical:
                host_batch = batch * per_host
                host_unique = var.unique_ids(host_batch, call) * _cold(
                    var, host_batch, call, design
                )
                found = _hierarchical_stages(
                    unique, host_unique, workers, per_host, rng
                )
            else:
                found = [("flat", _draw_counts(unique, workers, rng))]
            for scope, counts in found:
                for path in ("ids", "sparse_pull", "sparse_push"):
                    unit = ID_BYTES if path == "ids" else var.row_bytes
                    sent, padded, recv = _stage_bytes(
                        counts,
                        path == "sparse_pull",
                        design.padding,
                        _peer_mask(scope, workers, per_host),
                    )
                    stages.append(
                        (
                            lookups,
                            path,
                            scope,
                            sent * unit,
                            padded * unit,
                            recv * unit,
                        )
                    )
                peers = _peers(scope, workers, per_host)
                controls.append((lookups, scope, peers))
            lookups += 1
    return _exchanges(stages, controls, lookups, design, hierarchical)


def _cold(var, batch: int, call: int, design) -> float:
    """Share of a call's unique ids that are not hot rows."""
    if not design.hot_rows:
        return 1.0
    return hot_rows.cold_fraction(
        var.rows, design.zipf, var.lookups(batch, call), design.hot_rows
    )


def _hierarchical_stages(unique, host_unique, workers, per_host, rng):
    """Count matrices `[draws, N, N]` of the in-host and cross-host stages.

    In-host: worker (h, r) hands each host peer (h, r') its ids owned by
    local rank r' (on any host). Cross-host: (h, r) asks (h', r) for the
    host's unique ids that (h', r) owns, each once per host.
    """
    k, hosts = per_host, workers // per_host
    by_rank = _draw_counts(unique, workers, rng, owners=k)  # [D, N, k]
    draws = by_rank.shape[0]
    intra = np.zeros((draws, workers, workers), np.int64)
    worker = np.arange(workers)
    for r in range(k):
        intra[:, worker, (worker // k) * k + r] = by_rank[:, :, r]
    # [D, H, N]: host h's unique ids over the N owners.
    low = int(np.floor(host_unique))
    extra = rng.random((draws, hosts)) < host_unique - low
    host = rng.multinomial(
        (low + extra).astype(np.int64), np.full(workers, 1 / workers)
    )
    inter = np.zeros((draws, workers, workers), np.int64)
    for h in range(hosts):
        for r in range(k):
            i = h * k + r
            owners = np.arange(hosts) * k + r
            inter[:, i, owners] = host[:, h, owners]
    return [("intra", intra), ("inter", inter)]


def _peers(scope: str, workers: int, per_host: int) -> int:
    if scope == "intra":
        return per_host - 1
    if scope == "inter":
        return workers // per_host - 1
    return workers - 1


def _stage_bytes(counts, pull: bool, padding: str, peer):
    """Per worker `[..., N]`: elements sent, padded elements sent and
    padded elements received by one all-to-all of count matrices
    `counts` (`[..., N, N]`, `C[i, j]`: ids worker i asks worker j for).

    Ids and pushes go from i to j; a pull sends the rows back, j to i.
    Only entries where `peer` (`[N, N]`, 0 or 1) is 1 are sent: not self
    entries, and in a hierarchical stage not workers outside the stage.
    """
    off = counts * peer
    if padding == "max_pair":
        # Every block of the all-to-all padded to the ladder step of the
        # largest count of the step, self-owned entries included.
        cap = ladder(counts.max(axis=(-2, -1)))
        padded = peer * cap[..., None, None]
    elif padding == "per_pair":
        padded = peer * ladder(off, pairwise=True)
    else:
        padded = off
    if pull:
        off, padded = off.swapaxes(-1, -2), padded.swapaxes(-1, -2)
    return off.sum(-1), padded.sum(-1), padded.sum(-2)


def _peer_mask(scope: str, workers: int, per_host: int) -> np.ndarray:
    """`[N, N]`: 1 where worker i sends worker j a block in this stage."""
    worker = np.arange(workers)
    host, rank = worker // per_host, worker % per_host
    if scope == "intra":
        mask = host[:, None] == host[None, :]
    elif scope == "inter":
        mask = rank[:, None] == rank[None, :]
    else:
        mask = np.ones((workers, workers), bool)
    return (mask & (worker[:, None] != worker[None, :])).astype(np.int64)


def _exchanges(stages, controls, lookups, design, hierarchical) -> list:
    """`Exchange`s of the drawn stages: one per stage and lookup call, or
    fused per path and scope when `design.fused`."""
    scopes = ("intra", "inter") if hierarchical else ("flat",)
    out = []
    if design.fused:
        for scope in scopes:
            peers = next(p for _, s, p in controls if s == scope)
            # One count per lookup call and peer, and a flag and largest
            # count per peer.
            control = peers * (COUNT_BYTES * lookups + 8)
            out.append(
                Exchange(
                    "all_to_all", {"control": control}, control, scope=scope
                )
            )
        order = _stage_order(hierarchical)
        for path, scope in order:
            group = [s for s in stages if s[1] == path and s[2] == scope]
            if group:
                out.append(_exchange(group, path, scope))
        return out
    for index in range(lookups):
        for _, scope, peers in [c for c in controls if c[0] == index]:
            control = peers * PLAN_BYTES_PER_PEER
            out.append(
                Exchange(
                    "all_to_all", {"control": control}, control, scope=scope
                )
            )
        for path, scope in _stage_order(hierarchical):
            group = [
                s
                for s in stages
                if s[0] == index and s[1] == path and s[2] == scope
            ]
            out.append(_exchange(group, path, scope))
    return out


def _stage_order(hierarchical: bool) -> list:
    if not hierarchical:
        return [(p, "flat") for p in ("ids", "sparse_pull", "sparse_push")]
    return [
        ("ids", "intra"),
        ("ids", "inter"),
        ("sparse_pull", "inter"),
        ("sparse_pull", "intra"),
        ("sparse_push", "intra"),
        ("sparse_push", "inter"),
    ]


def _exchange(group, path, scope) -> Exchange:
    """One all-to-all carrying `group`'s blocks (summed per worker)."""
    sent = sum(g[3] for g in group).astype(float)
    padded = sum(g[4] for g in group).astype(float)
    recv = sum(g[5] for g in group).astype(float)
    # The all-to-all ends when its busiest worker has sent and received
    # its blocks (full-duplex links).
    wire = float(np.maximum(padded, recv).max(axis=-1).mean())
    return Exchange(
        "all_to_all",
        {path: float(sent.mean()), "padding": float((padded - sent).mean())},
        wire,
        scope=scope,
    )


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
            mode's dense all-reduce). Default: today's.
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
        if mode == "allgather" or var.rows < workers:
            # A table with fewer rows than shards stays replicated.
            out += allgather_table(var, workers, batch)
        else:
            partitioned.append((var, seed))
    if partitioned:
        out += hybrid_tables(partitioned, workers, batch, design, per_host)
        hot = [min(design.hot_rows, v.rows) for v, _ in partitioned]
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
