"""An idle Horovod pool is stopped when another pool runs a scenario.

Horovod's background thread negotiates with its peers every cycle, so an
idle Horovod worker keeps using CPU; the suite keeps pools of 1 to 4
workers. `run_scenario` stops a Horovod pool unused for
`pool.IDLE_HOROVOD_SECONDS`, and the pool's next scenario starts it
again.
"""

import os
import time

import pytest

from keras_hybrid.testing import pool
from tests.launch.launch_testing import is_alive
from tests.launch.launch_testing import wait_gone

pytestmark = pytest.mark.multiprocess
SCENARIOS = os.path.join(
    os.path.dirname(os.path.dirname(__file__)),
    "testing",
    "workers",
    "pool_scenarios.py",
)


def _cpu_seconds(pids) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / os.sysconf("SC_CLK_TCK")


def _fit(num_workers: int, tag: str) -> list:
    run = pool.run_scenario(
        SCENARIOS, "fit", num_workers, {"tag": tag}, engine="horovod"
    ).check()
    return sorted(r["pid"] for r in run.results.values())


def test_an_idle_horovod_pool_is_stopped_and_started_again():
    pair = pool.shared_pool(2, "horovod")
    pids = _fit(2, "first")
    # Idle, its workers still use CPU: the reason for stopping them.
    before = _cpu_seconds(pids)
    time.sleep(3)
    idle = _cpu_seconds(pids) - before
    print(f"2 idle Horovod workers used {idle:.2f} s")
    assert idle > 0.05

    # Used a moment ago: another pool's scenario leaves it up.
    assert _fit(1, "beside") and pair.started
    assert all(map(is_alive, pids))

    pair.last_run -= pool.IDLE_HOROVOD_SECONDS + 1
    _fit(1, "later")
    assert not pair.started
    assert wait_gone(pids) == []

    launches = pair.launches
    again = _fit(2, "again")
    assert pair.launches == launches + 1
    assert not set(again) & set(pids)
