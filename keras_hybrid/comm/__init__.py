"""Communication engines behind one small interface.

Nothing above this package knows which engine runs: the strategy and the
optimizer talk to a `Communicator`.

The names below load on first use, so importing a TensorFlow-free module
of this package (`ladder`, the capacity ladder the cost library prices
with) does not import TensorFlow.
"""

import importlib

_EXPORTS = {
    "PATHS": "comm_stats",
    "CommStats": "comm_stats",
    "Communicator": "communicator",
    "make_communicator": "engines",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
