"""`ShardAssignment`: which worker holds each virtual shard of a table."""

import dataclasses

import numpy as np


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int. Received: {name}={value!r}")
    if value < 1:
        raise ValueError(f"`{name}` must be >= 1. Received: {name}={value}")


@dataclasses.dataclass(frozen=True)
class ShardAssignment:
    """Maps `len(owners)` virtual shards onto workers `[0, num_workers)`.

    A table's rows fall into virtual shards that never change (see
    `RowPartition`); only this map changes when workers join or leave, and
    a virtual shard moves whole. A balanced assignment gives every worker
    `V // N` or `V // N + 1` of the `V` virtual shards. Worker indices are
    ranks of the communicator the table uses; a worker of that
    communicator with a rank `>= num_workers` holds no rows.

    Args:
        owners: Tuple of ints. `owners[v]` is the worker holding virtual
            shard `v`.
        num_workers: Int. Workers the shards are spread over.

    Example:

    ```python
    three = ShardAssignment.balanced(num_virtual=1024, num_workers=3)
    four = three.resized(4)        # moves 256 of 1024 virtual shards
    three.moved_to(four)           # {virtual shard: (old, new worker)}
    ```

    Raises:
        ValueError: If an owner is outside `[0, num_workers)`.
    """

    owners: tuple[int, ...]
    num_workers: int

    def __post_init__(self) -> None:
        _check_count("num_workers", self.num_workers)
        owners = np.asarray(self.owners)
        if owners.size and (
            owners.min() < 0 or owners.max() >= self.num_workers
        ):
            raise ValueError(
                "Every owner must be a worker in [0, num_workers). Received: "
                f"owners from {owners.min()} to {owners.max()} with "
                f"num_workers={self.num_workers}."
            )

    @classmethod
    def balanced(cls, num_virtual: int, num_workers: int) -> "ShardAssignment":
        """Round-robin: virtual shard `v` on worker `v % num_workers`.

        Raises:
            ValueError: If there are fewer virtual shards than workers.
        """
        _check_count("num_virtual", num_virtual)
        _check_count("num_workers", num_workers)
        _check_enough(num_virtual, num_workers)
        return cls(
            tuple(v % num_workers for v in range(num_virtual)), num_workers
        )

    def __repr__(self) -> str:
        counts = self.counts().tolist()
        return (
            f"ShardAssignment(num_virtual={self.num_virtual}, "
            f"num_workers={self.num_workers}, shards per worker={counts})"
        )

    @property
    def num_virtual(self) -> int:
        return len(self.owners)

    def shards_of(self, worker: int) -> np.ndarray:
        """Virtual shards of `worker`, ascending (its storage order)."""
        return np.flatnonzero(np.asarray(self.owners) == worker)

    def counts(self) -> np.ndarray:
        """Virtual shards per worker, shape `[num_workers]`."""
        return np.bincount(self.owners, minlength=self.num_workers)

    def resized(self, num_workers: int) -> "ShardAssignment":
        """The balanced assignment onto `num_workers` that moves least.

        Workers `[0, num_workers)` keep their virtual shards up to their new
        quota (`V // N`, or one more for the workers that hold the most);
        the shards of leaving workers (ranks `>= num_workers`) and the
        surplus of workers over quota (their highest-numbered shards) go,
        in ascending order, to the workers under quota, lowest rank first.
        Only as many shards move as the balance needs. Pure and
        deterministic: every worker computes the same result.

        Args:
            num_workers: Int. Workers after the resize.

        Returns:
            A new `ShardAssignment`.

        Raises:
            ValueError: If `num_workers` exceeds the virtual shards.
        """
        _check_count("num_workers", num_workers)
        _check_enough(self.num_virtual, num_workers)
        owners = np.asarray(self.owners).copy()
        kept = [self.shards_of(w) for w in range(num_workers)]
        base, extra = divmod(self.num_virtual, num_workers)
        # The +1 quotas go to the workers holding most, so fewer move.
        by_size = sorted(range(num_workers), key=lambda w: (-len(kept[w]), w))
        quota = np.full(num_workers, base)
        quota[by_size[:extra]] += 1
        pool = [np.flatnonzero(owners >= num_workers)]
        for w in range(num_workers):
            pool.append(kept[w][quota[w] :])
        free = np.sort(np.concatenate(pool))
        start = 0
        for w in range(num_workers):
            need = max(0, quota[w] - len(kept[w]))
            owners[free[start : start + need]] = w
            start += need
        return ShardAssignment(tuple(int(o) for o in owners), num_workers)

    def moved_to(self, new: "ShardAssignment") -> dict[int, tuple[int, int]]:
        """`{virtual shard: (old worker, new worker)}` of shards that move.

        Raises:
            ValueError: If `new` has another number of virtual shards.
        """
        if new.num_virtual != self.num_virtual:
            raise ValueError(
                "Both assignments must have the same virtual shards. "
                f"Received: {self.num_virtual} and {new.num_virtual}."
            )
        return {
            v: (old, now)
            for v, (old, now) in enumerate(
                zip(self.owners, new.owners, strict=True)
            )
            if old != now
        }

    def get_config(self) -> dict:
        return {"owners": list(self.owners), "num_workers": self.num_workers}

    @classmethod
    def from_config(cls, config: dict) -> "ShardAssignment":
        return cls(tuple(config["owners"]), config["num_workers"])


def _check_enough(num_virtual: int, num_workers: int) -> None:
    if num_workers > num_virtual:
        raise ValueError(
            "A table needs at least one virtual shard per worker. Received: "
            f"num_workers={num_workers} with {num_virtual} virtual shards "
            "(a table has min(rows, 1024) of them). Keep tables with fewer "
            "rows than workers dense."
        )
