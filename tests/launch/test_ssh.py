import os
import shlex
import subprocess
import sys
import unittest
from unittest import mock

import pytest

from keras_hybrid.launch import plan_workers
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV
from keras_hybrid.launch.ssh import SSH_OPTIONS
from keras_hybrid.launch.ssh import forwarded_env
from keras_hybrid.launch.ssh import is_local_host
from keras_hybrid.launch.ssh import remote_command
from keras_hybrid.launch.ssh import ssh_client
from keras_hybrid.launch.ssh import ssh_command

pytestmark = pytest.mark.timeout(30)


class SshCommandTest(unittest.TestCase):
    def test_quotes_every_piece(self):
        argv = ssh_command(
            "h1",
            "/my dir",
            {"A": "1 2", "B": "it's"},
            ["python", "train.py", "--name", "a b;rm -rf x"],
            grace_seconds=4,
            client=["ssh"],
        )
        self.assertEqual(argv[:2], ["ssh", "h1"])
        self.assertEqual(len(argv), 3)
        # The remote shell splits the string back into exactly these words.
        words = shlex.split(argv[2])
        self.assertEqual(words[:3], ["cd", "/my dir", "2>/dev/null"])
        exec_at = words.index("exec")
        self.assertEqual(
            words[exec_at:],
            [
                "exec",
                "env",
                "A=1 2",
                "B=it's",
                sys.executable,
                "-m",
                "keras_hybrid.launch.remote_guard",
                "--grace_seconds",
                "4",
                "--",
                "python",
                "train.py",
                "--name",
                "a b;rm -rf x",
            ],
        )

    def test_a_short_remote_command_runs_without_the_guard(self):
        # The launcher waits for its end (`host_ports`): no guard to keep
        # ssh's stdin open for.
        argv = remote_command(
            "h1", "/my dir", {"A": "1 2"}, ["python", "-m", "m", "3"], ["ssh"]
        )
        self.assertEqual(argv[:2], ["ssh", "h1"])
        words = shlex.split(argv[2])
        self.assertEqual(
            words[words.index("exec") :],
            ["exec", "env", "A=1 2", "python", "-m", "m", "3"],
        )
        self.assertIn("does not exist on h1", argv[2])

    def test_missing_working_directory_is_named(self):
        argv = ssh_command("h1", "/nowhere", {}, ["true"], client=["ssh"])
        run = subprocess.run(
            ["sh", "-c", argv[2]], capture_output=True, text=True
        )
        self.assertEqual(run.returncode, 127)
        self.assertIn("/nowhere does not exist on h1", run.stderr)

    def test_client_from_environment(self):
        self.assertEqual(ssh_client({})[:1], ["ssh"])
        self.assertIn("BatchMode=yes", ssh_client({}))
        client = ssh_client({SSH_COMMAND_ENV: "ssh -F '/a b/cfg'"})
        self.assertEqual(client[:3], ["ssh", "-F", "/a b/cfg"])
        self.assertEqual(client[3:], list(SSH_OPTIONS))
        for bad in ("", "ssh 'unclosed"):
            with self.assertRaisesRegex(ValueError, SSH_COMMAND_ENV):
                ssh_client({SSH_COMMAND_ENV: bad})

    def test_forwarded_environment(self):
        env = forwarded_env(
            {
                "PATH": "/usr/bin",
                "PYTHONPATH": "/src",
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "KERAS_HOME": "/k",
                "HOME": "/root",
                "SSH_AUTH_SOCK": "/tmp/agent",
            }
        )
        self.assertEqual(
            set(env),
            {"PATH", "PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL", "KERAS_HOME"},
        )
        # `python` remotely is the launcher's interpreter's environment.
        self.assertEqual(
            env["PATH"].split(os.pathsep)[0], os.path.dirname(sys.executable)
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
        remote = shlex.split(commands[2].argv[-1])
        self.assertEqual(commands[2].argv[-2], "h2")
        self.assertEqual(commands[2].host, "h2")
        self.assertIn("KERAS_HYBRID_RANK=2", remote)
        self.assertIn("KERAS_HYBRID_LOCAL_RANK=0", remote)
        self.assertIn("KERAS_HYBRID_LOCAL_SIZE=1", remote)
        self.assertIn(
            'TF_CONFIG={"cluster": {"worker": ["h1:29400", "h1:29401", '
            '"h2:29400"]}, "task": {"type": "worker", "index": 2}}',
            remote,
        )
        self.assertEqual(remote[-2:], ["python", "t.py"])
        # Only the forwarded part of the launcher's environment goes along.
        self.assertNotIn(f"HOME={os.environ['HOME']}", remote)
