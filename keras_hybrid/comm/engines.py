"""`make_communicator`: the engine a job runs its collectives on."""

from keras_hybrid.comm.communicator import Communicator
from keras_hybrid.comm.tf_communicator import TFCommunicator

ENGINES = ("tf", "horovod")


def make_communicator(
    engine: str,
    rank: int,
    size: int,
    timeout_seconds: float,
    bucket_bytes: int,
) -> Communicator:
    """Builds the communicator of `engine` (one of `ENGINES`).

    Raises:
        ValueError: If `engine` is unknown.
        ImportError: If `engine` is `"horovod"` and Horovod with its
            TensorFlow ops cannot be imported (the message gives the build
            command).
    """
    if engine == "tf":
        return TFCommunicator(rank, size, timeout_seconds, bucket_bytes)
    if engine == "horovod":
        # Imported on demand: it imports Horovod, which the TF engine
        # does not need.
        from keras_hybrid.comm.horovod_communicator import HorovodCommunicator

        return HorovodCommunicator(rank, size, timeout_seconds, bucket_bytes)
    raise ValueError(
        f"`engine` must be one of {ENGINES}. Received: engine={engine!r}"
    )
