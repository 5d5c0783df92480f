"""Communication engines behind one small interface.

Nothing above this package knows which engine runs: the strategy and the
optimizer talk to a `Communicator`.

The names below load on first use, so importing a TensorFlow-free module
of this package (`ladder`, the capacity ladder the cost library prices
with) does not import TensorFlow.
"""

from keras_hybrid.utils import lazy_exports

_SOURCES = {
    "PATHS": "keras_hybrid.comm.comm_stats",
    "CommStats": "keras_hybrid.comm.comm_stats",
    "Communicator": "keras_hybrid.comm.communicator",
    "make_communicator": "keras_hybrid.comm.engines",
}

__all__ = list(_SOURCES)
__getattr__ = lazy_exports.lazy_getattr(__name__, _SOURCES)
