"""The default engine: TensorFlow's own V2 collectives over gRPC.

The V2 ops come from `_compat.tf` (`all_reduce`, `all_gather`,
`all_to_all`, `broadcast_send`, `broadcast_recv`): they take the instance
key as a tensor, which lets one traced op choose its key per step.
"""

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.comm import byte_sizes
from keras_hybrid.comm import capacity
from keras_hybrid.comm import host_all_reduce
from keras_hybrid.comm import instance_keys
from keras_hybrid.comm import padded_blocks
from keras_hybrid.comm import pair_moves
from keras_hybrid.comm.communicator import Communicator
from keras_hybrid.comm.communicator import split_flat
from keras_hybrid.comm.exchange_order import ExchangeOrder
from keras_hybrid.comm.tf_row_moves import RowMoves

_GROUP_KEY = 1
# "pairwise": a send and a receive per peer, each block padded to its own
# count's ladder step; "padded": one AllToAllV2 whose blocks are all padded
# to the largest count of all pairs.
EXCHANGES = ("pairwise", "padded")
# When the pairwise exchange's sends and receives start in a traced step:
# "concurrent", all at once; "rounds", `size - 1` rounds in which each
# worker sends to one peer and receives from one (`pair_moves.shift_rounds`),
# so no receiver has several senders at once (incast into shallow switch
# buffers).
EXCHANGE_SCHEDULES = ("concurrent", "rounds")
_MERGE_OPS = {"sum": "Add", "mean": "Add", "max": "Max"}


