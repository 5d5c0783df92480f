"""`comm.pair_moves`: which pairs talk in a row move, how many rows each
block carries, and an order of sends and receives that cannot deadlock
when each one blocks until its peer meets it (eager collectives)."""

import numpy as np

from keras_hybrid.comm import pair_moves
from keras_hybrid.testing import TestCase


def _run(matrix) -> list:
    """Plays every worker's `move_schedule` with blocking rendezvous: a
    step completes only when its peer's matching step is next too.
    Returns the (source, destination) transfers in the order they met;
    fails on a deadlock."""
    size = matrix.shape[0]
    queues = [pair_moves.move_schedule(r, matrix) for r in range(size)]
    done = []
    while any(queues):
        met = False
        for rank in range(size):
            if not queues[rank]:
                continue
            kind, peer = queues[rank][0]
            want = ("recv" if kind == "send" else "send", rank)
            if queues[peer] and queues[peer][0] == want:
                queues[rank].pop(0)
                queues[peer].pop(0)
                done.append((rank, peer) if kind == "send" else (peer, rank))
                met = True
        assert met, f"deadlock: {queues}"
    return done


class PairMovesTest(TestCase):
    def test_only_pairs_with_rows_talk_each_once_without_deadlock(self):
        rng = np.random.default_rng(0)
        for size in (2, 3, 4, 5, 7, 8):
            for _ in range(20):
                matrix = rng.integers(0, 3, (size, size)) * rng.integers(
                    0, 2, (size, size)
                )
                np.fill_diagonal(matrix, 0)
                want = sorted(zip(*np.nonzero(matrix), strict=True))
                got = sorted(_run(matrix))
                self.assertEqual(got, [(int(i), int(j)) for i, j in want])

    def test_a_leaver_sends_to_each_member_and_nobody_else_talks(self):
        matrix = np.zeros((4, 4), np.int64)
        matrix[3, :3] = [126, 126, 123]
        self.assertEqual(
            pair_moves.move_schedule(3, matrix),
            [("send", 0), ("send", 2), ("send", 1)],
        )
        self.assertEqual(pair_moves.move_schedule(1, matrix), [("recv", 3)])
        # Blocks at their own ladder step (126 -> 128, 123 -> 124); the
        # pairs that move nothing carry nothing, not even one row.
        blocks = pair_moves.block_rows(matrix)
        self.assertEqual(blocks[3].tolist(), [128, 128, 124, 0])
        self.assertEqual(blocks[:3].sum(), 0)
        self.assertEqual(pair_moves.wire_rows(matrix), 380)

    def test_a_pair_with_one_row_sends_one_row(self):
        matrix = np.array([[0, 1], [0, 0]])
        self.assertEqual(
            pair_moves.block_rows(matrix).tolist(), [[0, 1], [0, 0]]
        )
        self.assertEqual(pair_moves.move_schedule(0, matrix), [("send", 1)])
        self.assertEqual(pair_moves.move_schedule(1, matrix), [("recv", 0)])
