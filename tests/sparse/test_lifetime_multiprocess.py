"""A model dropped in a running job frees its partitioned table, the
table's optimizer slots and its traced train step (a notebook or a
hyperparameter search builds model after model in one process).

TF's `tf.custom_gradient` keeps each graph-mode call's gradient function
in a global registry; the strategy's custom gradients (pulls, pushes,
hot rows, shard penalties) refer to the table and the step's graph, so
before `_compat.tf.custom_gradient_owned_by_graph` every model's shard
stayed in memory until the process ended.
"""

import os

import pytest

from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario

pytestmark = pytest.mark.multiprocess

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "lifetime_scenarios.py")


@pytest.mark.parametrize("engine", engines_under_test())
@pytest.mark.parametrize(
    "fuse, regularized, hot_rows",
    [(True, False, 0), (False, False, 0), (True, True, 0), (True, False, 8)],
)
def test_a_dropped_model_frees_its_shards_and_step(
    engine, fuse, regularized, hot_rows
):
    run = run_scenario(
        SCENARIO,
        "build_train_drop",
        2,
        {
            "models": 3,
            "fuse": fuse,
            "regularized": regularized,
            "hot_rows": hot_rows,
        },
        engine=engine,
        timeout=300,
    ).check()
    for rank, result in run.results.items():
        assert len(result["alive"]) == 2
        for i, alive in enumerate(result["alive"]):
            kept = sorted(name for name, is_alive in alive.items() if is_alive)
            assert not kept, f"rank {rank}, model {i}: still alive: {kept}"
            assert "table" in alive and "graph0" in alive
