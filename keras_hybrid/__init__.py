"""keras-hybrid: sparsity-aware data-parallel training for Keras 3.

The public API is the names in `__all__`. They are loaded on first use so
that the launcher (`keras-hybrid-run`) starts without importing TensorFlow.
"""

import importlib

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    "HybridStrategy": "keras_hybrid.strategy.hybrid_strategy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_hybrid' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted(list(globals()) + __all__)
