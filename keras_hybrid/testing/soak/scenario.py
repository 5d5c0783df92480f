"""One run of the soak: the job's shape, its commit store, the faults it
suffers and the discovery changes around them; drawn at random by
`draw`."""

import dataclasses

import numpy as np

from keras_hybrid.testing.soak.faults import MOMENTS
from keras_hybrid.testing.soak.faults import Fault

STORES = ("directory", "served", "buddy")
EPOCHS = 3
NUM_SAMPLES = 288
BATCH_SIZE = 12
STEPS = EPOCHS * NUM_SAMPLES // BATCH_SIZE  # 72 global steps
MIN_NP = 2


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Attributes:
    name: String. The run's name (its folder).
    workers: Int. Slots discovery reports at the start.
    max_np: Int. `--max-np`.
    store: String. `--commit-store`, one of `STORES`.
    faults: Tuple of `Fault`.
    buddy_copies: Int. `--buddy-copies` (buddy store only).
    slots_plan: Tuple of `(global step, slots line, hold)`: discovery
        changes the chief makes (`worker.Progress`).
    save_model: Boolean. `model.save` at each epoch's end.
    checkpoint: Boolean. A `ShardedCheckpoint` at each epoch's end.
    """

    name: str
    workers: int
    max_np: int
    store: str
    faults: tuple
    buddy_copies: int = 1
    slots_plan: tuple = ()
    save_model: bool = False
    checkpoint: bool = False

    def expected(self) -> str:
        """`"clean error"` when the faults leave fewer than `MIN_NP`
        workers and discovery no longer reports `MIN_NP` slots (each
        fault with `drop_slot` lowers it), else `"survived"`. A loss
        during a grow cancels it: the joiner (the highest rank) is not a
        survivor then, and the old members count."""
        slots = max([self.workers, *(_slots(s) for _, s, _ in self.slots_plan)])
        members = self.workers
        lost = sum(f.rank < members for f in self.faults)
        left = slots - sum(f.drop_slot for f in self.faults)
        if members - lost < MIN_NP and left < MIN_NP:
            return "clean error"
        return "survived"

    def describe(self) -> str:
        kills = ", ".join(
            f"rank {f.rank} at step {f.step} ({f.moment}"
            + (", slot dropped" if f.drop_slot else "")
            + ")"
            for f in self.faults
        )
        extra = [
            *(f"slots {s} at step {a}" for a, s, _ in self.slots_plan),
            *(["model.save"] if self.save_model else []),
            *(["ShardedCheckpoint"] if self.checkpoint else []),
        ]
        store = self.store + (
            f" x{self.buddy_copies}" if self.buddy_copies > 1 else ""
        )
        return (
            f"{self.workers} workers (max {self.max_np}), {store}: {kills}"
            + (f"; {', '.join(extra)}" if extra else "")
        )


def _slots(line: str) -> int:
    return int(line.rpartition(":")[2])


def draw(rng: np.random.Generator, name: str) -> Scenario:
    """A random scenario: 2-4 workers, a store, one or two SIGKILLs at a
    random moment (two only from 3 workers, at the same moment: within
    one step)."""
    workers = int(rng.integers(2, 5))
    store = STORES[int(rng.integers(len(STORES)))]
    moment = MOMENTS[int(rng.integers(len(MOMENTS)))]
    kills = 2 if workers >= 3 and rng.random() < 0.4 else 1
    step = int(rng.integers(5, STEPS - 12))
    max_np, plan, size = workers, (), workers
    if moment == "row_move":
        # A resize at `step`: a grow, or from 4 workers a shrink.
        size = workers + 1 if workers < 4 else workers - 1
        max_np = max(workers, size)
        plan = ((step, f"localhost:{size}", True),)
    # Two kills share the moment and the step: both die within one step
    # (in it, in one commit, row move, save or checkpoint).
    ranks = rng.choice(max(size, workers), size=kills, replace=False)
    faults = tuple(
        Fault(
            rank=int(rank),
            step=step,
            moment=moment,
            delay=round(float(rng.uniform(0.0, 0.05)), 3),
            drop_slot=bool(rng.random() < 0.3),
        )
        for rank in ranks
    )
    return Scenario(
        name=name,
        workers=workers,
        max_np=max_np,
        store=store,
        faults=faults,
        buddy_copies=2 if store == "buddy" and kills == 2 else 1,
        slots_plan=plan,
        save_model=moment == "save" or bool(rng.random() < 0.2),
        checkpoint=moment == "checkpoint" or bool(rng.random() < 0.2),
    )
