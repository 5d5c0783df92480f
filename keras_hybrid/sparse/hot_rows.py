"""`HotRows`: a table's most requested rows, served to every worker at once.

Under Zipf-distributed ids a few rows are asked for by every worker at every
step, so the shards that own them serve far more than the others. With hot
rows on (`HybridStrategy(hot_rows=K)`), each partitioned table keeps a set of
K ids, the same on every worker, held in a variable (`ids`, sorted):

- a lookup splits its unique ids: cold ids go through the exchange as
  before (`lookup.pull`, `fused_exchange`); hot ids take their rows from
  one all-reduce of the K rows, to which each owner gives its own hot rows
  and the others zeros (`values`), so every worker gets all K and no owner
  answers more requests than another;
- backward, the gradient of the K rows is summed over workers by one
  all-reduce (the transpose of the forward one, a dense gradient) and each
  owner adds its rows of it to the table's gradient
  (`table_gradients.make`), which the optimizer applies to the shard as
  before. The shard stays the only copy of every row and of its optimizer
  slots, so results, checkpoints and Adam's semantics are unchanged.
- the set is chosen from running counts (`choose`, an eager collective;
  `keras_hybrid.callbacks.HotRowsRefresh` calls it every R steps): each
  owner counts the cold ids asked of it (deduplicated per worker and
  step), each worker counts the hot ids it used; `choose` folds the hot
  counts into the owners', all-gathers each owner's K best (O(N K)) and
  keeps the K best overall, ties to the smaller id. Changing the set moves
  no rows (the owners hold them) and needs no re-trace.

A step costs 2 all-reduces of K rows per table (charged to `dense`; a
fused step packs all tables into one forward and one backward all-reduce,
bucketed per dtype) instead of the hot rows' share of the pull and push.
"""

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.sparse import table_gradients
from keras_hybrid.sparse.shard_view import shard_view


class HotRows:
    """The hot set of one partitioned table (see the module docstring).

    Args:
        table: `ShardedTable` (role `"table"`).
        num_rows: Int. Rows in the hot set (at most the table's rows).

    Example:

    ```python
    hot = HotRows(table, 64)
    is_hot, slot = hot.split(unique_ids)   # inside a lookup
    rows = tf.gather(hot.values(), slot)   # one all-reduce
    hot.choose()                           # eagerly, on every worker
    ```

    Raises:
        ValueError: If `num_rows` is not positive.
    """

    def __init__(self, table, num_rows: int) -> None:
        if num_rows <= 0:
            raise ValueError(
                "`hot_rows` must be positive. Received: "
                f"hot_rows={num_rows} for table {table.path!r}."
            )
        self.table = table
        self.num_rows = min(int(num_rows), table.full_shape[0])
        k = self.num_rows
        with tf.init_scope():
            self.ids = tf_compat.plain_variable(
                np.arange(k, dtype=np.int64),
                name=f"{table.path}/hot_ids",
                trainable=False,
            )
            self.hot_counts = tf_compat.plain_variable(
                np.zeros(k, np.float32),
                name=f"{table.path}/hot_counts",
                trainable=False,
            )
            self.served_counts = tf_compat.plain_variable(
                np.zeros(table.local_rows, np.float32),
                name=f"{table.path}/served_counts",
                trainable=False,
            )

    # -- inside a step

    def split(self, unique: tf.Tensor) -> tuple:
        """`(is_hot, slot)` of each of `unique` (int64 ids): whether it is
        in the hot set, and its position there (0 where not hot)."""
        ids = self.ids.read_value()
        slot = tf.searchsorted(ids, unique, side="left", out_type=tf.int32)
        slot = tf.minimum(slot, self.num_rows - 1)
        is_hot = tf.equal(tf.gather(ids, slot), unique)
        return is_hot, tf.where(is_hot, slot, tf.zeros_like(slot))

    def count_hot(self, hot_slots: tf.Tensor) -> None:
        """Counts one use of each of `hot_slots` (unique, this worker)."""
        ones = tf.ones(tf.shape(hot_slots), tf.float32)
        self.hot_counts.scatter_add(tf.IndexedSlices(ones, hot_slots))

    def count_served(self, local_ids: tf.Tensor) -> None:
        """Counts the rows asked of this shard (local indices)."""
        ones = tf.ones(tf.shape(local_ids), tf.float32)
        self.served_counts.scatter_add(tf.IndexedSlices(ones, local_ids))

    def values(self) -> tf.Tensor:
        """The K hot rows `[K, ...]` on every worker (see `values_of`)."""
        return values_of([self.table])[0]

    def owned(self) -> tuple:
        """`(mine, local)`: which hot ids this shard owns, and their local
        rows (0 where not owned), read at run time."""
        table = self.table
        ids = self.ids.read_value()
        mine = tf.equal(table.shard_of_tensor(ids), table.communicator.rank)
        return mine, tf.where(mine, table.local_index_tensor(ids), 0)

    # -- between steps

    def choose(self) -> np.ndarray:
        """Makes the K most requested rows the hot set, on every worker (a
        collective, eager). Returns the new ids (sorted)."""
        table, comm = self.table, self.table.communicator
        partition, k = table.partition, self.num_rows
        (totals,) = comm.all_reduce(
            [self.hot_counts.read_value()], path="control"
        )
        old = self.ids.numpy()
        mine = partition.shard_of(old) == comm.rank
        served = self.served_counts.numpy()
        np.add.at(
            served, partition.local_index(old[mine]), totals.numpy()[mine]
        )
        top = np.argsort(-served, kind="stable")[:k]
        cand_ids = np.full(k, -1, np.int64)
        cand_counts = np.full(k, -1.0, np.float32)
        cand_ids[: len(top)] = partition.ids_on_shard(comm.rank)[top]
        cand_counts[: len(top)] = served[top]
        all_ids, _ = comm.all_gather(tf.constant(cand_ids), path="control")
        counts, _ = comm.all_gather(tf.constant(cand_counts), path="control")
        new = pick(all_ids.numpy(), counts.numpy(), k)
        self.served_counts.assign(served)
        self.hot_counts.assign(np.zeros(k, np.float32))
        self.ids.assign(new)
        return new


