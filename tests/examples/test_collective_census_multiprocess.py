"""The collectives a train step launches do not grow.

Each model of `examples/collective_census/main.py` (the example models
and one with `BatchNormalization` under mixed precision) trains on 2
workers; the strategy's count of collectives per step, by path, must not
exceed `CEILING`. What each one is, and why the ones left apart cannot
join the step's dense all-reduce, is in docs/strategy.md ("Collectives
per step").
"""

import os

import pytest

from keras_hybrid.testing.pool import run_scenario

SCENARIOS = os.path.join(
    os.path.dirname(__file__), "workers", "census_scenarios.py"
)
pytestmark = pytest.mark.multiprocess

# Per step on 2 workers (TF engine). dense: the gradients' all-reduce, and
# with BatchNormalization the step-end reduction of its moving statistics
# and the metrics; control: the global row count, the metrics' state
# (without BatchNormalization), the loss-scale verdict, the fused
# exchange's per-owner counts.
CEILING = {
    "dense_cnn": {"dense": 1, "control": 2},
    "lm": {
        "dense": 1,
        "sparse_pull": 2,
        "sparse_push": 3,
        "ids": 3,
        "control": 6,
    },
    "nmt": {
        "dense": 1,
        "sparse_pull": 1,
        "sparse_push": 1,
        "ids": 1,
        "control": 3,
    },
    "recommender": {
        "dense": 1,
        "sparse_pull": 1,
        "sparse_push": 1,
        "ids": 1,
        "control": 3,
    },
    "quickstart": {
        "dense": 1,
        "sparse_pull": 1,
        "sparse_push": 1,
        "ids": 1,
        "control": 3,
    },
    "batchnorm_mixed": {
        "dense": 2,
        "sparse_pull": 1,
        "sparse_push": 1,
        "ids": 1,
        "control": 3,
    },
}


def test_collectives_per_step_do_not_grow():
    run = run_scenario(
        SCENARIOS,
        "count_all",
        2,
        {"models": list(CEILING), "steps": 4, "batch_size": 16},
        timeout=600,
    ).check()
    for rank, counts in run.results.items():
        for name, ceiling in CEILING.items():
            per_step = counts[name]["per_step"]
            # Counting works: every model all-reduces its gradients.
            assert per_step["dense"] >= 1, (name, rank, per_step)
            grown = {
                path: calls
                for path, calls in per_step.items()
                if calls > ceiling.get(path, 0)
            }
            assert not grown, (
                f"{name} on rank {rank}: {grown} per step, more than {ceiling}"
            )
