"""Count matrices of partitioned tables' exchanges, and their bytes.

The unique ids of a worker fall on owners as a multinomial (the
partition's bijection scatters ids), drawn with a fixed seed to get the
padding of the ladder. A flat exchange has one stage among all workers;
a hierarchical one (`Design.hierarchical`) an in-host and a cross-host
stage. `table_exchange` turns the stages into a step's `Exchange`s.
"""

import numpy as np

from keras_hybrid.comm.ladder import capacities_of
from keras_hybrid.costs import hot_row_savings

# Count matrices drawn per prediction: 16, fewer from 128 workers on (the
# largest of N^2 entries varies less as N grows; a draw costs N^2).
_DRAWS = 16


def draw_counts(unique: float, workers: int, rng, owners=None) -> np.ndarray:
    """`[draws, N, owners]` count matrices for `unique` ids per worker
    spread evenly over `owners` (default `N`) owners."""
    owners = workers if owners is None else owners
    draws = max(4, min(_DRAWS, 1024 // workers))
    low = int(np.floor(unique))
    extra = rng.random((draws, workers)) < unique - low
    u = low + extra
    return rng.multinomial(u.astype(np.int64), np.full(owners, 1 / owners))


def scopes(var, call, workers, batch, design, per_host, rng) -> list:
    """`[(scope, counts [draws, N, N])]` of one lookup call, or with
    `call=None` of all of a table's calls deduped together."""
    hierarchical = design.hierarchical and per_host > 1
    hierarchical = hierarchical and workers // per_host > 1
    unique = _unique(var, batch, call, design)
    if not hierarchical:
        return [("flat", draw_counts(unique, workers, rng))]
    host_unique = _unique(var, batch * per_host, call, design)
    return _hierarchical_stages(unique, host_unique, workers, per_host, rng)


def _unique(var, batch: int, call, design) -> float:
    """Cold unique ids of one call, or with `call=None` of all calls
    together (a fused exchange dedupes a table's calls as one)."""
    if call is not None:
        return var.unique_ids(batch, call) * _cold(var, batch, call, design)
    if var.calls > 1 and not var.table_unique:
        # Not measured (older profiles): the calls apart, each with its
        # own hot share; an id two calls share counts twice.
        return sum(_unique(var, batch, c, design) for c in range(var.calls))
    return var.table_unique_ids(batch) * _cold(var, batch, None, design)


def _cold(var, batch: int, call, design) -> float:
    """Share of a call's unique ids (all calls' with `call=None`) that are
    not hot rows."""
    if not design.hot_rows:
        return 1.0
    return hot_row_savings.cold_fraction(
        var.rows, design.zipf, var.lookups(batch, call), design.hot_rows
    )


def _hierarchical_stages(unique, host_unique, workers, per_host, rng):
    """Count matrices `[draws, N, N]` of the in-host and cross-host stages.

    In-host: worker (h, r) hands each host peer (h, r') its ids owned by
    local rank r' (on any host). Cross-host: (h, r) asks (h', r) for the
    host's unique ids that (h', r) owns, each once per host.
    """
    k, hosts = per_host, workers // per_host
    by_rank = draw_counts(unique, workers, rng, owners=k)  # [D, N, k]
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


def peers(scope: str, workers: int, per_host: int) -> int:
    if scope == "intra":
        return per_host - 1
    if scope == "inter":
        return workers // per_host - 1
    return workers - 1


def stage_bytes(counts, pull: bool, padding: str, peer):
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
        cap = capacities_of(counts.max(axis=(-2, -1)))
        padded = peer * cap[..., None, None]
    elif padding == "per_pair":
        padded = peer * capacities_of(off, pairwise=True)
    else:
        padded = off
    if pull:
        off, padded = off.swapaxes(-1, -2), padded.swapaxes(-1, -2)
    return off.sum(-1), padded.sum(-1), padded.sum(-2)


def peer_mask(scope: str, workers: int, per_host: int) -> np.ndarray:
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
