"""Mixed precision with a partitioned table on 1, 2 and 3 real workers.

Each worker count's pool runs one scenario
(`workers/mixed_precision_scenarios.py`) that trains, with the table
forced sparse, every config: {`table`,
`table_mlp`} x {"mixed_float16", "mixed_bfloat16"} x {SGD, Adam}, 20 steps
of global batch 48, plus `boost` (a crafted sample whose table gradient
overflows float16 on rows owned by the last worker only) under
"mixed_float16". 3 workers train a subset.

The table is a float32 variable: rows are pulled and gradients pushed in
float32, so the partitioned table adds no rounding. The compute dtype
rounds per-worker partial sums over the batch (a dense kernel's gradient
on b/N rows instead of b), which one process rounds differently: hence a
tolerance per policy. Numbers measured, and why, are in docs/sparse.md.
"""

import functools
import os
import sys

import keras
import numpy as np
import pytest

from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.strategy.input_sharding import split_sizes
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "mixed_precision_scenarios.py")
sys.path.insert(0, HERE)
import mixed_precision_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess

# Max |N workers - one process| over all weights after 20 steps, by
# (policy, optimizer); measured max over 2 and 3 workers: float16 SGD 1.9e-4
# (the MLP's first bias, 0.2% of how far it moved: about one float16 ulp of
# each step's update), Adam 2.5e-4; bfloat16 SGD 1.8e-3, Adam 3.5e-3
# (docs/sparse.md).
ATOL = {
    ("mixed_float16", "sgd"): 1e-3,
    ("mixed_float16", "adam"): 1e-3,
    ("mixed_bfloat16", "sgd"): 1e-2,
    ("mixed_bfloat16", "adam"): 1e-2,
}
# Adam through a ReLU MLP: a weight whose gradient is near zero gets a
# full-size step (about lr) whose sign a rounding difference can flip, so
# differences reach lr x steps / 5 (measured 3.7e-2 float16 and 7.2e-2
# bfloat16); bounded by lr x steps = 0.2.
ATOL_ADAM_MLP = 0.1
CONFIGS = [
    (m, p, o)
    for m in ("table", "table_mlp")
    for p in cases.POLICIES
    for o in cases.OPTIMIZERS
] + [("boost", "mixed_float16", o) for o in cases.OPTIMIZERS]
CONFIGS_3 = [
    ("table_mlp", "mixed_float16", "adam"),
    ("table_mlp", "mixed_bfloat16", "adam"),
    ("boost", "mixed_float16", "sgd"),
]
RUNS = [(2, c) for c in CONFIGS] + [(3, c) for c in CONFIGS_3]
BOOST_RUNS = [r for r in RUNS if r[1][0] == "boost"]
TIMEOUT = {1: 240, 2: 420, 3: 360}


