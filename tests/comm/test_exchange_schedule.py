"""`TFCommunicator.exchange_schedule`: the order of a traced pairwise
all-to-all's sends and receives, read from the traced graph (tracing
runs no collective, so one process can trace any rank of four)."""

import tensorflow as tf

from keras_hybrid.comm import make_communicator
from keras_hybrid.comm import pair_moves
from keras_hybrid.testing import TestCase

_SIZE = 4
_PAIR_OPS = ("CollectiveBcastSendV2", "CollectiveBcastRecvV2")


def _trace(rank: int, schedule: str) -> tf.Graph:
    """Traces an all-to-all, then a dense all-reduce of its output."""
    comm = make_communicator("tf", rank, _SIZE, 10.0, 1024)
    comm.exchange_schedule = schedule
    spec = (
        tf.TensorSpec([None, 3], tf.float32),
        tf.TensorSpec([_SIZE], tf.int32),
        tf.TensorSpec([5], tf.float32),
    )

    def step(x, counts, dense):
        received, _ = comm.all_to_all(x, counts)
        return received, comm.all_reduce([dense], path="dense")

    return tf.function(step).get_concrete_function(*spec).graph


def _peer(op, rank: int) -> int:
    """The other member of a pair op's 2-member group, from its group
    key (`low * size + high` above a base)."""
    names = [arg.name for arg in op.op_def.input_arg]
    key = int(tf.get_static_value(op.inputs[names.index("group_key")]))
    low, high = divmod(key % _SIZE**2, _SIZE)
    return high if low == rank else low


def _pair_ancestors(op) -> set:
    """The pair ops that `op` waits for, through data or control edges."""
    seen, stack = set(), list(op.control_inputs)
    stack += [t.op for t in op.inputs]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack += list(node.control_inputs) + [t.op for t in node.inputs]
    return {node for node in seen if node.type in _PAIR_OPS}


def _all_reduce_waits(schedule: str) -> int:
    """How many pair ops the traced dense all-reduce waits for."""
    graph = _trace(0, schedule)
    (op,) = [
        op for op in graph.get_operations() if op.type == "CollectiveReduceV2"
    ]
    return len(_pair_ancestors(op))


def _moves_by_wait(rank: int, schedule: str) -> list:
    """`(pair ops waited for, kind, peer)` of each pair op, sorted."""
    graph = _trace(rank, schedule)
    moves = []
    for op in graph.get_operations():
        if op.type in _PAIR_OPS:
            kind = "send" if op.type.endswith("SendV2") else "recv"
            moves.append((len(_pair_ancestors(op)), kind, _peer(op, rank)))
    return sorted(moves)


class ExchangeScheduleTest(TestCase):
    def test_shift_rounds_pair_every_receiver_with_one_sender(self):
        for size in (2, 3, 4, 8):
            rounds = [pair_moves.shift_rounds(r, size) for r in range(size)]
            for k in range(size - 1):
                sends = {r: rounds[r][k][0] for r in range(size)}
                for r in range(size):
                    # Whom r receives from in round k sends to r in it.
                    self.assertEqual(sends[rounds[r][k][1]], r)
                self.assertCountEqual(sends.values(), range(size))
        self.assertEqual(
            pair_moves.shift_rounds(1, 4), [(2, 0), (3, 3), (0, 2)]
        )

    def test_rounds_wait_for_every_earlier_round(self):
        for rank in range(_SIZE):
            want = []
            for k, (to, source) in enumerate(
                pair_moves.shift_rounds(rank, _SIZE)
            ):
                want += [(2 * k, "recv", source), (2 * k, "send", to)]
            self.assertEqual(_moves_by_wait(rank, "rounds"), sorted(want))

    def test_concurrent_moves_wait_for_none(self):
        moves = _moves_by_wait(1, "concurrent")
        self.assertEqual(len(moves), 2 * (_SIZE - 1))
        self.assertEqual({waited for waited, _, _ in moves}, {0})

    def test_dense_all_reduce_waits_for_the_exchange_in_rounds(self):
        # In rounds, every send and receive; concurrent: none (its input
        # does not depend on the exchange).
        self.assertEqual(_all_reduce_waits("rounds"), 2 * (_SIZE - 1))
        self.assertEqual(_all_reduce_waits("concurrent"), 0)

    def test_unknown_schedule_raises(self):
        with self.assertRaisesRegex(ValueError, "`exchange_schedule` must"):
            _trace(0, "staggered")
