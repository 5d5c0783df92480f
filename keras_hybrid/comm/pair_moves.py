"""Who talks to whom, and in which order, in a pairwise exchange.

The TF engine's pairwise exchanges are a send and a receive per peer, each
in the pair's own 2-member group. Eagerly each send and receive blocks
until its peer has met it, so pairs meet in the rounds of a round-robin
tournament (`pairing_order`), the lower rank sending first. In a traced
step the sends and receives do not block the caller, so they may instead
run in the rounds of a shifted permutation (`shift_rounds`): a receiver
then has one sender at a time.

A row move whose counts every worker knows already (a resize's rows, a
buddy copy: `Communicator.move_rows`) lets only the pairs that move rows
talk: `move_schedule` skips a direction without rows, and `block_rows`
gives each talking pair's block its own ladder step (at least one row,
`capacity.pair_capacity`). Pure NumPy functions: every worker computes
the same.
"""

import numpy as np

from keras_hybrid.comm import ladder


def pairing_order(rank: int, size: int) -> list[int]:
    """This worker's peers in the order of a round-robin tournament.

    In round r every worker meets at most one peer, and its peer meets it
    in the same round (the circle method, with a bye when `size` is odd).
    """
    players = size + size % 2
    order = []
    for r in range(players - 1):
        if rank == players - 1:
            peer = r * (players // 2) % (players - 1)
        else:
            peer = (r - rank) % (players - 1)
            if peer == rank:
                peer = players - 1
        if peer < size:
            order.append(peer)
    return order


def shift_rounds(rank: int, size: int) -> list[tuple[int, int]]:
    """`(send_to, receive_from)` of this worker in each of `size - 1`
    rounds: in round k it sends to `(rank + k) % size` and receives from
    `(rank - k) % size`.

    Every worker's round-k peer sends to it in the same round, so when
    each round waits for the one before, each worker receives from one
    peer and sends to one peer at a time (no incast). Only for
    non-blocking sends and receives: played eagerly, round 1 is a cycle
    of blocked sends and deadlocks.

    ```python
    shift_rounds(1, 4)  # [(2, 0), (3, 3), (0, 2)]
    ```
    """
    return [((rank + k) % size, (rank - k) % size) for k in range(1, size)]


def block_rows(matrix) -> np.ndarray:
    """Rows on the wire from worker i to worker j, `[size, size]`: the
    ladder step of `matrix[i, j]` (`capacity.pair_capacity`, priced with
    `ladder.capacities_of`) where it is positive and i != j; zero
    elsewhere (that pair does not talk)."""
    matrix = np.asarray(matrix, np.int64)
    caps = ladder.capacities_of(matrix, pairwise=True)
    blocks = np.where(matrix > 0, caps, 0)
    np.fill_diagonal(blocks, 0)
    return blocks


def wire_rows(matrix) -> int:
    """Int. Rows all workers put on the wire for `matrix`, padding
    included."""
    return int(block_rows(matrix).sum())


def move_schedule(rank: int, matrix) -> list[tuple[str, int]]:
    """This worker's sends and receives for `matrix`, in the order that
    cannot deadlock eagerly: `[("send" | "recv", peer), ...]`.

    Peers come in `pairing_order`; within a pair the lower rank sends
    first; a direction without rows is left out, and so is a pair with
    none (it does not talk).

    Example: worker 3 of four leaves and hands its rows to 0, 1 and 2:

    ```python
    matrix = np.zeros((4, 4), int)
    matrix[3, :3] = 42
    move_schedule(3, matrix)  # [("send", 0), ("send", 2), ("send", 1)]
    move_schedule(1, matrix)  # [("recv", 3)]
    ```
    """
    matrix = np.asarray(matrix)
    steps = []
    for peer in pairing_order(rank, matrix.shape[0]):
        pair = [("send", peer), ("recv", peer)]
        if rank > peer:
            pair.reverse()
        for kind, other in pair:
            src, dst = (rank, other) if kind == "send" else (other, rank)
            if matrix[src, dst] > 0:
                steps.append((kind, other))
    return steps
