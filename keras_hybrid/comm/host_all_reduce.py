"""A two-level all-reduce over the hosts of a job.

With k workers on each of H hosts (`HostGroups`), the TF engine reduces a
dense bucket of D bytes in three collectives instead of one ring over all
N workers, as the simulator's `traffic.hierarchical_all_reduce` models:

1. all-reduce among the k workers of each host (in-host links);
2. worker (h, r) all-reduces slice r of k of the result with the workers
   of local rank r on the other hosts: the k local ranks share the
   host's interface, each with D / k bytes;
3. all-gather of the k slices among the workers of each host.

A host's interface then carries 2 (H - 1) / H D bytes a step, where a
flat ring over hosts of interleaved ranks crosses hosts at every hop.
Each level is its own collective group: host h is group
`_HOST_GROUP_BASE + h`, local rank r `_RANK_GROUP_BASE + r`.
"""

import math

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.comm import byte_sizes
from keras_hybrid.comm import instance_keys

# Below the pairwise exchange's groups (1 << 24) and above the elastic
# state groups (contract/elastic_board.py).
_HOST_GROUP_BASE = 1 << 22
_RANK_GROUP_BASE = (1 << 22) + (1 << 20)
_MERGE_OPS = {"sum": "Add", "mean": "Add", "max": "Max"}


def all_reduce(comm, flat: tf.Tensor, op: str, path: str) -> tf.Tensor:
    """`flat` (a 1-D bucket) reduced over all workers with `op`, in host,
    across hosts on a slice, and gathered in host; charged to `path`."""
    hosts, rank = comm.hosts, comm.rank
    k, num_hosts = hosts.per_host, hosts.num_hosts
    local = hosts.local_of[rank]
    what = instance_keys.describe([flat])
    # "mean" divides at both levels: by k in host, by H across hosts.
    final = "Div" if op == "mean" else "Id"
    host_group = _HOST_GROUP_BASE + hosts.host_of[rank]
    in_host = comm.collective_in_group(
        tf_compat.all_reduce,
        flat,
        (k, host_group),
        f"host_all_reduce/in/{op}/{what}",
        merge_op=_MERGE_OPS[op],
        final_op=final,
    )
    size = flat.shape.num_elements()
    chunk = math.ceil(size / k)
    padded = tf.pad(in_host, [[0, k * chunk - size]])
    mine = padded[local * chunk : (local + 1) * chunk]
    across = comm.collective_in_group(
        tf_compat.all_reduce,
        mine,
        (num_hosts, _RANK_GROUP_BASE + local),
        f"host_all_reduce/across/{op}/{what}",
        merge_op=_MERGE_OPS[op],
        final_op=final,
    )
    # Gathered in group-rank order, which is rank order: local rank order.
    gathered = comm.collective_in_group(
        tf_compat.all_gather,
        across,
        (k, host_group),
        f"host_all_reduce/gather/{what}",
    )
    _charge(comm, flat, k, num_hosts, path)
    return gathered[:size]


def _charge(comm, flat, k, num_hosts, path) -> None:
    """Bytes as ring algorithms send them: 2 (k - 1) / k D in host,
    2 (H - 1) / H of a D / k slice across hosts, (k - 1) D / k gathered."""
    nbytes = byte_sizes.static_bytes(flat)
    slice_bytes = math.ceil(nbytes / k)
    across = 2 * (num_hosts - 1) * slice_bytes // num_hosts
    in_host = 2 * (k - 1) * nbytes // k + (k - 1) * slice_bytes
    comm.stats.record(path, in_host + across, calls=3)
    comm.stats.record_cross_host(path, across, across)
