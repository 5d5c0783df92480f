"""Collectives inside a step do not pile up threads.

TF implements a collective's timeout with one sleeping thread per call
(2 threads per call for the whole timeout, measured on TF 2.21): 300 steps
of 2 all-reduces with `timeout_seconds=300` took a worker from 99 to 701
threads, and long runs died when the host ran out of them.
"""

import os

import numpy as np
import pytest

from keras_hybrid.testing.pool import run_scenario

pytestmark = pytest.mark.multiprocess

SCENARIOS = os.path.join(
    os.path.dirname(__file__), "workers", "thread_scenarios.py"
)


def test_in_graph_collectives_keep_the_thread_count_flat():
    run = run_scenario(SCENARIOS, "count_threads", 2, timeout=180).check()
    for rank, result in run.results.items():
        np.testing.assert_array_equal(result["sum"], [2.0] * 4)
        grown = result["after"] - result["before"]
        assert grown < 20, (
            f"rank {rank}: {result['before']} -> {result['after']}"
        )
