"""The hierarchical sparse exchange on 2 emulated hosts x 2 workers equals
the flat one.

`KERAS_HYBRID_HOSTS` places ranks 0 and 2 on host `a`, 1 and 3 on host
`b` (hosts interleaved, so a rank's relay is not its neighbour). Each
config of `workers/sparse_cases.py` trains 20 steps of Zipf ids with the
hierarchical and with the flat exchange in the same launch; the weights
must agree with each other and with a one-process Keras loop whose table
gradients are deduplicated (the strategy's semantics). The data has ids
that both workers of a host look up in one step and ids owned on the
asking host (checked below), and the hierarchical exchange must send
fewer sparse bytes between hosts.
"""

import functools
import os
import sys

import numpy as np
import pytest

from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.strategy import input_sharding
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "hierarchical_scenarios.py")
sys.path.insert(0, HERE)
import sparse_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess

NUM_WORKERS = 4
HOSTS = ("a", "b", "a", "b")
CONFIGS = [
    ("one_table", "sgd"),
    ("one_table", "adam"),
    ("widths_dtypes", "adam"),
    ("shared_table", "sgd"),
]
SPARSE = ("ids", "sparse_pull", "sparse_push", "padding")
ATOL = 1e-5


HOT_CONFIGS = [("one_table", "adam"), ("shared_table", "sgd")]
HOT_ROWS = 16


@functools.cache
def launch(hot_rows: int = 0) -> dict:
    configs = HOT_CONFIGS if hot_rows else CONFIGS
    exchanges = [True, False] if hot_rows else [True, False, None]
    run = run_scenario(
        SCENARIO,
        "train",
        NUM_WORKERS,
        {"configs": configs, "exchanges": exchanges, "hot_rows": hot_rows},
        env={"KERAS_HYBRID_HOSTS": ",".join(HOSTS)},
        timeout=480,
    ).check()
    assert sorted(run.results) == list(range(NUM_WORKERS))
    return run.results


def assert_close(got, want, msg):
    assert len(got) == len(want), msg
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(
            g, w, atol=ATOL, rtol=0, err_msg=f"{msg} weight {i}"
        )


def test_hosts_come_from_the_override():
    for rank, result in launch().items():
        assert result["hierarchical"] is True, rank
        assert result["host_of"] == (0, 1, 0, 1)
        assert result["local_of"] == (0, 0, 1, 1)


def test_data_shares_ids_in_host_and_owns_some_on_host():
    """The case the exchange must get right: ids both workers of a host
    ask for in one step, and ids that host itself owns."""
    x, _ = cases.make_data()
    owner = RowPartition.create(cases.VOCAB, NUM_WORKERS).shard_of(
        np.arange(cases.VOCAB)
    )
    sizes = input_sharding.split_sizes(cases.BATCH, NUM_WORKERS)
    starts = np.cumsum([0, *sizes])
    shared = owned_here = 0
    for step in range(cases.STEPS):
        batch = x[step * cases.BATCH : (step + 1) * cases.BATCH]
        ids = [set(batch[starts[r] : starts[r + 1]].ravel()) for r in range(4)]
        for a, b in ((0, 2), (1, 3)):
            both = ids[a] & ids[b]
            shared += len(both)
            host = HOSTS[a]
            owned_here += sum(HOSTS[owner[i]] == host for i in both)
    assert shared > 50
    assert owned_here > 10


@pytest.mark.parametrize("model_name,opt_name", CONFIGS)
def test_hierarchical_equals_flat_and_reference(model_name, opt_name):
    key = cases.key(model_name, opt_name)
    results = launch()
    initial = results[0][(key, True)]["initial"]
    want = cases.dedup_reference(model_name, opt_name, initial)
    for rank, result in results.items():
        hier, flat = result[(key, True)], result[(key, False)]
        assert_close(hier["initial"], flat["initial"], f"{key} r{rank} init")
        assert_close(hier["final"], flat["final"], f"{key} r{rank}")
        assert_close(hier["final"], want, f"{key} r{rank} vs reference")
        chosen = result[(key, None)]
        assert_close(chosen["final"], flat["final"], f"{key} r{rank} auto")
    trained = max(
        float(np.abs(a - b).max()) for a, b in zip(want, initial, strict=True)
    )
    assert trained > 1e-2, "no training"


@pytest.mark.parametrize("model_name,opt_name", CONFIGS)
def test_fewer_sparse_bytes_cross_hosts(model_name, opt_name):
    key = cases.key(model_name, opt_name)
    sums = {}
    for hierarchical in (True, False):
        sums[hierarchical] = sum(
            r[(key, hierarchical)]["cross_host"][p]["bytes"]
            for r in launch().values()
            for p in SPARSE
        )
    assert sums[False] > 0
    assert sums[True] < sums[False], sums


def test_cost_model_turns_it_on_for_small_tables():
    """500-row tables, 48 ids a worker and step, the default 10 Gbit/s
    link: the exchange is latency-bound, and the hierarchical one sends
    half the messages across hosts (hierarchy_choice)."""
    for rank, result in launch().items():
        for model_name, opt_name in CONFIGS:
            key = (cases.key(model_name, opt_name), None)
            assert result[key]["decided"] is True, (rank, key)


def test_dense_gradients_reduce_in_host_first():
    """The hierarchical exchange also reduces dense gradients in two
    levels (`comm.host_all_reduce`): only a 1/2 slice crosses hosts, per
    local rank. The weights above match the flat ring's."""
    key = cases.key("one_table", "sgd")
    for rank, result in launch().items():
        hier = result[(key, True)]
        flat = result[(key, False)]
        assert hier["cross_host"]["dense"]["bytes"] > 0, rank
        # Flat rings do not count bytes per host.
        assert flat["cross_host"]["dense"]["bytes"] == 0, rank
        # One collective per bucket and step becomes three.
        assert (
            hier["moved"]["dense"]["calls"]
            == 3 * (flat["moved"]["dense"]["calls"])
        ), rank


@pytest.mark.parametrize("model_name,opt_name", HOT_CONFIGS)
def test_with_hot_rows_equals_flat_and_reference(model_name, opt_name):
    """Hot rows (replicated, their gradients all-reduced) beside the
    hierarchical exchange: still exact, and hot rows took load off the
    shards."""
    key = cases.key(model_name, opt_name)
    results = launch(HOT_ROWS)
    initial = results[0][(key, True)]["initial"]
    want = cases.dedup_reference(model_name, opt_name, initial)
    cold = launch()
    for rank, result in results.items():
        hier, flat = result[(key, True)], result[(key, False)]
        assert_close(hier["final"], flat["final"], f"{key} r{rank} hot")
        assert_close(hier["final"], want, f"{key} r{rank} hot vs reference")
    served = sum(r[(key, True)]["rows_served"] for r in results.values())
    served_cold = sum(r[(key, True)]["rows_served"] for r in cold.values())
    assert served < served_cold, (served, served_cold)
