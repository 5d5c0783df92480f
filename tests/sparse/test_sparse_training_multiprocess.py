"""Training with partitioned embedding tables on 1, 2 and 4 real workers.

Each worker count's pool runs one scenario
(`workers/equivalence_scenarios.py`) that trains every config: the models
of `workers/sparse_cases.py` (one table; two tables of the same ids; a
table looked up twice; a Sequential; two tables of different widths and
dtypes; a lookup whose ids depend on another lookup's rows; ids from
`IntegerLookup` and `StringLookup`; a frozen table beside a trained one)
x {SGD(0.1), Adam(0.01)}, 20 steps of global batch 32 with Zipf-skewed
ids, plus `HybridOptimizer` with gradient accumulation on 1 and 2
workers. The tests compare the saved weights with each other and with
plain Keras in this process.
"""

import functools
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.testing import plan_text
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "equivalence_scenarios.py")
sys.path.insert(0, HERE)
import sparse_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess
by_engine = pytest.mark.parametrize("engine", engines_under_test())

ATOL = 1e-5
ACCUMULATION = 2
WORKER_COUNTS = (1, 2, 4)
CONFIGS = [(m, o) for m in cases.MODELS for o in cases.OPTIMIZERS]
KEYS = [cases.key(m, o) for m, o in CONFIGS]
ACCUM_KEYS = [cases.key("one_table", o, ACCUMULATION) for o in cases.OPTIMIZERS]