@functools.cache
def launch(num_workers: int) -> dict:
    """{rank: {config key: result}} of one scenario."""
    configs = CONFIGS_3 if num_workers == 3 else CONFIGS
    run = run_scenario(
        SCENARIO,
        "train",
        num_workers,
        {"configs": configs},
        timeout=TIMEOUT[num_workers],
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    return run.results


def one_process(config) -> dict:
    return launch(1)[0][cases.key(*config)]


def atol(config) -> float:
    model_name, policy, opt_name = config
    if (model_name, opt_name) == ("table_mlp", "adam"):
        return ATOL_ADAM_MLP
    return ATOL[policy, opt_name]


def max_difference(a, b) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def ids(runs) -> list[str]:
    return [f"{n}w-" + "-".join(config) for n, config in runs]


@pytest.mark.parametrize("num_workers,config", RUNS, ids=ids(RUNS))
def test_table_is_partitioned_and_travels_in_float32(num_workers, config):
    _, policy, _ = config
    compute = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
    for rank, result in launch(num_workers).items():
        got = result[cases.key(*config)]
        assert got["kind"] == "sparse" and got["sharded"], rank
        assert got["table_dtype"] == "float32"
        assert got["table_compute_dtype"] == compute[policy]
        if config[0] == "table":
            # `tf.gather` in a custom layer: rows cast as Keras casts the
            # variable's reads, as without a strategy.
            assert got["rows_dtype"] == compute[policy]
        # Pulled rows are the float32 variable's (the Embedding casts them
        # after the pull); the pushed gradient is float32 too.
        assert got["exchange_dtypes"] == [
            ("ids", "int64"),
            ("sparse_pull", "float32"),
            ("sparse_push", "float32"),
        ]
        # `compile` adds loss scaling under float16 only.
        loss_scaled = policy == "mixed_float16"
        assert (got["optimizer"] == "LossScaleOptimizer") == loss_scaled
        # Only the train step's lookups are traced ahead: the replica call
        # `LossScaleOptimizer` makes inside the step to apply its gradients
        # is not a step of its own.
        assert got["traced_ahead"] in ([], ["train_step"]), got["traced_ahead"]


@pytest.mark.parametrize("num_workers,config", RUNS, ids=ids(RUNS))
def test_matches_one_process_within_policy_tolerance(num_workers, config):
    want = one_process(config)
    assert max_difference(want["final"], want["initial"]) > 0.1, "no training"
    results = launch(num_workers)
    rank0 = results[0][cases.key(*config)]["final"]
    for rank, result in results.items():
        got = result[cases.key(*config)]
        # Every rank holds the same weights, bit for bit.
        for g, w in zip(got["final"], rank0, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"rank {rank}")
        np.testing.assert_array_equal(got["initial"][0], want["initial"][0])
        diff = max_difference(got["final"], want["final"])
        assert diff <= atol(config), f"rank {rank}: max diff {diff}"


@pytest.mark.parametrize("num_workers,config", RUNS, ids=ids(RUNS))
def test_loss_scale_history_is_the_same_everywhere(num_workers, config):
    """`dynamic_scale`, `step_counter` and `iterations` after every step
    equal one process's on every rank."""
    want = one_process(config)["loss_scale"]
    if config[1] == "mixed_bfloat16":
        assert want == []  # no loss scaling
    else:
        assert len(want) == cases.STEPS
    for rank, result in launch(num_workers).items():
        assert result[cases.key(*config)]["loss_scale"] == want, rank


def test_crafted_sample_overflows_only_on_the_last_shard():
    """The `boost` sample sits in rank 0's slice, and its ids belong to
    the last shard, for 2 and 3 workers: only that owner's gradient is
    non-finite, and no worker's dense gradient is."""
    (x, _) = cases.make_data("boost")
    row = cases.BOOST_STEP * cases.BATCH
    assert np.flatnonzero(x["boost"][:, 0] != 1).tolist() == [row]
    for n in (2, 3):
        assert split_sizes(cases.BATCH, n)[0] > 0
        owners = RowPartition.create(cases.VOCAB, n).shard_of(x["ids"][row])
        assert set(owners.tolist()) == {n - 1}


@pytest.mark.parametrize(
    "num_workers,config",
    BOOST_RUNS,
    ids=ids(BOOST_RUNS),
)
def test_non_finite_rows_on_one_owner_skip_the_step_everywhere(
    num_workers, config
):
    step = cases.BOOST_STEP
    want = one_process(config)["loss_scale"]
    # One process skips step `BOOST_STEP` (iterations stay, the scale
    # halves), then grows the scale every 4 finite steps.
    assert want[step - 1] == (step, 32768.0, step)
    assert want[step] == (step, 16384.0, 0)
    assert want[step + 4] == (step + 4, 32768.0, 0)
    for rank, result in launch(num_workers).items():
        got = result[cases.key(*config)]
        assert got["loss_scale"] == want, rank
        assert all(np.isfinite(w).all() for w in got["final"]), rank


@pytest.mark.parametrize("model_name", ["table", "table_mlp"])
@pytest.mark.parametrize("policy", cases.POLICIES)
def test_one_process_matches_plain_keras_with_sgd(model_name, policy):
    """The 1-worker launch is plain Keras `fit` (SGD is linear in the
    gradient, so duplicate ids do not matter), same policy, same loss
    scaling."""
    config = (model_name, policy, "sgd")
    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = cases.build_model(model_name)
        model.compile(
            optimizer=cases.make_optimizer("sgd"), loss=cases.make_loss()
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.set_weights(one_process(config)["initial"])
    x, y = cases.make_data(model_name)
    model.fit(x, y, batch_size=cases.BATCH, shuffle=False, verbose=0)
    diff = max_difference(model.get_weights(), one_process(config)["final"])
    assert diff <= 1e-5, diff
