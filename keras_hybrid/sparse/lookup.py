"""Pull and push: how the rows of a partitioned table move by id.

Forward (pull), for the ids of one lookup on this worker:
1. dedupe the ids; check them (a bad id on any worker stops all workers);
2. send each unique id to the shard that owns it (one all-to-all of ids);
3. each owner gathers the rows asked for and sends them back (all-to-all).

Backward (push) is the reverse of step 3: the gradient rows of the lookup
are summed per unique id (local aggregation: TensorFlow densifies the
gather's `IndexedSlices` over the *unique* ids only), sent back to the
owners, and arrive as the owner's gradient of its shard. The ids are not
sent again: the owner still has them from step 2. Per worker and table the
traffic is 2 u r bytes (u unique ids, r bytes per row) plus the ids and
the padding of the capacity ladder, which `CommStats` counts.
"""

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.sparse import hot_rows
from keras_hybrid.sparse import table_gradients
from keras_hybrid.sparse.shard_view import shard_view


def pull(table, ids) -> tf.Tensor:
    """Rows of `table` for `ids` (any shape), shaped `ids.shape + row`.

    Raises:
        TypeError: If `ids` are not integers.
        tf.errors.InvalidArgumentError: At run time, on every worker, if
            any worker looked up an id outside `[0, rows)`.
    """
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(
            f"Ids looked up in partitioned table {table.path!r} must be "
            f"integers. Received: ids.dtype={ids.dtype.name}"
        )
    comm = table.communicator
    flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
    all_unique, position = tf.unique(flat)
    unique, is_hot, hot = hot_rows.split_unique(table, all_unique)
    owner = table.shard_of_tensor(unique)
    order = tf.argsort(owner, stable=True)
    send_counts = tf.math.bincount(
        owner, minlength=comm.width, maxlength=comm.width, dtype=tf.int32
    )
    bad = (unique < 0) | (unique >= table.full_shape[0])
    plan = comm.plan_exchange(
        send_counts, tf.cast(tf.reduce_any(bad), tf.int32)
    )
    check = check_ids(table, plan.flags, tf.boolean_mask(unique, bad))
    with tf.control_dependencies([check]):
        local_ids = tf.gather(table.local_index_tensor(unique), order)
    asked, _ = comm.all_to_all(local_ids, send_counts, path="ids", plan=plan)
    comm.stats.record_rows_served(tf.shape(asked)[0])
    hot_rows.count_served(table, asked)
    rows = read_rows(table, asked)
    back = send_back(comm, rows, plan.reversed())
    unique_rows = tf.gather(back, tf.math.invert_permutation(order))
    if is_hot is not None:
        unique_rows = hot_rows.merge(is_hot, unique_rows, hot)
    out = tf.gather(unique_rows, position)
    row_shape = list(table.full_shape[1:])
    out = tf.reshape(out, tf.concat([tf.shape(ids), row_shape], axis=0))
    out.set_shape(ids.shape.concatenate(row_shape))
    return out


def check_ids(table, flags, bad_ids):
    """An assertion that fails on every worker if any had a bad id."""
    comm = table.communicator
    num_rows = table.full_shape[0]
    ok = tf.reduce_all(flags == 0)
    here = (
        f"Partitioned table {table.path!r} was looked up with id "
        "{} on worker "
        f"{comm.rank}; valid ids are [0, {num_rows})."
    )
    elsewhere = (
        f"Partitioned table {table.path!r} was looked up with an id "
        f"outside [0, {num_rows}) on worker(s) {{}}; worker {comm.rank} "
        "stops too."
    )
    message = tf.cond(
        tf.size(bad_ids) > 0,
        lambda: tf.strings.format(here, bad_ids[0]),
        lambda: tf.strings.format(
            elsewhere, tf.reshape(tf.where(flags != 0), [-1])
        ),
    )
    return tf.debugging.Assert(ok, [message])


def read_rows(table, local_ids):
    """Owner-side gather whose gradient is the shard's (marked) gradient."""
    # `custom_gradient` passes the variables it saw through an IdentityN;
    # they must read as the local rows, not as a whole-table stand-in.
    with shard_view():
        return table_gradients.marked_read(
            table, local_ids, table.read_local_rows
        )


def send_back(comm, rows, plan, peers=None):
    """Sends rows back to where their ids came from; pushes gradients.

    With `peers` (ranks, this worker included), both exchanges talk to
    them only (`Communicator.all_to_all_among`)."""

    def all_to_all(tensor, plan, path):
        if peers is None:
            return comm.all_to_all(tensor, plan.send_counts, path, plan)
        return comm.all_to_all_among(
            tensor, plan.send_counts, peers, path, plan
        )

    @tf.custom_gradient
    def exchange(rows):
        back, _ = all_to_all(rows, plan, "sparse_pull")

        def grad(d_back):
            # Densifying here sums the lookup's gradient per unique id.
            d_back = tf.convert_to_tensor(d_back)
            pushed, _ = all_to_all(d_back, plan.reversed(), "sparse_push")
            return pushed

        return back, grad

    return tf_compat.custom_gradient_owned_by_graph(exchange, rows)