@functools.cache
def launch(engine: str, num_workers: int) -> dict:
    """{rank: {config key: result}} of one scenario of all configs."""
    configs = [[m, o, 0] for m, o in CONFIGS] + [
        ["one_table", "sgd_sum", 0],
        ["frozen_only", "adam", 0],
    ]
    if num_workers <= 2:
        configs += [["one_table", o, ACCUMULATION] for o in cases.OPTIMIZERS]
    run = run_scenario(
        SCENARIO,
        "train",
        num_workers,
        {"configs": configs},
        engine=engine,
        # 16 configs, each traced twice (the step, and the scratch trace
        # that finds its lookups' ids), on a shared 2-core machine.
        timeout=480,
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    for result in run.results.values():
        assert result["size"] == num_workers
        assert result["engine"] == engine
    return run.results


@functools.cache
def launch_in_rounds(engine: str) -> dict:
    """`launch` of every model with Adam on 4 workers, the pairwise
    exchange in rounds (`exchange_schedule="rounds"`)."""
    configs = [[m, "adam", 0] for m in cases.MODELS]
    return (
        run_scenario(
            SCENARIO,
            "train",
            4,
            {"configs": configs, "exchange_schedule": "rounds"},
            engine=engine,
            timeout=480,
        )
        .check()
        .results
    )


def assert_weights_close(got, want, atol=ATOL, msg=""):
    assert len(got) == len(want), msg
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, f"{msg} weight {i}"
        np.testing.assert_allclose(
            g, w, atol=atol, rtol=0, err_msg=f"{msg} weight {i}"
        )


def max_difference(a, b) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def initial_weights(engine: str, key: str) -> list:
    """Full initial weights of the 1-process run (rank 0)."""
    return launch(engine, 1)[0][key]["initial"]


def batches():
    x, y = cases.make_data()
    for step in range(cases.STEPS):
        rows = slice(step * cases.BATCH, (step + 1) * cases.BATCH)
        yield x[rows], y[rows]


@functools.cache
def fit_reference(
    engine: str, model_name: str, opt_name: str, accumulation=0
) -> list:
    """Plain `model.fit`, one process, global batch, same initial weights.

    For Adam without accumulation this is NOT the reference of the
    strategy: Keras gets the embedding gradient as an `IndexedSlices` with
    duplicate ids and squares each occurrence separately.
    """
    keras.backend.clear_session()
    model = cases.build_model(model_name)
    model.set_weights(initial_weights(engine, cases.key(model_name, opt_name)))
    extra = {}
    if accumulation:
        extra["gradient_accumulation_steps"] = accumulation
    model.compile(
        optimizer=cases.make_optimizer(opt_name, **extra),
        loss=cases.make_loss(),
    )
    x, y = cases.make_data()
    model.fit(x, y, batch_size=cases.BATCH, epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


@functools.cache
def dedup_reference(
    engine: str, model_name: str, opt_name: str, table_scale=1
) -> list:
    """Plain Keras custom loop with DEDUPLICATED embedding gradients.

    Same model, initial weights (`set_weights`), data and batches as the
    workers, but each gradient, including the `IndexedSlices` of the
    tables, is made a dense tensor with `tf.convert_to_tensor` (which sums
    the rows of a repeated id) before `optimizer.apply`. That is the
    dense-gradient semantics the strategy promises for Adam.
    """
    keras.backend.clear_session()
    model = cases.build_model(model_name)
    model.set_weights(initial_weights(engine, cases.key(model_name, opt_name)))
    optimizer = cases.make_optimizer(opt_name)
    loss_fn = cases.make_loss()
    variables = model.trainable_variables
    for x, y in batches():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, [v.value for v in variables])
        grads = [
            tf.convert_to_tensor(g)
            * (table_scale if isinstance(g, tf.IndexedSlices) else 1)
            for g in grads
        ]
        optimizer.apply(grads, variables)
    return model.get_weights()


def strategy_reference(engine: str, model_name: str, opt_name: str) -> list:
    """What N workers must match: `model.fit` for SGD (linear in the
    gradient, so duplicates do not matter), the deduplicated custom loop
    for Adam."""
    if opt_name == "sgd":
        return fit_reference(engine, model_name, opt_name)
    return dedup_reference(engine, model_name, opt_name)


@by_engine
def test_initial_weights_identical_across_worker_counts_and_ranks(engine):
    # Ranks seed differently in the worker: tables are seeded from rank 0
    # in blocks, so 1, 2 and 4 shards draw the same full table.
    for key in KEYS:
        want = initial_weights(engine, key)
        for num_workers in WORKER_COUNTS:
            for rank, result in launch(engine, num_workers).items():
                got = result[key]["initial"]
                assert len(got) == len(want)
                for i, (g, w) in enumerate(zip(got, want, strict=True)):
                    np.testing.assert_array_equal(
                        g,
                        w,
                        err_msg=f"{key}: {num_workers} workers, rank {rank}, "
                        f"initial weight {i}",
                    )


@by_engine
@pytest.mark.parametrize("num_workers", [2, 4])
@pytest.mark.parametrize("key", KEYS)
def test_final_weights_match_one_process(engine, num_workers, key):
    want = launch(engine, 1)[0][key]["final"]
    assert max_difference(want, initial_weights(engine, key)) > 1e-2, (
        "no training"
    )
    for rank, result in launch(engine, num_workers).items():
        assert_weights_close(
            result[key]["final"],
            want,
            msg=f"{key}: {num_workers} workers, rank {rank}",
        )


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
@pytest.mark.parametrize("model_name,opt_name", CONFIGS)
def test_final_weights_match_plain_keras(
    engine, num_workers, model_name, opt_name
):
    """SGD: plain `model.fit`. Adam: a custom loop that densifies every
    gradient (deduplicated ids) before `optimizer.apply`."""
    key = cases.key(model_name, opt_name)
    want = strategy_reference(engine, model_name, opt_name)
    for rank, result in launch(engine, num_workers).items():
        assert_weights_close(
            result[key]["final"],
            want,
            msg=f"{key}: {num_workers} workers, rank {rank} vs plain Keras",
        )


@by_engine
@pytest.mark.parametrize("model_name", cases.MODELS)
def test_references_are_sound(engine, model_name):
    # The custom loop is the same training as `fit` when duplicates do not
    # matter (SGD) ...
    assert_weights_close(
        dedup_reference(engine, model_name, "sgd"),
        fit_reference(engine, model_name, "sgd"),
        msg="custom loop vs fit, SGD",
    )
    # ... and the data repeats ids enough that Adam tells the two apart.
    diff = max_difference(
        dedup_reference(engine, model_name, "adam"),
        fit_reference(engine, model_name, "adam"),
    )
    assert diff > 100 * ATOL, f"duplicates do not matter (max diff {diff})"


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
def test_plan_marks_tables_sparse_and_head_dense(engine, num_workers):
    for rank, result in launch(engine, num_workers).items():
        for model_name, opt_name in CONFIGS:
            got = result[cases.key(model_name, opt_name)]
            want = {p: "sparse" for p in cases.TABLES[model_name]}
            want.update({p: "dense" for p in cases.dense_paths(model_name)})
            assert got["kinds"] == want, f"rank {rank}\n{got['plan']}"


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
def test_each_rank_stores_only_its_rows(engine, num_workers):
    results = launch(engine, num_workers)
    partition = RowPartition.create(cases.VOCAB, num_workers)
    for key in KEYS:
        model_name, opt_name = key.split("/")
        for path in cases.TABLES[model_name]:
            rows = []
            for rank in range(num_workers):
                shard = results[rank][key]["shards"][path]
                assert shard["type"] == "ShardedTable", (key, path, rank)
                assert shard["partition"] == partition.get_config()
                assert shard["full_shape"][0] == cases.VOCAB
                local = shard["local_shape"]
                assert local[0] == partition.rows_on_shard(rank)
                assert local[1:] == shard["full_shape"][1:]
                rows.append(local[0])
            assert sum(rows) == cases.VOCAB, (key, path, rows)
        for rank in range(num_workers):
            result = results[rank][key]
            for path in cases.dense_paths(model_name):
                assert result["shards"][path]["type"] != "ShardedTable"
            # Adam's m and v of a table are partitioned with it.
            slots = result["slots"]
            if opt_name == "adam":
                assert len(slots) == 2 * len(cases.TABLES[model_name])
            for path, slot in slots.items():
                assert slot["type"] == "ShardedTable", (key, path, rank)
                assert slot["local_shape"][0] == partition.rows_on_shard(rank)


@by_engine
@pytest.mark.parametrize("opt_name", cases.OPTIMIZERS)
def test_gradient_accumulation_with_sparse_table(engine, opt_name):
    # HybridOptimizer(SGD/Adam(gradient_accumulation_steps=2)): 2 workers
    # match one process with the same setting.
    key = cases.key("one_table", opt_name, ACCUMULATION)
    one = launch(engine, 1)[0][key]
    assert one is not None, "keras_hybrid.HybridOptimizer is missing"
    np.testing.assert_array_equal(
        one["initial"][0],
        initial_weights(engine, cases.key("one_table", opt_name))[0],
    )
    assert max_difference(one["final"], one["initial"]) > 1e-2, "no training"
    # Accumulating changes the trajectory (10 updates, not 20).
    unaccumulated = launch(engine, 1)[0][cases.key("one_table", opt_name)][
        "final"
    ]
    assert max_difference(one["final"], unaccumulated) > 100 * ATOL
    # Keras' own accumulation is the same training: its accumulators are
    # dense, so duplicate ids are summed before Adam sees them too.
    assert_weights_close(
        one["final"],
        fit_reference(engine, "one_table", opt_name, ACCUMULATION),
        msg=f"{key}: 1 process vs plain Keras",
    )
    for rank, result in launch(engine, 2).items():
        got = result[key]
        assert got["kinds"]["table/embeddings"] == "sparse"
        assert_weights_close(
            got["initial"], one["initial"], msg=f"rank {rank} initial"
        )
        assert_weights_close(
            got["final"], one["final"], msg=f"{key}: 2 workers, rank {rank}"
        )


@by_engine
@pytest.mark.parametrize("num_workers", [2, 4])
def test_sparse_gradients_sum_scales_table_gradients_by_workers(
    engine, num_workers
):
    """`HybridOptimizer(sparse_gradients="sum")` (Parallax's
    `average_sparse=False`): table gradients are summed over workers, i.e.
    N times the global mean, while dense gradients stay averaged."""
    initial = launch(engine, 1)[0][cases.key("one_table", "sgd_sum")]["initial"]
    assert_weights_close(
        initial, initial_weights(engine, cases.key("one_table", "sgd"))
    )
    want = dedup_reference(engine, "one_table", "sgd", table_scale=num_workers)
    mean = launch(engine, num_workers)[0][cases.key("one_table", "sgd")][
        "final"
    ]
    for rank, result in launch(engine, num_workers).items():
        got = result[cases.key("one_table", "sgd_sum")]["final"]
        assert_weights_close(got, want, msg=f"rank {rank}")
        assert max_difference(got, mean) > 1e-3


# Sparse collectives per train step with the fused exchange: one id
# all-to-all, and one pull and one push per dtype, for all tables and
# calls; a lookup whose ids depend on another's rows adds its own three.
FUSED_CALLS = {
    "one_table": (1, 1, 1),
    "two_tables": (1, 1, 1),
    "shared_table": (1, 1, 1),
    "sequential": (1, 1, 1),
    "widths_dtypes": (1, 2, 2),
    "chained": (2, 2, 2),
    "lookup_layers": (1, 1, 1),
    "frozen_table": (1, 1, 1),
}


@by_engine
@pytest.mark.parametrize("num_workers", [2, 4])
def test_a_frozen_table_is_partitioned_and_read(engine, num_workers):
    """A frozen table is partitioned like a trained one (the plan lists
    it), so its rows ride the step's exchange. `frozen_table`'s weights
    are checked against plain Keras with the other models'; `frozen_only`
    (its only table frozen, nothing takes the push) trains its head as
    plain `fit` does."""
    want = fit_reference(engine, "frozen_only", "adam")
    configs = [("frozen_table", o) for o in cases.OPTIMIZERS]
    configs.append(("frozen_only", "adam"))
    for rank, result in launch(engine, num_workers).items():
        for model_name, opt_name in configs:
            plan = result[cases.key(model_name, opt_name)]["plan"]
            for path in cases.FROZEN[model_name]:
                assert plan_text.partitioned(plan, path), (rank, plan)
        got = result[cases.key("frozen_only", "adam")]
        assert_weights_close(got["final"], want, msg=f"rank {rank}")
        assert max_difference(got["final"], got["initial"]) > 1e-2


@by_engine
@pytest.mark.parametrize("num_workers", [2, 4])
def test_one_exchange_per_step_for_all_lookups(engine, num_workers):
    for rank, result in launch(engine, num_workers).items():
        for model_name, opt_name in CONFIGS:
            calls = result[cases.key(model_name, opt_name)]["sparse_calls"]
            got = tuple(calls[p] for p in ("ids", "sparse_pull", "sparse_push"))
            assert got == FUSED_CALLS[model_name], (model_name, rank, got)


@pytest.mark.parametrize(
    "engine", [e for e in engines_under_test() if e == "tf"]
)
def test_exchange_in_rounds_trains_the_same_weights(engine):
    """The schedule only orders the sends and receives: the weights are
    the concurrent exchange's, to the bit (`exchange_schedule` is the TF
    engine's: Horovod's all-to-all has no schedule)."""
    for rank, result in launch_in_rounds(engine).items():
        for model in cases.MODELS:
            key = cases.key(model, "adam")
            want = launch(engine, 4)[rank][key]["final"]
            for i, (g, w) in enumerate(
                zip(result[key]["final"], want, strict=True)
            ):
                np.testing.assert_array_equal(
                    g, w, err_msg=f"{key}: rank {rank}, weight {i}"
                )
