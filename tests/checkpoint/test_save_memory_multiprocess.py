"""Saving a 512 MiB partitioned table on 2 workers streams it: the chief
never holds the table twice, and a sharded checkpoint never copies a shard.

Uses `tests/sparse/workers/memory_worker.py --save_dir`, which resets the
peak RSS (`VmHWM`) before each save and reports what the save added.
"""

import os
import tempfile

import pytest

from keras_hybrid.testing import run_workers

pytestmark = pytest.mark.multiprocess

WORKER = os.path.join(
    os.path.dirname(__file__), "..", "sparse", "workers", "memory_worker.py"
)
V, D = 1_048_576, 128
TABLE_MIB = V * D * 4 / 2**20  # 512
SHARD_MIB = TABLE_MIB / 2


def test_saves_stream_tables():
    out_dir = tempfile.mkdtemp(prefix="save_memory_")
    save_dir = os.path.join(out_dir, "saved")
    os.makedirs(save_dir)
    run = run_workers(
        WORKER,
        2,
        out_dir,
        args=(
            f"--rows={V}",
            f"--dim={D}",
            "--steps=2",
            f"--save_dir={save_dir}",
        ),
        timeout=240,
    ).check()
    report = []
    for rank, result in sorted(run.results.items()):
        growth = {k: v / 1024 for k, v in result["save_growth_kib"].items()}
        report.append(
            f"rank {rank}: save_weights +{growth['save_weights']:.0f} MiB, "
            f"save_checkpoint +{growth['save_checkpoint']:.0f} MiB"
        )
    message = f"table {TABLE_MIB:.0f} MiB, shard {SHARD_MIB:.0f} MiB; " + (
        "; ".join(report)
    )
    print(message)
    for result in run.results.values():
        growth = result["save_growth_kib"]
        # Gathered whole, then copied by NumPy, the table alone would add
        # 2 x 512 MiB on the chief (1.8 GiB was measured before streaming).
        # Streamed in 16 MiB blocks it added 203 to 288 MiB (allocators
        # keep freed blocks; 288 with the Horovod suite beside it), so the
        # bound is "never the whole table", not half of it.
        assert growth["save_weights"] / 1024 < TABLE_MIB, message
        assert growth["save_checkpoint"] / 1024 < 0.5 * SHARD_MIB, message
    assert os.path.getsize(os.path.join(save_dir, "w.weights.h5")) > (
        TABLE_MIB * 2**20
    )
