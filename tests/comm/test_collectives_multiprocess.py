"""Every collective of each engine on 2 and 3 real worker processes.

Inputs depend on the rank (see `workers/comm_cases.py`), so each expected
value below is a sum, max or concatenation you can redo by hand. Byte
counts follow the ring model of `TFCommunicator`'s docstring (the Horovod
engine charges the same model, without padding and without the control
collectives it does not need), and every launch runs under a timeout, so a
hang fails the test.
"""

import functools
import os

import numpy as np
import pytest

from keras_hybrid.comm import PATHS
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario
from tests.comm.workers import comm_cases

SCENARIOS = os.path.join(
    os.path.dirname(__file__), "workers", "comm_scenarios.py"
)
NUM_WORKERS = [2, 3]
pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.parametrize("n", NUM_WORKERS),
    pytest.mark.parametrize("engine", engines_under_test()),
]

# Bytes one all-reduce of the 7 test tensors charges to "dense": 5 buckets
# of (28, 28, 40, 40, 32) bytes, each 2 (N - 1) D // N.
# N=2: 28 + 28 + 40 + 40 + 32; N=3: 37 + 37 + 53 + 53 + 42.
ALL_REDUCE_BYTES = {2: 168, 3: 222}
NUM_BUCKETS = 5
# all_gather, 2nd call: 16 r + 17 rows, max 33 (N=2) or 49 (N=3) rows.
GATHER_CAPACITY = {2: 34, 3: 50}


