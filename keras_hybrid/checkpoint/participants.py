"""Who takes part in a checkpoint: this rank, the job size, and a barrier."""

import dataclasses

import tensorflow as tf

from keras_hybrid.strategy.hybrid_extended import is_hybrid


@dataclasses.dataclass(frozen=True)
class World:
    """The workers that save or restore a checkpoint together.

    Attributes:
        rank: Int. This worker.
        size: Int. Number of workers.
        communicator: The job's `Communicator`, or None for one process.
    """

    rank: int
    size: int
    communicator: object = None

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def agree(self, error: BaseException | None, what: str) -> None:
        """A barrier that fails on every worker if `error` is set on one.

        Raises:
            The local `error`, or RuntimeError naming `what` if another
            worker failed.
        """
        failed = error is not None
        if self.communicator is not None and self.size > 1:
            flag = tf.constant([int(failed)], tf.int32)
            (total,) = self.communicator.all_reduce([flag], op="max")
            failed = bool(total.numpy()[0])
        if error is not None:
            raise error
        if failed:
            raise RuntimeError(
                f"{what} failed on another worker; see that worker's log."
            )


def of_model(model, strategy=None) -> World:
    """The world of `model`: its `HybridStrategy`'s workers, or one process."""
    if strategy is None:
        strategy = hybrid_strategy_of(model)
    if is_hybrid(strategy):
        return World(strategy.rank, strategy.size, strategy.communicator)
    return World(0, 1)


def hybrid_strategy_of(model):
    """The `HybridStrategy` `model` was built under, or the one in scope,
    or None."""
    strategy = model.distribute_strategy
    if not is_hybrid(strategy) and tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
    return strategy if is_hybrid(strategy) else None
