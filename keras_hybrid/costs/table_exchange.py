"""The all-to-alls of partitioned tables: bytes per worker and lookup.

Without `Design.fused`, per lookup call one all-to-all of ids, one of rows
(pull) and one of gradient rows (push), plus a small fixed all-to-all of
counts and capacities. With it (the code as built), per step: each table's
calls deduped together, one count, one id, and per dtype one pull and one
push exchange for all tables, each pair's block packed over the tables.
With `Design.hierarchical` each is split into an in-host and a cross-host
stage. The count matrices are drawn in `table_draws`; `count_matrices`
and `exchange_bytes` give the exact bytes of known ids instead.
"""

import dataclasses
import math

import numpy as np

from keras_hybrid.costs import table_draws
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.exchange import COUNT_BYTES
from keras_hybrid.costs.exchange import ID_BYTES
from keras_hybrid.costs.exchange import KEY_BYTES
from keras_hybrid.costs.exchange import PLAN_BYTES_PER_PEER
from keras_hybrid.costs.exchange import Exchange
from keras_hybrid.sharding.row_partition import RowPartition


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
    peer = table_draws.peer_mask("flat", size, 1)
    out, slots, served_slots = table_draws.stage_bytes(
        counts, False, padding, peer
    )
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


def hybrid_table(var, workers: int, batch: int, seed: int = 0) -> list:
    """The sparse exchanges of one partitioned table under the default
    `Design` (see `hybrid_tables`)."""
    return hybrid_tables([(var, seed)], workers, batch)


def hybrid_tables(
    tables, workers: int, batch: int, design=None, per_host: int = 1
) -> list:
    """The sparse exchanges of a step for partitioned tables.

    Args:
        tables: Sequence of `(var, seed)`: a table's `VariableStats` (or
            anything with `calls`, `row_bytes`, `rows`, `lookups`,
            `unique_ids` and `table_unique_ids`) and the seed of its draws.
        workers: Int. Workers in the job.
        batch: Int. Samples per worker and step.
        design: A `Design` (default: the default exchange).
        per_host: Int. Workers per host (used by `design.hierarchical`).
    """
    design = design or Design()
    dynamic = [(v, s) for v, s in tables if _is_dynamic(v)]
    if dynamic:
        # As built, a dynamic table keeps one flat exchange per lookup
        # call (`dynamic.key_exchange`): not fused, not hierarchical, no
        # hot rows.
        static = [(v, s) for v, s in tables if not _is_dynamic(v)]
        apart = dataclasses.replace(
            design, fused=False, hierarchical=False, hot_rows=0
        )
        out = hybrid_tables(static, workers, batch, design, per_host)
        return out + _per_call(dynamic, workers, batch, apart, per_host)
    if not tables:
        return []
    if design.fused:
        return _fused(tables, workers, batch, design, per_host)
    return _per_call(tables, workers, batch, design, per_host)


def _per_call(tables, workers, batch, design, per_host) -> list:
    """Each table's and call's own exchanges (`Design.fused` False)."""
    hosts = workers // per_host
    hierarchical = design.hierarchical and per_host > 1 and hosts > 1
    stages = []  # (lookup index, path, scope, sent, padded sent, padded recv)
    controls = []
    lookups = 0
    for var, seed in tables:
        for call in range(var.calls):
            rng = np.random.default_rng([seed, call])
            found = table_draws.scopes(
                var, call, workers, batch, design, per_host, rng
            )
            for scope, counts in found:
                for path in ("ids", "sparse_pull", "sparse_push"):
                    unit = _id_bytes(var) if path == "ids" else var.row_bytes
                    sent, padded, recv = table_draws.stage_bytes(
                        counts,
                        path == "sparse_pull",
                        design.padding,
                        table_draws.peer_mask(scope, workers, per_host),
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
                peers = table_draws.peers(scope, workers, per_host)
                controls.append((lookups, peers, scope))
            lookups += 1
    return _exchanges(stages, controls, lookups, hierarchical)


def _is_dynamic(var) -> bool:
    """Whether `var` is a dynamic table's stats (a table stand-in without
    the field is static)."""
    return getattr(var, "dynamic", False)


def _id_bytes(var) -> int:
    """Bytes per id of a lookup's id exchange."""
    return KEY_BYTES if _is_dynamic(var) else ID_BYTES


def _fused(tables, workers, batch, design, per_host) -> list:
    """`fused_exchanges` of count matrices drawn per table, its calls'
    ids deduped together."""
    found = [
        table_draws.scopes(
            var,
            None,
            workers,
            batch,
            design,
            per_host,
            np.random.default_rng([seed, 0]),
        )
        for var, seed in tables
    ]
    return fused_exchanges([var for var, _ in tables], found, design, per_host)


def fused_exchanges(variables, found, design, per_host: int = 1) -> list:
    """The exchanges of `sparse/fused_exchange.py` for given counts.

    One count exchange, one id all-to-all for all tables, and one pull
    and one push per dtype; each pair's block packs the tables' rows (in
    units of the dtype's gcd width, as `owner_exchange.dtype_groups` does)
    and is padded as one block.

    Args:
        variables: Sequence of tables (`row_bytes`, `dtype_bytes`).
        found: Per table, `[(scope, counts [draws, N, N])]`: `C[i, j]`,
            the table's unique ids (all its calls together) that worker i
            asks worker j for, per stage (`table_draws.scopes`).
        design: A `Design` (its `padding`).
        per_host: Int. Workers per host.
    """
    scopes = [scope for scope, _ in found[0]]
    workers = found[0][0][1].shape[-1]
    groups = _dtype_groups(variables)
    out = []
    for scope in scopes:
        peers = table_draws.peers(scope, workers, per_host)
        # `plan_packed_exchange`: per peer, one int32 count per table, a
        # flag, and the largest count of each weighting (ids, dtypes).
        control = peers * COUNT_BYTES * (len(variables) + 2 + len(groups))
        out.append(
            Exchange("all_to_all", {"control": control}, control, scope=scope)
        )
    for path, scope in _stage_order(len(scopes) > 1):
        counts = [dict(f)[scope] for f in found]
        peer = table_draws.peer_mask(scope, workers, per_host)
        weightings = groups
        if path == "ids":
            weightings = [(ID_BYTES, [1] * len(variables))]
        for unit_bytes, units in weightings:
            packed = sum(u * c for u, c in zip(units, counts, strict=True))
            sent, padded, recv = table_draws.stage_bytes(
                packed, path == "sparse_pull", design.padding, peer
            )
            stage = (sent * unit_bytes, padded * unit_bytes, recv * unit_bytes)
            out.append(_exchange([(None, path, scope, *stage)], path, scope))
    return out


def _dtype_groups(variables) -> list:
    """`(unit bytes, units per row of each table)` per dtype, as
    `owner_exchange.dtype_groups` packs rows: a unit is the gcd of the
    row widths of the dtype's tables (0 units for other dtypes). The
    element size stands for the dtype."""
    if len(variables) == 1:
        return [(variables[0].row_bytes, [1])]
    out = []
    for size in dict.fromkeys(v.dtype_bytes for v in variables):
        row_bytes = [
            v.row_bytes if v.dtype_bytes == size else 0 for v in variables
        ]
        unit = math.gcd(*row_bytes)
        out.append((unit, [r // unit for r in row_bytes]))
    return out


def _exchanges(stages, controls, lookups, hierarchical) -> list:
    """`Exchange`s of the drawn stages, one per stage and lookup call
    (`Design(fused=False)`: `lookup.pull` per table and call)."""
    out = []
    for index in range(lookups):
        for _, peers, scope in [c for c in controls if c[0] == index]:
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
