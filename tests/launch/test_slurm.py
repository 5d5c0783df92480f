"""`--slurm`: these tests import TensorFlow for SlurmClusterResolver."""

import json
import os
import subprocess
import sys

import pytest

from keras_hybrid.launch import slurm

pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.timeout(120),
    pytest.mark.multiprocess,
]

# Two nodes with two tasks each; this process plays task 1 (on n1).
SLURM_ENV = {
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURMD_NODENAME": "n1",
    "CUDA_VISIBLE_DEVICES": "4,5",
}

# Older TensorFlow versions expand node lists with `scontrol show
# hostnames`; TF 2.21 does it in Python. The fake keeps both working.
FAKE_SCONTROL = """#!/bin/sh
echo n1
echo n2
"""


@pytest.fixture
def slurm_env(monkeypatch, tmp_path):
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(FAKE_SCONTROL)
    scontrol.chmod(0o755)
    monkeypatch.setenv(
        "PATH", f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}"
    )
    for key, value in SLURM_ENV.items():
        monkeypatch.setenv(key, value)


def test_slurm_env_for_one_task(slurm_env):
    env = slurm.slurm_worker_env(port=29400, threads=3, extra_env={"X": "y"})
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["n1:29400", "n1:29401", "n2:29400", "n2:29401"]},
        "task": {"type": "worker", "index": 1},
    }
    assert env["KERAS_HYBRID_RANK"] == "1"
    assert env["KERAS_HYBRID_SIZE"] == "4"
    assert env["KERAS_HYBRID_LOCAL_RANK"] == "1"
    assert env["KERAS_HYBRID_LOCAL_SIZE"] == "2"
    assert env["OMP_NUM_THREADS"] == env["KERAS_HYBRID_THREADS"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert env["X"] == "y"
    # The resolver must not have changed the launcher's own environment.
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_slurm_rejects_task_on_unexpected_node(slurm_env, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    with pytest.raises(ValueError, match=r"placed rank 1 on 'n1'"):
        slurm.slurm_worker_env(port=29400)


def test_slurm_outside_a_step(slurm_env, monkeypatch):
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS")
    with pytest.raises(ValueError, match=r"must run inside a Slurm job step"):
        slurm.slurm_worker_env(port=29400)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    monkeypatch.delenv("SLURM_PROCID")
    with pytest.raises(ValueError, match=r"SLURM_PROCID not found"):
        slurm.slurm_worker_env(port=29400)


def test_slurm_cli_execs_command(tmp_path):
    script = tmp_path / "show_env.py"
    script.write_text(
        "import os\nprint(os.environ['TF_CONFIG'])\n"
        "print(os.environ['KERAS_HYBRID_THREADS'])\n"
    )
    env = {
        **os.environ,
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "1",
        "SLURM_STEP_NODELIST": "node7",
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURMD_NODENAME": "node7",
        "CUDA_VISIBLE_DEVICES": "-1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_hybrid.run",
            "--slurm",
            "--port",
            "31000",
            "--threads",
            "2",
            sys.executable,
            script,
        ],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    tf_config, threads = result.stdout.splitlines()
    # srun labels lines itself; the exec'd worker output is not prefixed.
    assert json.loads(tf_config) == {
        "cluster": {"worker": ["node7:31000"]},
        "task": {"type": "worker", "index": 0},
    }
    assert threads == "2"
