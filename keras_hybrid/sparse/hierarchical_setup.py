"""Whether a job's sparse exchange runs hierarchically over its hosts.

The strategy reads the hosts of all workers from the cluster
(`comm.host_groups`) and sets them on the communicator, which then counts
the bytes that cross hosts. `HybridStrategy(hierarchical=...)` chooses the
exchange: `True` runs the hierarchical one (`sparse.hierarchical_exchange`)
wherever it can, `False` the flat one, `None` lets the cost model decide
at the first traced step (`sparse.hierarchical_choice`). Where it cannot run
(one host, one worker per host, hosts with unequal worker counts, an
elastic job, the Horovod engine) the exchange is flat and the reason is
logged once: a fallback, not an error, so one script runs on a laptop and
on a cluster.
"""

import tensorflow as tf
from absl import logging

from keras_hybrid.comm import host_groups
from keras_hybrid.sparse import hierarchical_choice


def check(hierarchical) -> None:
    """Raises `TypeError` if `hierarchical` is not `None` or a bool."""
    if not isinstance(hierarchical, (bool, type(None))):
        raise TypeError(
            "`hierarchical` must be `True`, `False` or `None` (the cost "
            f"model decides). Received: hierarchical={hierarchical!r}"
        )


def configure(comm, info, engine: str, elastic: bool, hierarchical) -> None:
    """Sets `comm.hosts` and `comm.hierarchical` (`True`, `False`, or
    `None` until the cost model decides) for the job of `info`
    (`ClusterInfo`)."""
    comm.hosts, comm.hierarchical = None, False
    if info.size == 1:
        return
    reason = ""
    if engine != "tf":
        reason = f"the {engine!r} engine does not know the hosts"
    elif elastic:
        reason = "an elastic job's members change"
    else:
        names = host_groups.host_names(info.cluster_spec, "worker", info.size)
        comm.hosts, reason = host_groups.from_hosts(names)
    if hierarchical is False:
        return
    if comm.hosts is None:
        log = logging.warning if hierarchical else logging.info
        log(
            "keras-hybrid: the sparse exchange is flat (hierarchical=%r): %s.",
            hierarchical,
            reason,
        )
        return
    comm.hierarchical = hierarchical
    logging.info(
        "keras-hybrid: %d hosts x %d workers; hierarchical sparse exchange %s.",
        comm.hosts.num_hosts,
        comm.hosts.per_host,
        "on" if hierarchical else "decided by the cost model at the first step",
    )


def decide(comm, calls: list, ids: list, link) -> None:
    """Sets `comm.hierarchical` from the cost model (`hierarchical_choice`)
    at the first fused exchange of a job that left it to the model.

    `calls` are the step's prefetched lookup calls (with `.table`) and
    `ids` their ids. Each worker counts the ids its calls send from their
    static shapes; the workers agree on the largest counts in one eager
    all-reduce (the first traced step runs on every worker), so all take
    the same decision even when their slices of a batch differ by a row.
    """
    counts = [i.shape.num_elements() for i in ids]
    counts = [-1 if c is None else c for c in counts]
    with tf.init_scope():
        agreed = comm.all_reduce(
            [tf.constant(counts, tf.int64)], op="max", path="control"
        )[0].numpy()
    if (agreed < 0).any():
        comm.hierarchical = False
        logging.info(
            "keras-hybrid: flat sparse exchange: the ids of a lookup have "
            "no static size, which the cost model needs. Pass "
            "hierarchical=True to turn it on."
        )
        return
    by_table: dict = {}
    for call, count in zip(calls, agreed, strict=True):
        table = call.table
        by_table.setdefault(id(table), (table, []))[1].append(int(count))
    stats = [
        hierarchical_choice.table_stats(
            t.path, t.full_shape, t.dtype.size, n, comm.hosts.per_host
        )
        for t, n in by_table.values()
    ]
    hosts = comm.hosts
    with tf.init_scope():  # the simulator computes eagerly
        flat, hier, pays = hierarchical_choice.verdict(stats, hosts, link)
    comm.hierarchical = bool(pays)
    logging.info(
        "keras-hybrid: hierarchical sparse exchange %s: the cost model "
        "(uniform ids, links %s between hosts) gives %.3f ms a step "
        "against %.3f ms flat (on below %.0f%% of flat).",
        "on" if comm.hierarchical else "off",
        link,
        1e3 * hier,
        1e3 * flat,
        100 * (1 - hierarchical_choice.MARGIN),
    )
