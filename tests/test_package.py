"""The package itself: public API, and the message without TensorFlow."""

import subprocess
import sys
import textwrap

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


def test_launcher_import_does_not_need_tensorflow():
    code = "import keras_hybrid.launch, sys; print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "False", out
