"""The package itself: public API, and the message without TensorFlow."""

import pathlib
import subprocess
import sys
import textwrap

import pytest

import keras_hybrid


def test_public_api_is_what_init_exports():
    assert keras_hybrid.__all__ == ["HybridOptimizer", "HybridStrategy", "Link"]
    assert keras_hybrid.HybridStrategy.__name__ == "HybridStrategy"
    assert keras_hybrid.HybridOptimizer.__name__ == "HybridOptimizer"


def test_subpackages_load_on_first_use():
    assert keras_hybrid.callbacks.ShardedCheckpoint.__name__ == (
        "ShardedCheckpoint"
    )
    assert callable(keras_hybrid.checkpoint.save_checkpoint)
    assert callable(keras_hybrid.checkpoint.restore_checkpoint)


def test_missing_tensorflow_names_the_extras():
    code = textwrap.dedent(
        """
        import sys
        class NoTF:
            def find_spec(self, name, path=None, target=None):
                if name == "tensorflow" or name.startswith("tensorflow."):
                    raise ModuleNotFoundError(
                        "No module named 'tensorflow'", name="tensorflow")
        sys.meta_path.insert(0, NoTF())
        import keras_hybrid
        try:
            keras_hybrid.HybridStrategy
        except ImportError as e:
            print("ERR", e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ERR keras-hybrid needs TensorFlow >= 2.16" in out.stdout, out
    assert "keras-hybrid[tensorflow-cpu]" in out.stdout


_COSTS = pathlib.Path(keras_hybrid.__file__).parent / "costs"


@pytest.mark.parametrize(
    "modules",
    [
        [f"keras_hybrid.costs.{p.stem}" for p in sorted(_COSTS.glob("*.py"))],
        ["keras_hybrid.simulate.__main__"],
        ["keras_hybrid.benchmark.__main__"],
        ["keras_hybrid.launch"],
    ],
    ids=["costs", "simulate", "benchmark", "launcher"],
)
def test_imports_without_tensorflow(modules):
    # The runtime's cost library is plain NumPy; the tools refuse a
    # mistyped flag and simulate a saved profile without TensorFlow's
    # seconds of import; the launcher starts workers without it.
    assert len(modules) > 0
    code = (
        f"import {', '.join(modules)}, sys; print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "False", out
