"""The all-to-alls of partitioned tables: bytes per worker and lookup.

Per lookup call one all-to-all of ids, one of rows (pull) and one of
gradient rows (push), plus a small fixed all-to-all of counts and
capacities; with `Design.fused` each path is fused over the step's
calls, and with `Design.hierarchical` split into an in-host and a
cross-host stage. The unique ids of a worker fall on owners as a
multinomial (the partition's bijection scatters ids), drawn with a fixed
seed to get the padding of the ladder; `count_matrices` and
`exchange_bytes` give the exact bytes of known ids instead.
"""

import numpy as np

from keras_hybrid.simulate import hot_rows
from keras_hybrid.simulate.design import Design
from keras_hybrid.simulate.exchange import COUNT_BYTES
from keras_hybrid.simulate.exchange import ID_BYTES
from keras_hybrid.simulate.exchange import PLAN_BYTES_PER_PEER
from keras_hybrid.simulate.exchange import Exchange
from keras_hybrid.simulate.exchange import ladder
from keras_hybrid.sparse.row_partition import RowPartition

# Count matrices drawn per prediction: 16, fewer from 128 workers on (the
# largest of N^2 entries varies less as N grows; a draw costs N^2).
_DRAWS = 16


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
