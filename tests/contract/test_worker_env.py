import json
import os
import unittest
from unittest import mock

import pytest

from keras_hybrid.contract import worker_env
from keras_hybrid.contract.worker_spec import WorkerSpec

pytestmark = pytest.mark.timeout(30)

CLUSTER = ["h1:29400", "h1:29401", "h2:29400"]
SPEC = WorkerSpec(1, 3, 1, 2, "h1", 29401)


class WorkerEnvTest(unittest.TestCase):
    def test_contract_variables(self):
        env = worker_env.worker_env(SPEC, CLUSTER, threads=3, device="1")
        self.assertEqual(
            json.loads(env.pop("TF_CONFIG")),
            {
                "cluster": {"worker": CLUSTER},
                "task": {"type": "worker", "index": 1},
            },
        )
        self.assertEqual(
            env,
            {
                "KERAS_HYBRID_RANK": "1",
                "KERAS_HYBRID_SIZE": "3",
                "KERAS_HYBRID_LOCAL_RANK": "1",
                "KERAS_HYBRID_LOCAL_SIZE": "2",
                "TF_NUM_INTRAOP_THREADS": "3",
                "TF_NUM_INTEROP_THREADS": "3",
                "OMP_NUM_THREADS": "3",
                "KERAS_HYBRID_THREADS": "3",
                "CUDA_VISIBLE_DEVICES": "1",
                "PYTHONUNBUFFERED": "1",
            },
        )

    def test_no_device_leaves_cuda_unset(self):
        env = worker_env.worker_env(SPEC, CLUSTER, threads=1)
        self.assertNotIn("CUDA_VISIBLE_DEVICES", env)

    def test_default_threads_split_cores_by_local_size(self):
        with mock.patch.object(os, "cpu_count", return_value=8):
            env = worker_env.worker_env(SPEC, CLUSTER)
            self.assertEqual(worker_env.default_threads(16), 1)
        self.assertEqual(env["OMP_NUM_THREADS"], "4")

    def test_default_threads_when_cpu_count_unknown(self):
        with mock.patch.object(os, "cpu_count", return_value=None):
            self.assertEqual(worker_env.default_threads(2), 1)

    def test_extra_env_is_added_last(self):
        env = worker_env.worker_env(
            SPEC, CLUSTER, threads=2, extra_env={"OMP_NUM_THREADS": "9"}
        )
        self.assertEqual(env["OMP_NUM_THREADS"], "9")
        self.assertEqual(env["TF_NUM_INTRAOP_THREADS"], "2")
