"""The hierarchical fused exchange: ids cross hosts once per host.

With several workers per host (the simulator's
`Design.hierarchical` and `traffic._hierarchical_stages` model the same
design), worker (h, r) of host h and local rank r moves a step's rows in
three stages instead of one all-to-all over all workers:

1. in host: it hands each unique id to the worker of its host whose local
   rank is the owner's local rank, (h, r'), the owner's *relay* on host h
   (itself when r' = r); ids are checked here, so a bad id stops every
   worker before anything moves;
2. across hosts: each relay dedupes what its host asks of local rank r'
   and asks the owners (h', r') for those ids, one exchange among the
   workers of local rank r' (`owner_exchange.rows_of` with those peers);
3. the rows come back the same way: owner to relay, relay to each worker
   of its host that asked.

Backward, the pushes run in reverse: each worker sends its gradient rows
to the relays in its host, the relay sums them per id (the gradient of the
gather that fanned one row out to the host's workers), and only these
per-host sums cross hosts. Results equal the flat exchange's; only the
cross-host traffic falls, by how much a host's workers share ids.
"""

import tensorflow as tf

from keras_hybrid.sparse import lookup
from keras_hybrid.sparse import owner_exchange


def rows_of(comm, tables, uniques) -> list:
    """Rows of each table's unique ids (`[u, *row]` per table), moved
    in host, across hosts among equal local ranks, and back.

    Args:
        comm: The `Communicator`, with `hosts` set (`HostGroups`).
        tables: List of `ShardedTable`s.
        uniques: List of int64 vectors, one per table, without repeats.
    """
    hosts, rank = comm.hosts, comm.rank
    host_peers = hosts.host_peers(rank)
    relays = tf.constant(
        [row[hosts.host_of[rank]] for row in hosts.relay_of()], tf.int32
    )

    def relay_of(table, unique):
        # Bad ids are caught before anything moves; clipping only keeps
        # the gather in range until then.
        owner = table.shard_of_tensor(unique)
        return tf.gather(relays, tf.clip_by_value(owner, 0, comm.size - 1))

    sent = owner_exchange.Sent(
        comm, tables, uniques, dest=relay_of, payload=lambda t, u: u
    )
    groups = owner_exchange.dtype_groups(tables)
    plans, recv_parts = comm.plan_packed_exchange(
        sent.part_counts,
        sent.flag,
        [tf.ones([len(tables)], tf.int32)]
        + [tf.constant(u, tf.int32) for _, u in groups],
    )
    checks = [
        lookup.check_ids(
            t, owner_exchange.table_flags(plans[0].flags, i), sent.bad_ids[i]
        )
        for i, t in enumerate(tables)
    ]
    with tf.control_dependencies(checks):
        ids = tf.identity(sent.payload)
    asked, _ = comm.all_to_all_among(
        ids, plans[0].send_counts, host_peers, "ids", plans[0]
    )
    requests = owner_exchange.Asked(comm, len(tables), asked, recv_parts)
    host_uniques, positions = [], []
    for mine in requests.asked:
        unique, position = tf.unique(mine)
        host_uniques.append(unique)
        positions.append(position)
    host_rows = owner_exchange.rows_of(
        comm, tables, host_uniques, peers=hosts.rank_peers(rank)
    )
    # One row per request: the gradient of this gather sums the host's
    # pushes per id before they cross hosts.
    rows = [tf.gather(r, p) for r, p in zip(host_rows, positions, strict=True)]
    return sent.receive(comm, groups, plans[1:], requests, rows, host_peers)
