"""Package names imported on first use (PEP 562), so that importing a
package, or a light module of it, does not import what its heavier
modules need (TensorFlow)."""

import importlib


def lazy_getattr(package: str, sources: dict[str, str]):
    """A module-level `__getattr__` for `package`: each name of `sources`
    comes from the module it maps to, imported when the name is first
    read.

    ```python
    _SOURCES = {"CommStats": "keras_hybrid.comm.comm_stats"}
    __all__ = sorted(_SOURCES)
    __getattr__ = lazy_exports.lazy_getattr(__name__, _SOURCES)
    ```
    """

    def __getattr__(name: str):
        if name not in sources:
            raise AttributeError(
                f"module {package!r} has no attribute {name!r}"
            )
        return getattr(importlib.import_module(sources[name]), name)

    return __getattr__
