"""Every test file that launches workers is marked `multiprocess` (or
`netns`): `make test` runs the marked tests in one pytest process, one
after another (tests/conftest.py), and an unmarked launch would run beside
them, two jobs of TensorFlow workers on the same cores."""

import ast
import glob
import os
import re

from tests.conftest import LAUNCH_MARKS

TESTS = os.path.dirname(__file__)
# A call that starts worker processes through the launcher.
LAUNCH = re.compile(
    r"\b(run_scenario|run_workers|shared_pool)\(|keras-hybrid-run|"
    r'"keras_hybrid\.run"'
)
# Name a launcher without starting one: the error before any launch, and
# this file's examples.
NOT_LAUNCHING = {"horovod/test_engine_choice.py", "test_markers.py"}


def unmarked_launches(sources: dict) -> list:
    """Paths among `sources` (path -> text) that launch and are not
    marked."""
    return sorted(
        path
        for path, text in sources.items()
        if path not in NOT_LAUNCHING
        and LAUNCH.search(text)
        and not _marked(text)
    )


def _marked(text: str) -> bool:
    """Whether the code (not a string in it, such as a worker script)
    names `pytest.mark.multiprocess` or `pytest.mark.netns`."""
    return any(
        isinstance(node, ast.Attribute)
        and node.attr in LAUNCH_MARKS
        and ast.unparse(node.value) == "pytest.mark"
        for node in ast.walk(ast.parse(text))
    )


def _test_files() -> dict:
    sources = {}
    for path in glob.glob(
        os.path.join(TESTS, "**", "test_*.py"), recursive=True
    ):
        with open(path) as f:
            sources[os.path.relpath(path, TESTS)] = f.read()
    return sources


def test_every_launching_file_is_marked():
    assert unmarked_launches(_test_files()) == []


def test_an_unmarked_launch_is_found():
    sources = {
        "a/test_x.py": "run = run_scenario(SCENARIOS, 'f', 2)",
        "a/test_y.py": "pytestmark = pytest.mark.multiprocess\nrun_workers()",
        "a/test_z.py": "CLI = [sys.executable, '-m', \"keras_hybrid.run\"]",
        "a/test_w.py": "def test_plain():\n    assert 1",
        # The mark inside a worker script's text does not count.
        "a/test_v.py": 'S = """pytestmark = pytest.mark.multiprocess"""\n'
        "run_workers()",
    }
    assert unmarked_launches(sources) == [
        "a/test_v.py",
        "a/test_x.py",
        "a/test_z.py",
    ]
