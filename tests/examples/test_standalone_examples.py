"""Each example runs as `python examples/<name>/main.py` from any
directory, and a copy of its folder runs on its own."""

import filecmp
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
WITH_TRAINING = ("dense_cnn", "lm", "nmt", "recommender")
# Examples that need a package the test environment may lack.
NEEDS_EXTRA = {"horovod_comparison": "horovod"}


def run(args, cwd, timeout=300):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def test_the_shared_training_module_is_the_same_in_every_example():
    first = os.path.join(EXAMPLES, WITH_TRAINING[0], "training.py")
    for name in WITH_TRAINING[1:]:
        other = os.path.join(EXAMPLES, name, "training.py")
        assert filecmp.cmp(first, other, shallow=False), other


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in os.listdir(EXAMPLES)
        if os.path.isfile(os.path.join(EXAMPLES, n, "main.py"))
        and n not in NEEDS_EXTRA
    ),
)
def test_main_imports_from_another_directory(name, tmp_path):
    main = os.path.join(EXAMPLES, name, "main.py")
    result = run([main, "--helpshort"], cwd=tmp_path, timeout=120)
    assert "Error" not in result.stderr, result.stderr[-2000:]
    assert "USAGE" in result.stdout or "flags" in result.stdout, result


@pytest.mark.timeout(600)
def test_a_copied_folder_trains_on_its_own(tmp_path):
    copy = tmp_path / "my_recommender"
    shutil.copytree(os.path.join(EXAMPLES, "recommender"), copy)
    shutil.rmtree(copy / "__pycache__", ignore_errors=True)
    (copy / "__init__.py").unlink()
    result = run(
        ["main.py", "--steps=2", "--epochs=1", "--batch_size=16"], cwd=copy
    )
    assert result.returncode == 0, result.stderr[-3000:]
    result = run(
        [os.path.join(EXAMPLES, "dense_cnn", "main.py"), "--steps=2"]
        + ["--epochs=1", "--batch_size=16"],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