def values_of(tables: list) -> list:
    """The hot rows of each of `tables` on every worker, `[K, ...]` each,
    by one all-reduce (bucketed per dtype) of each owner's rows (zeros
    elsewhere). Backward, one all-reduce sums their gradients, and each
    owner takes its rows as the table's gradient."""
    comm = tables[0].communicator
    owned = [t.hot.owned() for t in tables]

    def keep(table, mine):
        return tf.reshape(mine, [-1] + [1] * (len(table.full_shape) - 1))

    @tf.custom_gradient
    def gathered(*locals_):
        rows = []
        for table, (mine, _), local in zip(tables, owned, locals_, strict=True):
            read = table.read_local_rows(local)
            rows.append(tf.where(keep(table, mine), read, tf.zeros_like(read)))
        totals = comm.all_reduce(rows, path="dense")

        def grad(*d_totals, variables):
            summed = comm.all_reduce(
                [tf.convert_to_tensor(d) for d in d_totals], path="dense"
            )
            by_table = []
            for table, (mine, _), local, g in zip(
                tables, owned, locals_, summed, strict=True
            ):
                by_table.append(
                    table_gradients.make(
                        table,
                        tf.boolean_mask(g, mine),
                        tf.boolean_mask(local, mine),
                    )
                )
            # Variables come in the tape's order; match them to tables.
            out = [
                next(g for t, g in zip(tables, by_table, strict=True) if t is v)
                for v in variables
            ]
            return [None] * len(locals_), out

        return totals, grad

    with shard_view():
        return list(
            tf_compat.custom_gradient_owned_by_graph(
                gathered, *[local for _, local in owned]
            )
        )


def pick(ids: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """The `k` ids of highest count (ties: smaller id first), sorted;
    entries with id -1 are padding and never chosen.

    Raises:
        ValueError: If fewer than `k` real candidates were given.
    """
    real = ids >= 0
    ids, counts = ids[real], counts[real]
    if len(ids) < k:
        raise ValueError(
            f"Choosing {k} hot rows needs at least {k} candidates. "
            f"Received: {len(ids)}."
        )
    order = np.lexsort((ids, -counts))
    return np.sort(ids[order[:k]])


def merge(is_hot, cold_rows, hot_rows) -> tf.Tensor:
    """Rows of all unique ids, in their order, from the rows of the cold
    ones and of the hot ones (each in unique-id order)."""
    cold_at = tf.cast(tf.where(~is_hot)[:, 0], tf.int32)
    hot_at = tf.cast(tf.where(is_hot)[:, 0], tf.int32)
    return tf.dynamic_stitch([cold_at, hot_at], [cold_rows, hot_rows])


def split_unique(table, unique, values=None) -> tuple:
    """`(cold, is_hot, hot_rows)` for the unique ids of one lookup (or one
    step's lookups) of `table`; `(unique, None, None)` without hot rows.
    `values` are the table's hot rows if already all-reduced."""
    hot = getattr(table, "hot", None)
    if hot is None:
        return unique, None, None
    is_hot, slot = hot.split(unique)
    hot_slots = tf.boolean_mask(slot, is_hot)
    hot.count_hot(hot_slots)
    if values is None:
        values = hot.values()
    rows = tf.gather(values, hot_slots)
    return tf.boolean_mask(unique, ~is_hot), is_hot, rows


def count_served(table, local_ids) -> None:
    """Counts rows asked of `table`'s shard, if it has hot rows."""
    hot = getattr(table, "hot", None)
    if hot is not None:
        hot.count_served(local_ids)
