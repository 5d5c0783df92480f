"""A partitioned table costs each worker only its shard of memory.

A 512 MiB embedding table (2**20 rows x 128 float32) is trained for a few
SGD steps on one worker and on two. Each worker of the pair must peak
clearly below the single process, which holds the whole table.
"""

import os
import tempfile

import pytest

from keras_hybrid.testing import run_workers
from keras_hybrid.testing.multiprocess import engines_under_test

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.parametrize("engine", engines_under_test()),
]

WORKER = os.path.join(os.path.dirname(__file__), "workers", "memory_worker.py")
V, D = 1_048_576, 128
TABLE_MIB = V * D * 4 / 2**20  # 512


def _launch(engine, num_workers):
    out_dir = tempfile.mkdtemp(prefix=f"memory_{engine}{num_workers}_")
    run = run_workers(
        WORKER,
        num_workers,
        out_dir,
        args=(f"--rows={V}", f"--dim={D}", "--batch=32", "--steps=4"),
        timeout=150,
        engine=engine,
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    return run.results


def test_two_workers_each_peak_clearly_below_one_process(engine):
    single = _launch(engine, 1)[0]
    pair = _launch(engine, 2)
    assert single["local_rows"] == V
    one_peak = single["peak_rss_kib"]["after_fit"] / 1024
    one_growth = one_peak - single["peak_rss_kib"]["before_model"] / 1024
    report = [
        f"table {TABLE_MIB:.0f} MiB; 1 worker: peak {one_peak:.0f} MiB "
        f"(+{one_growth:.0f} MiB for the model and training)"
    ]
    for rank, result in sorted(pair.items()):
        rss = result["peak_rss_kib"]
        peak = rss["after_fit"] / 1024
        growth = peak - rss["before_model"] / 1024
        report.append(
            f"2 workers, rank {rank}: peak {peak:.0f} MiB (+{growth:.0f} "
            f"MiB), {result['local_rows']} rows"
        )
    message = "; ".join(report)
    print(message)
    for rank, result in pair.items():
        assert result["local_rows"] == V // 2, message
        rss = result["peak_rss_kib"]
        peak = rss["after_fit"] / 1024
        growth = peak - rss["before_model"] / 1024
        assert one_peak - peak >= 200, f"rank {rank}: {message}"
        # Half the table: what the model adds is well below the single
        # process's growth, not just a little.
        assert growth <= 0.6 * one_growth, f"rank {rank}: {message}"
