"""Whether the hierarchical exchange pays, by the simulator's cost model.

`HybridStrategy(hierarchical=None)` decides at the first fused exchange,
when the tables and the number of ids each lookup call sends are known:
the simulator (`costs.traffic.hybrid_tables` and
`costs.cost_model.exchange_seconds`, the same functions and formulas as
docs/simulator.md) prices one step's sparse exchanges flat and
hierarchical on the job's hosts, and the cheaper one runs.

The ids a host's workers share are not known before they run, so the
model assumes uniform ids: n lookups of a table of V rows touch
`V (1 - (1 - 1/V)^n)` unique rows, for one worker's batch and for its
host's k batches. Uniform draws share the fewest ids of any id
distribution (skewed ids, Zipf, share more), so where the model says the
hierarchical exchange pays, it pays for real ids too; where it does not,
`hierarchical=True` still turns it on. It must beat the flat exchange by
`MARGIN`, what the model leaves out (see there). Links: between hosts
the strategy's `link` (`keras_hybrid.Link`), inside a host the
simulator's default (`ClusterSpec`: 10 GB/s, 5 us).
"""

import math

import numpy as np

from keras_hybrid.costs import cost_model
from keras_hybrid.costs import traffic
from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.profile import VariableStats

# The model prices bytes and messages, not the CPU time of the in-host
# stage's extra collectives, gathers and dedupe, nor that its stages run
# one after the other. Measured on 2 emulated hosts x 2 workers (lm,
# 20 000 rows, uniform ids, 100 Mbit/s; docs/benchmarks.md) the model
# gave the hierarchical exchange 3% less time and it took 8-10% more, so
# a predicted gain must exceed this share of the flat exchange's time.
MARGIN = 0.1


def uniform_unique(rows: int, lookups: float) -> float:
    """Expected unique ids of `lookups` uniform draws from `rows` rows."""
    if lookups <= 0:
        return 0.0
    return rows * -math.expm1(lookups * math.log1p(-1.0 / rows))


def table_stats(path: str, shape, dtype_bytes: int, lookups, per_host: int):
    """`VariableStats` of a table whose calls look up `lookups` ids each
    (one worker's step) under uniform ids, at one worker's batch (batch
    size 1) and its host's (batch size `per_host`)."""
    rows = int(shape[0])
    return VariableStats(
        path=path,
        kind="sparse",
        shape=tuple(int(d) for d in shape),
        dtype_bytes=int(dtype_bytes),
        lookups_per_sample=tuple(float(n) for n in lookups),
        batch_sizes=(1, per_host),
        unique=tuple(
            (uniform_unique(rows, n), uniform_unique(rows, per_host * n))
            for n in lookups
        ),
    )


def step_seconds(stats: list, hosts, link, hierarchical: bool) -> float:
    """Seconds of one step's sparse exchanges of `stats` (`VariableStats`)
    on `hosts` (`HostGroups`) whose hosts are joined by `link`."""
    workers = len(hosts.host_of)
    spec = ClusterSpec(
        workers=workers,
        accelerators_per_host=hosts.per_host,
        inter_bandwidth=link.bytes_per_second,
        inter_latency=link.seconds,
    )
    exchanges = traffic.hybrid_tables(
        [(s, seed) for seed, s in enumerate(stats)],
        workers,
        1,
        Design(hierarchical=hierarchical),
        per_host=hosts.per_host,
    )
    return float(
        np.sum([cost_model.exchange_seconds(e, spec) for e in exchanges])
    )


def verdict(stats: list, hosts, link) -> tuple:
    """`(flat seconds, hierarchical seconds, pays)` of one step's sparse
    exchanges of `stats` on `hosts` and `link`: it pays when the model
    puts it more than `MARGIN` below the flat exchange."""
    flat = step_seconds(stats, hosts, link, hierarchical=False)
    hier = step_seconds(stats, hosts, link, hierarchical=True)
    return flat, hier, hier < (1 - MARGIN) * flat


def pays(stats: list, hosts, link) -> bool:
    """Whether the hierarchical exchange of `stats` pays on `hosts` and
    `link` (see `verdict`)."""
    return verdict(stats, hosts, link)[2]
