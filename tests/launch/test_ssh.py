import os
import shlex
import unittest
from unittest import mock

import pytest

from keras_hybrid.launch import plan_workers
from keras_hybrid.launch.ssh import is_local_host
from keras_hybrid.launch.ssh import ssh_command

pytestmark = pytest.mark.timeout(30)


class SshCommandTest(unittest.TestCase):
    def test_quotes_every_piece(self):
        argv = ssh_command(
            "h1",
            "/my dir",
            {"A": "1 2", "B": "it's"},
            ["python", "train.py", "--name", "a b;rm -rf x"],
        )
        self.assertEqual(argv[:4], ["ssh", "-o", "BatchMode=yes", "h1"])
        self.assertEqual(len(argv), 5)
        # The remote shell splits the string back into exactly these words.
        self.assertEqual(
            shlex.split(argv[4]),
            [
                "cd",
                "/my dir",
                "&&",
                "exec",
                "env",
                "A=1 2",
                "B=it's",
                "python",
                "train.py",
                "--name",
                "a b;rm -rf x",
            ],
        )

    def test_local_host_names(self):
        self.assertTrue(is_local_host("localhost"))
        self.assertTrue(is_local_host("127.0.0.1"))
        self.assertFalse(is_local_host("h1"))


class PlanWorkersOverSshTest(unittest.TestCase):
    def test_remote_workers_get_contract_in_ssh_command(self):
        with mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": "-1"}):
            commands = plan_workers(
                ["python", "t.py"], hosts="h1:2,h2:1", port=29400, threads=1
            )
        self.assertEqual([c.rank for c in commands], [0, 1, 2])
        remote = shlex.split(commands[2].argv[4])
        self.assertEqual(commands[2].argv[3], "h2")
        self.assertIn("KERAS_HYBRID_RANK=2", remote)
        self.assertIn("KERAS_HYBRID_LOCAL_RANK=0", remote)
        self.assertIn("KERAS_HYBRID_LOCAL_SIZE=1", remote)
        self.assertIn(
            'TF_CONFIG={"cluster": {"worker": ["h1:29400", "h1:29401", '
            '"h2:29400"]}, "task": {"type": "worker", "index": 2}}',
            remote,
        )
        self.assertEqual(remote[-2:], ["python", "t.py"])
        # The launcher's own variables are not shipped to the remote side.
        self.assertNotIn(f"PATH={os.environ['PATH']}", remote)
