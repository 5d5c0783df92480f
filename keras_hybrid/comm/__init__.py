"""Communication engines behind one small interface.

Nothing above this package knows which engine runs: the strategy and the
optimizer talk to a `Communicator`.
"""

from keras_hybrid.comm.comm_stats import PATHS
from keras_hybrid.comm.comm_stats import CommStats
from keras_hybrid.comm.communicator import Communicator
from keras_hybrid.comm.engines import make_communicator

__all__ = ["PATHS", "CommStats", "Communicator", "make_communicator"]
