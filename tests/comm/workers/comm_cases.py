"""Rank-dependent inputs shared by `comm_scenarios.py` and its test.

Every value encodes where it came from, so a misrouted or mixed-up row
shows up as a wrong number.
"""

import numpy as np

BUCKET_BYTES = 64
# all_reduce_inputs in order: (dtype, shape). With 64-byte buckets and one
# open bucket per dtype they fuse into 5 buckets (bytes in brackets):
# [a, d] f32 (12 + 16), [b, e] i32 (24 + 4), [c] f64 (40), [f] f32 (40,
# since 28 + 40 > 64) and [g] f64 (32, since 40 + 32 > 64).
BUCKET_PAYLOADS = (28, 28, 40, 40, 32)
GATHER_EXTRA_ROWS = 16  # second tf.function call: 16 r + 17 rows.
ALL_TO_ALL_EXTRA = 30  # tf.function call: 30 more rows per destination.


def all_reduce_inputs(rank: int) -> list[np.ndarray]:
    r = rank
    return [
        (r + 1) * np.array([1, 2, 3], np.float32),  # a
        np.arange(6, dtype=np.int32).reshape(2, 3) + 10 * r,  # b
        0.5 * np.arange(5, dtype=np.float64) + r,  # c
        np.full([2, 2], r - 1.0, np.float32),  # d
        np.array([7 * r], np.int32),  # e
        np.arange(10, dtype=np.float32) * (-1) ** r,  # f
        np.array([r, -r, r * r, 1], np.float64),  # g
    ]


def gather_rows(rank: int, num_rows: int) -> np.ndarray:
    """Row i of rank r is (10 r + i, -(10 r + i))."""
    values = 10 * rank + np.arange(num_rows, dtype=np.float32)
    return np.stack([values, -values], axis=1)


def send_count(src: int, dst: int, extra: int = 0) -> int:
    """Rows `src` sends to `dst`; not symmetric in (src, dst) on purpose."""
    return 2 * src + dst + 1 + extra


def all_to_all_rows(src: int, dst: int, extra: int = 0) -> np.ndarray:
    """Row i from src to dst is (src, dst, i)."""
    n = send_count(src, dst, extra)
    rows = np.zeros([n, 3], np.float32)
    rows[:, 0] = src
    rows[:, 1] = dst
    rows[:, 2] = np.arange(n)
    return rows


def move_count(src: int, dst: int) -> int:
    """Rows `src` sends `dst` in `move_rows`: one from 0 to 1, none back;
    33 from 2 to 0 (padded to 34 per pair); workers 1 and 2 do not talk."""
    if src == dst or (src, dst) == (1, 0) or {src, dst} == {1, 2}:
        return 0
    if (src, dst) == (0, 1):
        return 1
    if (src, dst) == (2, 0):
        return 33
    return send_count(src, dst)


def move_matrix(size: int) -> np.ndarray:
    return np.array(
        [[move_count(i, j) for j in range(size)] for i in range(size)]
    )


def move_rows(src: int, dst: int) -> np.ndarray:
    """Row i moved from src to dst is (src, dst, i)."""
    n = move_count(src, dst)
    rows = np.zeros([n, 3], np.float32)
    rows[:, 0], rows[:, 1], rows[:, 2] = src, dst, np.arange(n)
    return rows


def broadcast_input(rank: int) -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3) + 100 * (rank + 1)