class TFCommunicator(RowMoves, Communicator):
    """`Communicator` on `CollectiveReduceV2`/`GatherV2`/`BcastSendV2`.

    A variable-sized all-to-all (`exchange="pairwise"`, the default) is a
    send and a receive per peer in the pair's own 2-member group
    (`CollectiveBcastSendV2`/`RecvV2`), each block padded to the capacity
    ladder's step of its own count, so padding is per pair, not the
    largest count of all pairs; the counts travel in one fixed
    `AllToAllV2` of three int32 per peer (`plan_exchange`, O(N) per
    worker). V2 collectives remember the shape of each instance key, so
    every direction of a pair has a block of keys, one per ladder step.
    `exchange="padded"` (and an elastic job's traced steps, whose group
    changes) sends one `AllToAllV2` whose blocks are all padded to the
    largest count. `move_rows` (a resize's rows, a buddy copy: counts that
    every worker knows) talks only between the pairs that move rows, in an
    elastic job too, over groups keyed per membership generation.

    `exchange_schedule` orders a traced step's pairwise sends and receives
    (`EXCHANGE_SCHEDULES`). `"concurrent"` (the default) issues them all
    at once: each worker receives from all its peers together, which
    overflows shallow switch buffers (incast). `"rounds"` runs `size - 1`
    rounds of a fixed permutation, each waiting for the one before: in
    round k a worker sends to `(rank + k) % size` and receives from
    `(rank - k) % size`. A broadcast receive pulls its data from the
    sender, so a receiver has one sender at a time. A dense all-reduce
    traced after such an exchange in the same graph starts once it has
    finished (`ExchangeOrder`), so its ring is not a second flow into each
    receiver. Only the order changes, never the values; eager calls keep
    the round-robin order that cannot deadlock.

    ```python
    strategy.communicator.exchange_schedule = "rounds"
    ```

    Sizes are charged as a ring algorithm sends them: an all-reduce of D
    bytes sends 2 (N - 1) / N D, an all-gather of D local bytes (N - 1) D,
    an all-to-all the rows bound for other workers (one call each).
    """

    def __init__(self, rank, size, timeout_seconds, bucket_bytes) -> None:
        super().__init__(rank, size, timeout_seconds, bucket_bytes)
        self._keys = instance_keys.InstanceKeys()
        # An elastic job's `ElasticMembership`: its group size and key are
        # tensors, so a traced step follows the current members.
        self.membership = None
        # How a variable-sized all-to-all moves its blocks, one of
        # `EXCHANGES`; an elastic job's traced all-to-alls always pad.
        self.exchange = "pairwise"
        # When a traced pairwise exchange's moves start, one of
        # `EXCHANGE_SCHEDULES`.
        self.exchange_schedule = "concurrent"
        self._exchange_order = ExchangeOrder()

    # -- all-reduce ---------------------------------------------------------

    def _all_reduce_flat(self, tensors, op, path):
        flat = tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)
        if self._two_level(path) and flat.shape.is_fully_defined():
            reduced = host_all_reduce.all_reduce(self, flat, op, path)
        else:
            key = self._keys.base_key(
                f"all_reduce/{op}/{instance_keys.describe(tensors)}"
            )
            waits = []
            if path == "dense" and self.exchange_schedule == "rounds":
                waits = self._exchange_order.waits()
            with tf.control_dependencies(waits):
                reduced = self._collective(
                    tf_compat.all_reduce,
                    flat,
                    key,
                    merge_op=_MERGE_OPS[op],
                    final_op="Div" if op == "mean" else "Id",
                )
            nbytes = byte_sizes.bytes_of(flat)
            self.stats.record(path, 2 * (self.size - 1) * nbytes // self.size)
        return split_flat(reduced, tensors)

    def _two_level(self, path: str) -> bool:
        """Whether dense gradients reduce in host first (`host_all_reduce`):
        with the hierarchical exchange on; small control reductions keep
        one collective."""
        return (
            path == "dense"
            and self.hierarchical is True
            and self.hosts is not None
            and self.membership is None
        )

    def collective_in_group(self, op, tensor, group, content, **kwargs):
        """Runs a V2 collective `op` in `group`, `(size, group key)`, with
        an instance key derived from `content`."""
        group_size, group_key = group
        return op(
            tensor,
            group_size=group_size,
            group_key=group_key,
            instance_key=self._keys.base_key(content),
            timeout=self._op_timeout(),
            **kwargs,
        )

    # -- variable-sized exchanges -------------------------------------------

    def all_gather(self, tensor, path="control", key=None):
        del key  # Its collectives are keyed by capacity bucket already.
        tensor = tf.convert_to_tensor(tensor)
        rows = tf.shape(tensor)[0]
        if self.size == 1:
            return tf.identity(tensor), tf.reshape(rows, [1])
        base = self._keys.base_key(
            "all_gather/" + instance_keys.describe([tensor], rows_vary=True)
        )
        sizes = self._gather_fixed(tf.reshape(rows, [1]), "control")
        key, cap = self._keys.bucketed_key(base, tf.reduce_max(sizes))
        gathered = self._collective(
            tf_compat.all_gather, padded_blocks.pad_rows(tensor, cap), key
        )
        peers = self.size - 1
        others = tf.reduce_sum(sizes) - rows
        self._charge_rows(
            path,
            tensor,
            (peers * rows, peers * (cap - rows)),
            (others, peers * cap - others),
        )
        return padded_blocks.unpad(gathered, sizes, cap, self.size), sizes

    def _gather_fixed(self, tensor, path):
        """All-gather of a tensor whose shape is the same on all workers."""
        key = self._keys.base_key(
            "gather_fixed/" + instance_keys.describe([tensor])
        )
        gathered = self._collective(tf_compat.all_gather, tensor, key)
        self.stats.record(
            path,
            (self.size - 1) * byte_sizes.static_bytes(tensor),
        )
        return gathered

    def all_to_all(self, tensor, send_counts, path="control", plan=None):
        tensor = tf.convert_to_tensor(tensor)
        send_counts = tf.cast(tf.reshape(send_counts, [self.width]), tf.int32)
        if self.exchange not in EXCHANGES:
            raise ValueError(
                f"`exchange` must be one of {EXCHANGES}. Received: "
                f"exchange={self.exchange!r}"
            )
        if self.size == 1:
            return tf.identity(tensor), send_counts
        if plan is None:
            plan = self.plan_exchange(send_counts)
        if self.membership is not None or self.exchange == "padded":
            return self._all_to_all_padded(tensor, send_counts, path, plan)
        return self._all_to_all_pairwise(tensor, send_counts, path, plan)

    def all_to_all_among(
        self, tensor, send_counts, peers, path="control", plan=None
    ):
        """See `Communicator.all_to_all_among`: the pairwise exchange
        talks to `peers` only; a padded one runs over all workers."""
        if (
            self.size == 1
            or self.membership is not None
            or self.exchange == "padded"
        ):
            return self.all_to_all(tensor, send_counts, path, plan)
        tensor = tf.convert_to_tensor(tensor)
        send_counts = tf.cast(tf.reshape(send_counts, [self.width]), tf.int32)
        if plan is None:
            plan = self.plan_exchange(send_counts)
        return self._all_to_all_pairwise(tensor, send_counts, path, plan, peers)

    def _all_to_all_padded(self, tensor, send_counts, path, plan):
        """One `AllToAllV2`, every block padded to the plan's capacity.

        The number of blocks is the group size when the step runs (a
        tensor in an elastic job), so a traced step follows a resize.
        """
        base = self._keys.base_key(
            "all_to_all/" + instance_keys.describe([tensor], rows_vary=True)
        )
        recv_counts = plan.recv_counts
        key, cap = self._keys.bucketed_key(base, plan.capacity)
        size, rank = self.size_tensor(), self._rank_tensor()
        # AllToAllV2 sends slice j of axis 0 to worker j: one block of `cap`
        # rows per member.
        padded = padded_blocks.to_blocks(tensor, send_counts[:size], cap)
        received = self._collective(tf_compat.all_to_all, padded, key)
        received = padded_blocks.from_blocks(received, recv_counts[:size], cap)
        sent_rows = tf.reduce_sum(send_counts) - send_counts[rank]
        recv_rows = tf.reduce_sum(recv_counts) - recv_counts[rank]
        slots = (size - 1) * cap
        self._charge_rows(
            path,
            tensor,
            (sent_rows, slots - sent_rows),
            (recv_rows, slots - recv_rows),
        )
        if self.hosts is not None and self.membership is None:
            others = sum(
                h != self.hosts.host_of[self.rank] for h in self.hosts.host_of
            )
            wire = byte_sizes.i64(others * cap) * byte_sizes.row_bytes(tensor)
            self.stats.record_cross_host(path, wire, wire)
        return received, recv_counts

    def _all_to_all_pairwise(self, tensor, send_counts, path, plan, peers=None):
        """A send and a receive per peer (of `peers`, all by default), each
        block padded to its own count's ladder step, in the order of
        `_pairwise_rounds`.
        """
        recv_counts = plan.recv_counts
        content = "all_to_all/" + instance_keys.describe(
            [tensor], rows_vary=True
        )
        row_shape = tf.shape(tensor)[1:]
        blocks = tf.split(tensor, send_counts, num=self.size)
        send_index, send_rows = self._pair_buckets(send_counts)
        recv_index, recv_rows = self._pair_buckets(recv_counts)
        recv_counts_of = tf.unstack(recv_counts, num=self.width)
        received = list(blocks)  # The own block stays; the others arrive.
        sends, receives, send_caps, recv_caps = [], [], [], []
        cross_sent, cross_recv = [], []

        def send(peer):
            base = self._keys.base_key(f"{content}/{self.rank}>{peer}")
            key, cap = base + send_index[peer], send_rows[peer]
            padded = padded_blocks.pad_rows(blocks[peer], cap)
            sends.append(self._pair_send(padded, peer, key))
            send_caps.append(cap)
            if self._crosses_hosts(peer):
                cross_sent.append(cap)
            return sends[-1]

        def receive(peer):
            base = self._keys.base_key(f"{content}/{peer}>{self.rank}")
            key, cap = base + recv_index[peer], recv_rows[peer]
            # Not before this worker's own input exists: a step that fails
            # before it (a bad id) leaves no receive waiting.
            with tf.control_dependencies([tensor]):
                shape = tf.concat([[cap], row_shape], 0)
            padded = self._pair_recv(shape, tensor.dtype, peer, key)
            receives.append(padded)
            received[peer] = padded[: recv_counts_of[peer]]
            recv_caps.append(cap)
            if self._crosses_hosts(peer):
                cross_recv.append(cap)
            return padded

        talk = set(range(self.size) if peers is None else peers)
        for peer in set(range(self.size)) - talk:
            # Counts outside `peers` are zero: an empty block.
            received[peer] = blocks[peer]
        run = {"send": send, "recv": receive}
        previous = []
        for moves in self._pairwise_rounds():
            with tf.control_dependencies(previous):
                done = [run[kind](peer) for kind, peer in moves if peer in talk]
            previous = done or previous
        if self.exchange_schedule == "rounds":
            self._exchange_order.record(previous)
        sent_rows = tf.reduce_sum(send_counts) - send_counts[self.rank]
        recv_rows = tf.reduce_sum(recv_counts) - recv_counts[self.rank]
        self._charge_rows(
            path,
            tensor,
            (sent_rows, padded_blocks.total(send_caps) - sent_rows),
            (recv_rows, padded_blocks.total(recv_caps) - recv_rows),
        )
        if cross_sent or cross_recv:
            row_bytes = byte_sizes.row_bytes(tensor)
            self.stats.record_cross_host(
                path,
                byte_sizes.i64(padded_blocks.total(cross_sent)) * row_bytes,
                byte_sizes.i64(padded_blocks.total(cross_recv)) * row_bytes,
            )
        received = tf.concat(received, axis=0)
        # A send's output feeds nothing. Control edges from the sends to the
        # result do not keep them: Grappler merges the concat of two
        # lookups' pushes (TF adds the IndexedSlices of one table by
        # concatenating their values) into one concat and drops the
        # control edge that hangs on the inner concat's axis constant, which
        # would prune the sends and leave the peers' receives waiting
        # forever. A receive whose result nothing needs is pruned too: the
        # push of a frozen table (a layer with `trainable=False`: the tape
        # still traces the push, but no gradient of the table is asked
        # for) kept its sends and lost its receives, and every worker
        # waited on its peers' sends forever. In a traced function each
        # send and each receive is therefore a must-run op of the
        # function, so that all workers run the same moves; eagerly they
        # have run already.
        moves = sends + receives
        if not tf.executing_eagerly() and not all(
            tf_compat.run_independently(m.op) for m in moves
        ):
            with tf.control_dependencies(moves):
                received = tf.identity(received)
        return received, tf.identity(recv_counts)

    def _pairwise_rounds(self) -> list[list[tuple[str, int]]]:
        """The pairwise exchange's `("send" | "recv", peer)` moves, in
        rounds; a round's moves start once the round before has finished.

        Eagerly each move blocks until its peer meets it, so pairs meet in
        the rounds of a round-robin tournament (`pair_moves.pairing_order`),
        the lower rank sending first, whatever the schedule. In a graph the
        moves do not block: `"concurrent"` issues them all at once, one
        round; `"rounds"` runs `pair_moves.shift_rounds`, one send and one
        receive per round, so a receiver pulls from one sender at a time.

        Raises:
            ValueError: If `exchange_schedule` is not in
                `EXCHANGE_SCHEDULES`.
        """
        if self.exchange_schedule not in EXCHANGE_SCHEDULES:
            raise ValueError(
                "`exchange_schedule` must be one of "
                f"{EXCHANGE_SCHEDULES}. Received: "
                f"exchange_schedule={self.exchange_schedule!r}"
            )
        if self.exchange_schedule == "rounds" and not tf.executing_eagerly():
            return [
                [("send", to), ("recv", source)]
                for to, source in pair_moves.shift_rounds(self.rank, self.size)
            ]
        moves = []
        for peer in pair_moves.pairing_order(self.rank, self.size):
            pair = [("send", peer), ("recv", peer)]
            if self.rank > peer:
                pair.reverse()
            moves.extend(pair)
        return [moves]

    def _crosses_hosts(self, peer: int) -> bool:
        """Whether `peer` runs on another host (known hosts only)."""
        hosts = self.hosts
        return hosts is not None and (
            hosts.host_of[peer] != hosts.host_of[self.rank]
        )

    def _op_timeout(self) -> float:
        """See `_collective`: only eager calls get TF's per-op timeout."""
        return self.timeout_seconds if tf.executing_eagerly() else 0

    def _all_to_all_fixed(self, tensor, path):
        tensor = tf.convert_to_tensor(tensor)
        key = self._keys.base_key(
            "all_to_all_fixed/" + instance_keys.describe([tensor])
        )
        size = self.size_tensor()
        if self.membership is None:
            received = self._collective(tf_compat.all_to_all, tensor, key)
        else:
            # Rows for ranks beyond the group's current size stay home (an
            # elastic job's `width` is its most workers).
            received = self._collective(
                tf_compat.all_to_all, tensor[:size], key
            )
            received = tf.pad(
                received,
                [[0, self.width - size]] + [[0, 0]] * (tensor.shape.rank - 1),
            )
            received.set_shape(tensor.shape)
        row_bytes = byte_sizes.static_bytes(tensor) // self.width
        self.stats.record(path, tf.cast(size - 1, tf.int64) * row_bytes)
        return received

    @property
    def width(self) -> int:
        if self.membership is not None:
            return self.membership.max_np
        return self.size

    def size_tensor(self) -> tf.Tensor:
        if self.membership is not None:
            return self.membership.group_tensors()[0]
        return super().size_tensor()

    def _rank_tensor(self):
        """This worker's rank; in an elastic job read when the step runs."""
        if self.membership is not None:
            return tf.cast(self.membership.rank_and_size()[0], tf.int32)
        return self.rank

    def _collective(self, op, tensor, key, **kwargs):
        """Runs a V2 collective `op` in this job's group.

        Only eager calls get TF's per-op timeout: TF spends a thread per
        call on it for the whole timeout, which a training step's
        collectives would pile up by the thousand. Inside a `tf.function`,
        `PeerWatchdog` stops a step whose peer is gone.
        """
        group_size, group_key = self.size, _GROUP_KEY
        if self.membership is not None:
            group_size, group_key = self.membership.group_tensors()
        return op(
            tensor,
            group_size=group_size,
            group_key=group_key,
            instance_key=key,
            timeout=self._op_timeout(),
            **kwargs,
        )

    def _pair_buckets(self, counts) -> tuple:
        """`(bucket indices, block rows)` of every peer's block, as lists
        of scalars by rank: the ladder is looked up once for all peers
        (`capacity.pair_capacity`), not once per pair."""
        index = capacity.bucket_index(counts)
        rows = capacity.pair_capacity(index)
        return (
            tf.unstack(index, num=self.width),
            tf.unstack(rows, num=self.width),
        )

    def _charge_rows(self, path, tensor, sent, received):
        """Charges rows of `tensor`'s row size to `path`, and padding.

        `sent` and `received` are `(rows, padding_rows)` pairs.
        """
        self.stats.record_all(
            [
                (path, sent[0], received[0], 1),
                ("padding", sent[1], received[1], 0),
            ],
            unit=byte_sizes.row_bytes(tensor),
        )

    # -- broadcast

    def broadcast(self, tensor, root=0, path="control"):
        tensor = tf.convert_to_tensor(tensor)
        if self.size == 1:
            return tf.identity(tensor)
        key = self._keys.base_key(
            f"broadcast/{root}/" + instance_keys.describe([tensor])
        )
        nbytes = byte_sizes.static_bytes(tensor)
        if self.rank == root:
            self.stats.record(path, (self.size - 1) * nbytes, received_bytes=0)
            return self._collective(tf_compat.broadcast_send, tensor, key)
        # Receivers send nothing; one call.
        self.stats.record(path, 0, received_bytes=nbytes)
        return self._collective(
            tf_compat.broadcast_recv,
            tf.shape(tensor),
            key,
            dtype=tensor.dtype,
        )
