"""Rows of a dynamic table's keys from the workers that own them.

With several workers each key has one owner (`KeyOwners`), which holds
its row, its optimizer slots, its admission count and its eviction
state. For the keys a worker's batch looks up, deduplicated:

1. the worker sends each unique key, with its number of lookups, to its
   owner (one control collective for the counts, one all-to-all of
   `[key, uses]` pairs, charged to `ids`);
2. the owner deduplicates the keys it was asked by all workers (a key in
   two workers' slices counts once for admission, as a key twice in one
   batch does in one process, and its lookups add up for eviction), runs
   its table's admission and eviction in a training step
   (`DynamicTable.train_step`), reads the rows, puts the default row
   where a key has none, and answers (one all-to-all, `sparse_pull`);
3. backward, the gradient of each unique row goes back to the owner (one
   all-to-all, `sparse_push`), where the owner's read turns it into the
   gradient of its rows, marked as pushed (`sparse.table_gradients`): the
   strategy takes it as it is instead of summing it over workers, and
   sums duplicates per row, so one row gets one gradient entry. A key
   that read the default row gets no gradient.

The exchange is the `Communicator`'s, as for static tables
(`sparse.lookup.send_back`), so it runs on any engine that implements
`plan_exchange` and `all_to_all`.
"""

import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.sparse import lookup
from keras_hybrid.sparse import table_gradients


def rows_of(comm, table, owners, keys, uses, training: bool, default):
    """Rows `[len(keys), dim]` of the unique 1-D int64 `keys` (`uses[i]`
    lookups each), from their owners.

    Args:
        comm: The job's `Communicator`.
        table: This worker's `DynamicTable`.
        owners: `KeyOwners` of the table.
        keys: Int64 vector of unique keys.
        uses: Int64 vector: lookups of each key in this worker's batch.
        training: Bool. Whether owners admit, count and evict.
        default: Float vector `[dim]`: the row of a key with no row.
    """
    pairs = tf.stack([keys, tf.cast(uses, tf.int64)], 1)
    if comm.width == 1:
        # One worker owns every key and asks only itself, each key once
        # (an elastic job's width is the most workers it can have).
        send_counts = tf.size(keys, tf.int32)[None]
        order = None
    else:
        owner = owners.owner_of(keys)
        order = tf.argsort(owner, stable=True)
        send_counts = tf.math.bincount(
            owner, minlength=comm.width, maxlength=comm.width, dtype=tf.int32
        )
        pairs = tf.gather(pairs, order)
    plan = comm.plan_exchange(send_counts)
    asked, _ = comm.all_to_all(pairs, send_counts, path="ids", plan=plan)
    comm.stats.record_rows_served(tf.shape(asked)[0])
    answer = _answer(table, asked, training, default, order is None)
    back = lookup.send_back(comm, answer, plan.reversed())
    if order is None:
        return back
    return tf.gather(back, tf.math.invert_permutation(order))


def _answer(table, asked, training: bool, default, unique: bool = False):
    """The owner's rows for `asked` (`[n, 2]` key and uses pairs, by
    source worker): one row per pair, keys asked twice read alike.
    `unique`: no key is asked twice."""
    if unique:
        keys, uses = asked[:, 0], asked[:, 1]
    else:
        keys, where = tf.unique(asked[:, 0], out_idx=tf.int64)
        uses = tf.math.unsorted_segment_sum(
            asked[:, 1], where, tf.size(keys, tf.int64)
        )
    if training:
        rows = table.train_step(keys, uses)
    else:
        rows = table.lookup(keys)
    found = rows >= 0
    values = keras_compat.autocast_read(
        table.embeddings, read_rows(table, tf.maximum(rows, 0))
    )
    default = tf.cast(default, values.dtype)
    values = tf.where(found[:, None], values, default[None, :])
    return values if unique else tf.gather(values, where)


def read_rows(table, rows):
    """Rows `rows` of `table`'s variable, whose gradient is marked as the
    owner's pushed gradient (`table_gradients.make`)."""
    storage = keras_compat.variable_storage(table.embeddings)
    return table_gradients.marked_read(table, rows, storage.sparse_read)
