"""keras-hybrid: sparsity-aware data-parallel training for Keras 3.

The public API is the names in `__all__`. They are loaded on first use so
that the launcher (`keras-hybrid-run`) starts without importing TensorFlow.
"""

import importlib

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    "HybridOptimizer": "keras_hybrid.optimizers.hybrid_optimizer",
    "HybridStrategy": "keras_hybrid.hybrid_strategy",
    "Link": "keras_hybrid.plan.cost_rule",
}

__all__ = sorted(_EXPORTS)


_MIN_TF = (2, 16)
# Horovod 0.28.1 builds only against TF 2.15.1; the Horovod engine's
# environment runs Keras 3 on it (docs/horovod.md).
_HOROVOD_TF = (2, 15)
_NO_TF = (
    "keras-hybrid needs TensorFlow >= 2.16, which is not installed. Install "
    "it alone (`pip install tensorflow-cpu` or a GPU build) or with the "
    "package: `pip install keras-hybrid[tensorflow]` or "
    "`pip install keras-hybrid[tensorflow-cpu]`."
)


def _require_tensorflow() -> None:
    try:
        import tensorflow as tf
    except ModuleNotFoundError as e:
        if e.name != "tensorflow":
            raise
        raise ImportError(_NO_TF) from e
    version = tuple(int(p) for p in tf.__version__.split(".")[:2])
    if version < _MIN_TF and version != _HOROVOD_TF:
        raise ImportError(
            "keras-hybrid needs TensorFlow >= 2.16 (or 2.15 with Keras 3 "
            "for the Horovod engine). Received: "
            f"tensorflow=={tf.__version__}. Upgrade it, e.g. "
            "`pip install -U tensorflow-cpu`."
        )


# Subpackages reachable as `keras_hybrid.<name>` after `import keras_hybrid`.
_SUBPACKAGES = ("callbacks", "checkpoint", "layers")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        _require_tensorflow()
        return importlib.import_module(f"keras_hybrid.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_hybrid' has no attribute '{name}'")
    _require_tensorflow()
    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted(list(globals()) + __all__)
