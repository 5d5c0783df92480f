"""`WorkerPool` runs scenario after scenario in the same processes, keeps
them apart, and turns a failure or a hang into a failed scenario."""

import os
import re
import time

import numpy as np
import pytest

from keras_hybrid.testing import pool
from tests.launch.launch_testing import wait_gone

pytestmark = pytest.mark.multiprocess
SCENARIOS = os.path.join(
    os.path.dirname(__file__), "workers", "pool_scenarios.py"
)


def test_scenarios_run_in_the_same_processes_with_their_own_output():
    shared = pool.shared_pool(2)
    first = shared.run(SCENARIOS, "fit", {"tag": "first"}).check()
    launches = shared.launches
    second = shared.run(SCENARIOS, "fit", {"tag": "second"}).check()
    assert shared.launches == launches
    assert sorted(second.results) == [0, 1]
    for rank in (0, 1):
        assert second.results[rank]["rank"] == rank
        assert second.results[rank]["pid"] == first.results[rank]["pid"]
        # Replicas agree: both ranks ran the same scenario together.
        for a, b in zip(
            second.results[rank]["weights"],
            second.results[0]["weights"],
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)
        assert f"[{rank}] second on rank {rank}\n" in second.stdout
        assert f"[{rank}] second to stderr\n" in second.stderr
    # Each run shows its own scenario's output only.
    assert "first" not in second.stdout + second.stderr
    assert "[0] first on rank 0\n" in first.stdout


def test_the_next_scenario_starts_from_the_process_as_it_was():
    shared = pool.shared_pool(2)
    run = shared.run(
        SCENARIOS,
        "change_process_state",
        {"name": "KERAS_HYBRID_POOL_TEST"},
        env={"KERAS_HYBRID_POOL_TEST": "set for one scenario"},
    ).check()
    assert run.results[1]["env"] == "set for one scenario"
    assert run.results[1]["policy"] == "float32"
    after = shared.run(SCENARIOS, "look_at_process_state").check()
    for result in after.results.values():
        assert result == {
            "leftover": None,
            "policy": "float32",
            "cwd": run.results[0]["cwd"],
        }


FAILURES = (
    ("fail_on_rank", {"rank": 1}, "[1] ValueError: this scenario fails"),
    ("leave_open", {}, "the scenario left a HybridStrategy open"),
)


def test_a_failed_scenario_fails_and_the_next_gets_fresh_workers():
    own = pool.WorkerPool(2)
    try:
        for launches, (function, kwargs, error) in enumerate(FAILURES, 1):
            pids = _pids(own.run(SCENARIOS, "fit", {"tag": "before"}).check())
            assert own.launches == launches
            run = own.run(SCENARIOS, function, kwargs)
            assert run.returncode == 1
            assert error in run.stderr
            with pytest.raises(AssertionError, match=re.escape(error)):
                run.check()
            # Stopped: the next scenario starts new workers.
            assert wait_gone(pids) == []
    finally:
        own.close()


def test_a_hang_is_a_failure_and_stops_the_workers():
    own = pool.WorkerPool(1)
    try:
        pids = _pids(own.run(SCENARIOS, "fail_on_rank", {"rank": -1}).check())
        start = time.monotonic()
        with pytest.raises(AssertionError, match="within 5s") as failure:
            own.run(SCENARIOS, "hang", timeout=5)
        # What the hung scenario printed is in the failure.
        assert f"[0] hanging in {pids[0]}" in str(failure.value)
        assert time.monotonic() - start < 5 + 40
        assert wait_gone(pids) == []
    finally:
        own.close()


def _pids(run) -> list:
    return [r if isinstance(r, int) else r["pid"] for r in run.results.values()]
