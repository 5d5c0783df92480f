"""Shared helpers for launcher tests: worker scripts and CLI runs."""

import subprocess
import sys
import textwrap

import pytest

# Upper bound for any single launcher run in these tests.
CLI_TIMEOUT = 60


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "tensorflow: imports TensorFlow (slow to start)"
    )


@pytest.fixture
def write_script(tmp_path):
    """Returns `write(name, source) -> Path` for plain-Python workers."""

    def write(name, source):
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture
def run_cli():
    """Returns `run(*args, timeout=...) -> CompletedProcess` of the CLI."""

    def run(*args, timeout=CLI_TIMEOUT, env=None):
        return subprocess.run(
            [sys.executable, "-m", "keras_hybrid.run", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )

    return run
