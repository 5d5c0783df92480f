"""`--model_dir` on 2 workers: stock `BackupAndRestore` backs up once (rank
0 writes) and a second run resumes after the last finished epoch."""

import os
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.multiprocess

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
# Examples run as modules from the repository root.
MAIN = ("-m", "examples.recommender.main")
TINY = (
    "--steps=3",
    "--batch_size=16",
    "--vocab_sizes=300,40,5",
    "--num_dense=3",
    "--dim=4",
)


def _run(model_dir, epochs):
    command = [
        sys.executable,
        "-m",
        "keras_hybrid.run",
        "-np",
        "2",
        "--threads",
        "1",
        sys.executable,
        *MAIN,
        *TINY,
        f"--epochs={epochs}",
        f"--model_dir={model_dir}",
    ]
    out = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-4000:] + out.stdout[-4000:]
    return out.stdout + out.stderr


def test_two_workers_back_up_and_resume():
    model_dir = tempfile.mkdtemp(prefix="model_dir_")
    _run(model_dir, epochs=1)
    assert sorted(os.listdir(model_dir)) == [
        "latest.weights.h5",
        "training_metadata.json",
    ]
    log = _run(model_dir, epochs=2)
    assert "Epoch 2/2" in log
    assert "Epoch 1/2" not in log  # resumed after the finished epoch
