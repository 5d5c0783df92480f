"""Global batches that do not split evenly over the workers train as on
one process: each worker's loss and gradients count by its rows."""

import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from keras_hybrid.testing import TestCase
from keras_hybrid.testing.pool import run_scenario

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]

HERE = os.path.join(os.path.dirname(__file__), "workers")
WORKER = os.path.join(HERE, "uneven_batch_worker.py")
SCENARIOS = os.path.join(HERE, "uneven_batch_scenarios.py")
sys.path.insert(0, HERE)
import uneven_batch_scenarios as scenarios  # noqa: E402


def one_process(out_dir):
    """The reference: the same script as one plain process."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.makedirs(out_dir)
    subprocess.run(
        [sys.executable, WORKER, f"--out_dir={out_dir}"],
        check=True,
        env=env,
        timeout=300,
        capture_output=True,
    )
    with open(os.path.join(out_dir, "rank0.pkl"), "rb") as f:
        return pickle.load(f)


class UnevenBatchTest(TestCase):
    def test_three_workers_match_one_process(self):
        root = tempfile.mkdtemp()
        reference = one_process(os.path.join(root, "one"))
        run = run_scenario(SCENARIOS, "on_workers", 3).check()
        for kind in scenarios.KINDS:
            want = reference[kind]
            for rank in range(3):
                got = run.results[rank][kind]
                # A custom step's logs are its own numbers, per worker.
                history = want["history"] if kind != "own_mean" else {}
                for name, values in history.items():
                    np.testing.assert_allclose(
                        got["history"][name],
                        values,
                        atol=1e-6,
                        rtol=0,
                        err_msg=f"{kind} {name} on rank {rank}",
                    )
                for a, b in zip(got["weights"], want["weights"], strict=True):
                    np.testing.assert_allclose(
                        a,
                        b,
                        atol=1e-6,
                        rtol=0,
                        err_msg=f"{kind} on rank {rank}",
                    )