def pair_capacity(count: int) -> int:
    """The capacity ladder (comm/capacity.py) below 64: exact up to 32,
    then steps of 2. Each all-to-all block is padded to its own count's
    step, not to the largest count of all pairs."""
    assert count <= 64
    return count if count <= 32 else 2 * -(-count // 2)


@functools.cache
def launch(engine: str, num_workers: int) -> dict:
    run = run_scenario(
        SCENARIOS, "all_cases", num_workers, engine=engine, timeout=180
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    return run.results


def case(engine: str, num_workers: int, name: str) -> dict:
    """rank -> what the worker's case `name` saved; fails on its error."""
    out = {}
    for rank, result in launch(engine, num_workers).items():
        assert result["rank"] == rank and result["size"] == num_workers
        assert result["engine"] == engine
        value = result[name]
        if isinstance(value, dict) and "error" in value:
            pytest.fail(f"rank {rank} raised in {name}:\n{value['error']}")
        out[rank] = value
    return out


def assert_stats(delta, **expected):
    """`delta` has exactly `expected` {path: (bytes, calls[, received])},
    zero elsewhere; received bytes default to the bytes sent."""
    want = {
        path: {"bytes": 0, "received_bytes": 0, "calls": 0} for path in PATHS
    }
    for path, (num_bytes, calls, *received) in expected.items():
        want[path] = {
            "bytes": num_bytes,
            "received_bytes": received[0] if received else num_bytes,
            "calls": calls,
        }
    assert delta == want


def assert_equal(got, want, msg=""):
    want = np.asarray(want)
    assert got.dtype == want.dtype, msg
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=msg)


# -- all_reduce


def reference_all_reduce(n: int, op: str, scale: float = 1) -> list:
    """One process's reduction of every rank's inputs."""
    per_rank = [
        [x * scale for x in comm_cases.all_reduce_inputs(r)] for r in range(n)
    ]
    out = []
    for values in zip(*per_rank, strict=True):
        stacked = np.stack(values)
        if op == "max":
            result = stacked.max(axis=0)
        elif op == "sum":
            result = stacked.sum(axis=0)
        elif stacked.dtype.kind == "i":  # TF's integer Div truncates.
            result = stacked.sum(axis=0) // n
        else:
            result = stacked.sum(axis=0) / n
        out.append(result.astype(stacked.dtype))
    return out


def test_all_reduce_hand_checked(engine, n):
    got = case(engine, n, "all_reduce_eager")[n - 1]
    a, b, _, _, e, f, _ = got["sum"]["out"]
    # a = (r + 1) [1, 2, 3], summed: [1, 2, 3] n (n + 1) / 2.
    assert_equal(a, np.array([1, 2, 3], np.float32) * (n * (n + 1) // 2))
    # b = arange(6) + 10 r, summed: n arange(6) + 10 n (n - 1) / 2.
    b_sum = np.arange(6, dtype=np.int32) * n + 5 * n * (n - 1)
    assert_equal(b, b_sum.reshape(2, 3))
    assert_equal(e, np.array([7 * n * (n - 1) // 2], np.int32))
    # f = arange(10) (-1)**r cancels in pairs of ranks.
    assert_equal(f, np.arange(10, dtype=np.float32) * (n % 2))
    # d = r - 1 everywhere: the max is n - 2.
    assert_equal(got["max"]["out"][3], np.full([2, 2], n - 2.0, np.float32))
    # Mean of b: arange(6) + 5 (n - 1), exact in int32.
    b_mean = np.arange(6, dtype=np.int32) + 5 * (n - 1)
    assert_equal(got["mean"]["out"][1], b_mean.reshape(2, 3))


def test_all_reduce_eager(engine, n):
    for rank, got in case(engine, n, "all_reduce_eager").items():
        for op in ("sum", "mean", "max"):
            for i, (value, want) in enumerate(
                zip(got[op]["out"], reference_all_reduce(n, op), strict=True)
            ):
                assert_equal(value, want, f"rank {rank} {op} tensor {i}")
            assert_stats(
                got[op]["stats"], dense=(ALL_REDUCE_BYTES[n], NUM_BUCKETS)
            )


def test_all_reduce_in_tf_function_counts_every_call(engine, n):
    for rank, calls in case(engine, n, "all_reduce_function").items():
        for got, scale in zip(calls, (1, 3), strict=True):
            out = got["out"]
            for op in ("sum", "mean", "max"):
                want = reference_all_reduce(n, op, scale)
                for i, (value, w) in enumerate(zip(out[op], want, strict=True)):
                    assert_equal(value, w, f"rank {rank} x{scale} {op} {i}")
            for value, w in zip(
                out["sum_doubled"],
                reference_all_reduce(n, "sum", 2 * scale),
                strict=True,
            ):
                assert_equal(value, w, f"rank {rank} x{scale} sum_doubled")
            # 4 all-reduces of the same 7 tensors, every call.
            assert_stats(
                got["stats"],
                dense=(4 * ALL_REDUCE_BYTES[n], 4 * NUM_BUCKETS),
            )


def test_all_reduce_of_tensors_without_a_static_shape(engine, n):
    """Each is reduced alone, in its shape when the step runs; its bytes
    are counted from that shape."""
    total = n * (n + 1) / 2
    rows = np.arange(12, dtype=np.float32).reshape(4, 3) * total
    for rank, result in case(engine, n, "all_reduce_unknown_shape").items():
        known, unknown, doubled = result["out"]
        np.testing.assert_allclose(known, [total, -total], err_msg=rank)
        np.testing.assert_allclose(unknown, rows, err_msg=rank)
        np.testing.assert_allclose(doubled, 2 * rows, err_msg=rank)
        dense = result["stats"]["dense"]
        assert dense["calls"] == 3, (rank, dense)
        want = 2 * (n - 1) / n * (8 + 48 + 48)
        assert abs(dense["bytes"] - want) <= 3, (rank, dense, want)


def test_repeated_eager_all_reduce_does_not_mix_up_calls(engine, n):
    for got in case(engine, n, "all_reduce_repeated").values():
        total = n * (n + 1) / 2
        for k, value in enumerate(got["out"]):
            assert_equal(value, np.array([k * total], np.float32), f"call {k}")
        assert_stats(got["stats"], dense=(20 * (2 * (n - 1) * 4 // n), 20))


# -- all_gather


def check_all_gather(engine, n, got, rows_of, capacity, rank):
    sizes = [rows_of(r) for r in range(n)]
    gathered, got_sizes = got["out"]
    want = np.concatenate(
        [comm_cases.gather_rows(r, sizes[r]) for r in range(n)]
    )
    assert_equal(gathered, want, f"rank {rank}")
    assert_equal(got_sizes, np.array(sizes, np.int32), f"rank {rank}")
    row_bytes = 2 * 4
    others = sum(sizes) - sizes[rank]
    if engine == "horovod":
        # Exact sizes: no padding.
        assert_stats(
            got["stats"],
            sparse_pull=(
                (n - 1) * sizes[rank] * row_bytes,
                1,
                others * row_bytes,
            ),
            control=((n - 1) * 4, 1),  # The sizes, one int32 per worker.
        )
        return
    assert_stats(
        got["stats"],
        sparse_pull=((n - 1) * sizes[rank] * row_bytes, 1, others * row_bytes),
        padding=(
            (n - 1) * (capacity - sizes[rank]) * row_bytes,
            0,
            ((n - 1) * capacity - others) * row_bytes,
        ),
        control=((n - 1) * 4, 1),  # The sizes, one int32 per worker.
    )


def test_all_gather_eager_with_rows_per_rank(engine, n):
    for rank, got in case(engine, n, "all_gather_eager").items():
        check_all_gather(engine, n, got, lambda r: r + 1, n, rank)


def test_all_gather_in_tf_function_with_changing_capacity(engine, n):
    extra = comm_cases.GATHER_EXTRA_ROWS
    calls = case(engine, n, "all_gather_function")
    for rank, (first, second) in calls.items():
        check_all_gather(engine, n, first, lambda r: r + 1, n, rank)
        check_all_gather(
            engine,
            n,
            second,
            lambda r: extra * r + 17,
            GATHER_CAPACITY[n],
            rank,
        )


def test_a_keyed_all_gather_keeps_its_shape_on_horovod(engine, n):
    # With a key, Horovod's gather is padded to the largest rows seen so
    # far (its response cache then holds); the TF engine is unchanged.
    extra = comm_cases.GATHER_EXTRA_ROWS
    calls = case(engine, n, "all_gather_keyed")
    for rank, (first, second, third) in calls.items():
        if engine != "horovod":
            for got, rows_of, capacity in (
                (first, lambda r: r + 1, n),
                (second, lambda r: extra * r + 17, GATHER_CAPACITY[n]),
                (third, lambda r: r + 1, n),
            ):
                check_all_gather(engine, n, got, rows_of, capacity, rank)
            continue
        for got, rows_of, mark_of in (
            (first, lambda r: r + 1, lambda r: r + 1),
            (second, lambda r: extra * r + 17, lambda r: extra * r + 17),
            (third, lambda r: r + 1, lambda r: extra * r + 17),
        ):
            sizes = [rows_of(r) for r in range(n)]
            caps = [pair_capacity(mark_of(r)) for r in range(n)]
            gathered, got_sizes = got["out"]
            want = np.concatenate(
                [comm_cases.gather_rows(r, sizes[r]) for r in range(n)]
            )
            assert_equal(gathered, want, f"rank {rank}")
            assert_equal(got_sizes, np.array(sizes, np.int32), f"rank {rank}")
            others = sum(sizes) - sizes[rank]
            padded_others = sum(caps) - caps[rank] - others
            assert_stats(
                got["stats"],
                sparse_pull=((n - 1) * sizes[rank] * 8, 1, others * 8),
                padding=(
                    (n - 1) * (caps[rank] - sizes[rank]) * 8,
                    0,
                    padded_others * 8,
                ),
                control=((n - 1) * 8, 1),  # Rows and capacity, int32.
            )


# -- all_to_all


def check_all_to_all(engine, n, got, extra, rank):
    received, recv_counts = got["out"]
    want = np.concatenate(
        [comm_cases.all_to_all_rows(src, rank, extra) for src in range(n)]
    )
    assert_equal(received, want, f"rank {rank} extra {extra}")
    assert_equal(
        recv_counts,
        np.array(
            [comm_cases.send_count(src, rank, extra) for src in range(n)],
            np.int32,
        ),
    )
    sent = sum(
        comm_cases.send_count(rank, dst, extra)
        for dst in range(n)
        if dst != rank
    )
    received_rows = sum(
        comm_cases.send_count(src, rank, extra)
        for src in range(n)
        if src != rank
    )
    sent_slots = sum(
        pair_capacity(comm_cases.send_count(rank, dst, extra))
        for dst in range(n)
        if dst != rank
    )
    received_slots = sum(
        pair_capacity(comm_cases.send_count(src, rank, extra))
        for src in range(n)
        if src != rank
    )
    row_bytes = 3 * 4
    if engine == "horovod":
        # `hvd.alltoall` agrees on counts itself: no padding, no control.
        assert_stats(
            got["stats"],
            sparse_push=(sent * row_bytes, 1, received_rows * row_bytes),
        )
        return
    assert_stats(
        got["stats"],
        sparse_push=(sent * row_bytes, 1, received_rows * row_bytes),
        padding=(
            (sent_slots - sent) * row_bytes,
            0,
            (received_slots - received_rows) * row_bytes,
        ),
        # Three int32 to each peer (count, flag, largest count): O(N).
        control=((n - 1) * 12, 1),
    )


def test_all_to_all_eager(engine, n):
    for rank, got in case(engine, n, "all_to_all_eager").items():
        check_all_to_all(engine, n, got, 0, rank)


def test_all_to_all_in_tf_function_with_changing_capacity(engine, n):
    extras = (0, comm_cases.ALL_TO_ALL_EXTRA)
    for rank, calls in case(engine, n, "all_to_all_function").items():
        for got, extra in zip(calls, extras, strict=True):
            check_all_to_all(engine, n, got, extra, rank)


def test_move_rows_only_pairs_with_rows_talk(engine, n):
    matrix = comm_cases.move_matrix(n)
    # TF: each talking pair's block at its own ladder step (33 -> 34);
    # padded: n (n - 1) blocks of the largest count's step; Horovod exact.
    blocks = np.vectorize(pair_capacity)(matrix)
    padded_cap = pair_capacity(int(matrix.max()))
    for rank, results in case(engine, n, "move_rows").items():
        for exchange, got in results.items():
            msg = f"rank {rank} {exchange!r}"
            received, wire = got["out"]
            want = np.concatenate(
                [comm_cases.move_rows(src, rank) for src in range(n)]
            )
            assert_equal(received, want, msg)
            sent, got_rows = matrix[rank].sum(), matrix[:, rank].sum()
            if exchange == "padded":
                slots_out = slots_in = (n - 1) * padded_cap
                assert wire == n * (n - 1) * padded_cap, msg
            elif exchange == "pairwise":
                slots_out, slots_in = blocks[rank].sum(), blocks[:, rank].sum()
                assert wire == blocks.sum(), msg
            else:
                slots_out, slots_in = sent, got_rows
                assert wire == matrix.sum(), msg
            padding = {}
            if exchange:
                pad = ((slots_out - sent) * 12, 0, (slots_in - got_rows) * 12)
                padding = {"padding": pad}
            assert_stats(
                got["stats"],
                sparse_push=(sent * 12, 1, got_rows * 12),
                **padding,
            )


# -- broadcast and barrier


def test_broadcast_from_first_and_last_rank(engine, n):
    roots = {"root0": 0, "root_last": n - 1, "root_last_function": n - 1}
    for rank, got in case(engine, n, "broadcast").items():
        for name, root in roots.items():
            msg = f"rank {rank} {name}"
            want = comm_cases.broadcast_input(root)
            assert_equal(got[name]["out"], want, msg)
            stats = got[name]["stats"]
            if rank == root:
                assert_stats(stats, control=((n - 1) * 2 * 3 * 4, 1, 0))
            else:
                # Receivers send nothing and get the 2 x 3 int32 tensor.
                assert_stats(stats, control=(0, 1, 2 * 3 * 4))


def test_barrier_waits_for_the_last_worker(engine, n):
    results = case(engine, n, "barrier")
    # Rank 0 sleeps 1 s before it enters; no one may leave before that.
    last_in = results[0]["entered"]
    for rank, got in results.items():
        assert got["left"] >= last_in, f"rank {rank} left early"
        assert_stats(got["stats"], control=(2 * (n - 1) * 4 // n, 1))
