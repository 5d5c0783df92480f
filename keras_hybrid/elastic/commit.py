"""`ElasticCommit`: keeps the training state in host memory every few steps.

The strategy adds this callback to every `fit` of an elastic job. Every
`--commit-interval` global steps (and at the start of training) each member
copies into numpy arrays every weight and optimizer variable and the
training position (epoch, next batch, global step, fenced calls). When a
worker is lost, the survivors restore the last commit they all hold
(`ElasticRecovery`) and replay the steps after it.

Every member commits at the same global steps, and a member finishes at
most one step more than another before a lost peer stops them all, so the
last two commits always include one that every survivor holds. A commit
also follows each change of the members (a resize, a recovery): at the
end of the first step that the new group trained, joiners included.

Partitioned tables and their optimizer slots, and each member's keys of
dynamic tables (`dynamic_shard`), are committed to files
(`file_store`) when the launcher names some: a directory the workers
share (the directory store, by default on one host) or the launcher's
commit server (the served store, by default on several hosts); otherwise
with buddy copies (`buddy_sender`, `buddy_store`): each member keeps its
own rows and those of the members before it, which they send over TCP.
Either way the training thread only copies each member's rows; a
background thread writes or sends them while the next steps run.

No private hook is touched here.
"""

import collections
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.comm.call_fence import active as active_fence
from keras_hybrid.elastic import buddy_store
from keras_hybrid.elastic import dynamic_shard
from keras_hybrid.elastic import file_store
from keras_hybrid.elastic.buddy_sender import BuddySender
from keras_hybrid.optimizers import accumulation
from keras_hybrid.sparse import resharding
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.strategy import local_variables

_KEEP = 2  # commits kept: survivors may be one step apart


class PlannedReaddress(Exception):
    """Stops `fit` after a commit at a step boundary, for the launcher's
    plan `generation` that serves the members on a new cluster (a
    joiner's host was not in it); `ElasticRecovery` carries it out."""

    def __init__(self, generation: int) -> None:
        super().__init__(
            f"keras-hybrid elastic: re-address in generation {generation}"
        )
        self.generation = generation


class ElasticCommit(keras.callbacks.Callback):
    """Copies the training state to host memory every `interval` steps.

    Installed by `HybridStrategy` under `keras-hybrid-run --min-np/--max-np`;
    not meant to be created by users.

    Args:
        strategy: The elastic `HybridStrategy`.
        interval: Int. Global steps between two commits.
    """

    def __init__(self, strategy, interval: int) -> None:
        super().__init__()
        if int(interval) < 1:
            raise ValueError(
                "`interval` must be a positive number of global steps. "
                f"Received: interval={interval!r}."
            )
        self._strategy = strategy
        self._membership = strategy.communicator.membership
        self.interval = int(interval)
        # Each: {"global_step", "generation", "epoch", "batch", "fenced",
        # "values", "tables"}.
        self.commits: collections.deque = collections.deque(maxlen=_KEEP)
        self.commit_seconds: collections.deque = collections.deque(maxlen=500)
        self.step_gaps: collections.deque = collections.deque(maxlen=50)
        self.last_step_end: float | None = None
        self._epoch = 0
        self._generation = None  # the members' generation at step begin
        self.commit_bytes = 0  # buddy rows this member sent, all commits
        files = getattr(self._membership, "commit_files", None)
        self._store = (
            file_store.FileStore(files, self._membership.task)
            if files is not None
            else BuddySender(self._membership, strategy.communicator)
        )
        copies = self._membership.buddy_copies
        logging.info(
            "keras-hybrid elastic: task %d commits partitioned tables %s",
            self._membership.task,
            f"to {files!r}"
            if files is not None
            else f"with {copies} buddy "
            f"cop{'y' if copies == 1 else 'ies'} on the next members",
        )

    # -- Keras hooks

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if not self.commits:
            self.take(epoch, 0)

    def on_train_batch_begin(self, batch, logs=None):
        self._generation = self._membership.generation

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self.last_step_end is not None:
            self.step_gaps.append(now - self.last_step_end)
        readdress = self._membership.readdress
        if self._due() or readdress is not None:
            epoch, next_batch = self._epoch, batch + 1
            steps = (self.params or {}).get("steps")
            if steps is not None and next_batch >= steps:
                epoch, next_batch = epoch + 1, 0
            self.take(epoch, next_batch)
        self.last_step_end = time.perf_counter()
        if readdress is not None:
            self._membership.readdress = None
            raise PlannedReaddress(readdress)

    def on_train_end(self, logs=None):
        self.wait_for_writes()
        if not self.commit_seconds:
            return
        commit = float(np.median(self.commit_seconds))
        step = self.normal_step_seconds()
        share = commit / (self.interval * step) if step else 0.0
        logging.info(
            "keras-hybrid elastic: task %d committed %d times (last %d "
            "kept), median %.5f s each, every %d steps; median step %.4f s: "
            "commits cost %.2f%% of step time; %d bytes of buddy rows sent",
            self._membership.task,
            len(self.commit_seconds),
            len(self.commits),
            commit,
            self.interval,
            step,
            100.0 * share,
            self.commit_bytes,
        )

    def _due(self) -> bool:
        """Whether to commit after this step: at every `interval`-th global
        step and after the first step of new members; never in the step
        whose end switched the members (joiners are not training yet, and
        a commit with tables is a collective of the new group), and never
        inside a cycle of gradient accumulation (a commit due then is
        skipped)."""
        generation = self._membership.generation
        if generation != self._generation:
            return False
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and not accumulation.between_cycles(optimizer):
            return False  # accumulators hold each member's own part
        # Decided by the global step alone, never by this member's own
        # commits: after a recovery the survivors' lists may differ.
        last = self.commits[-1]["generation"] if self.commits else None
        return (
            self._membership.global_step % self.interval == 0
            or last != generation
        )

    # -- commits

    def take(self, epoch: int, batch: int) -> dict:
        """Copies the state now; training resumes from it at `(epoch,
        batch)`."""
        start = time.perf_counter()
        fence = active_fence()
        membership = self._membership
        tables = self._take_tables(membership)
        if tables is not None:
            self.commit_bytes += tables["bytes"]
        commit = {
            "global_step": membership.global_step,
            "generation": membership.generation,
            "epoch": int(epoch),
            "batch": int(batch),
            "fenced": fence.count if fence is not None else 0,
            # A partitioned table's `numpy()` gathers it from every worker:
            # its rows are in `tables` (own rows and a buddy copy).
            "values": [
                None if is_partitioned(v) else v.numpy()
                for v in state_variables(self.model)
            ],
            "tables": tables,
        }
        self.commits.append(commit)
        self.commit_seconds.append(time.perf_counter() - start)
        return commit

    def _take_tables(self, membership) -> dict | None:
        """The commit of partitioned tables and dynamic tables' keys, by
        the job's store."""
        tables = [
            *resharding.tables_of(self._strategy),
            *dynamic_shard.shards_of(self._strategy.communicator),
        ]
        members = list(membership.members)
        kept = [
            c["tables"]["folder"]
            for c in self.commits
            if c["tables"] and "folder" in c["tables"]
        ]
        return self._store.take(
            tables,
            members,
            membership.global_step,
            membership.generation,
            kept[len(kept) - (_KEEP - 1) :],
        )

    @property
    def files(self):
        """Where this member reads the rows of lost members: the file
        store's files, or the buddy copies it received."""
        if isinstance(self._store, BuddySender):
            return self._store.receiver
        return self._store.files

    def wait_for_writes(self) -> None:
        """Waits for the store's last write or send (if any)."""
        self._store.wait()

    def latest_step(self, survivors=None) -> int:
        """Int. Global step of the last commit, or -1 if there is none.

        With `survivors`: of the last commit whose tables this member can
        restore over them (`buddy_store.restorable`: a lost member may have
        died while writing its file of the last commit, or sending its
        buddy copy)."""
        task = self._membership.task
        steps = [
            c["global_step"]
            for c in self.commits
            if survivors is None
            or buddy_store.restorable(c["tables"], survivors, task)
        ]
        return max(steps) if steps else -1

    def find(self, global_step: int) -> dict | None:
        """The commit taken at `global_step`, or None."""
        for commit in self.commits:
            if commit["global_step"] == global_step:
                return commit
        return None

    def restore_position(self, commit: dict) -> None:
        """Makes `commit`'s position the membership's and the call fence's
        (`ElasticRecovery` restores the values)."""
        self._membership.global_step = commit["global_step"]
        fence = active_fence()
        if fence is not None:
            fence.count = commit["fenced"]
        # The step after the restore is a replay, not a normal step.
        self.last_step_end = None
        logging.info(
            "keras-hybrid elastic: task %d resumes from the commit of global "
            "step %d (epoch %d, batch %d)",
            self._membership.task,
            commit["global_step"],
            commit["epoch"],
            commit["batch"],
        )

    def normal_step_seconds(self) -> float:
        """Float. Median time between two step ends so far."""
        return float(np.median(self.step_gaps)) if self.step_gaps else 0.0


def state_variables(model) -> list:
    """Weights and optimizer variables of `model`, each once, in creation
    order (the state a worker needs to resume)."""
    seen, variables = set(), []
    optimizer = getattr(model, "optimizer", None)
    extra = list(optimizer.variables) if optimizer is not None else []
    for v in [*model.trainable_variables, *model.non_trainable_variables]:
        if id(v) not in seen:
            seen.add(id(v))
            variables.append(v)
    for v in extra:
        if id(v) not in seen:
            seen.add(id(v))
            variables.append(v)
    return variables


def is_partitioned(variable) -> bool:
    """Whether `variable` (a Keras variable or its storage) is a
    partitioned table's shard or one of its slots."""
    storage = getattr(variable, "value", variable)
    return isinstance(storage, ShardedTable) or isinstance(
        variable, ShardedTable
    )


def is_local(variable) -> bool:
    """Whether `variable` (a Keras variable or its storage) is this
    worker's own: a dynamic table's shard, its state or one of its slots
    (`strategy.local_variables`)."""
    return local_variables.is_local(getattr(variable, "value", variable))


def state_bytes(model) -> int:
    """Int. Bytes of `state_variables(model)`."""
    return variables_bytes(state_variables(model))


def variables_bytes(variables) -> int:
    """Int. Bytes of `variables` (anything with `shape` and `dtype`)."""
    return sum(
        int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables
    )


def broadcast_values(comm, values: list, root: int = 0) -> list:
    """Rank `root`'s `values` (tensors or arrays) on every rank, as
    tensors, in one fused broadcast per dtype. Other ranks pass values of
    the same shapes and dtypes (their contents are not sent)."""
    values = [tf.convert_to_tensor(v) for v in values]
    by_dtype: dict = {}
    for i, value in enumerate(values):
        by_dtype.setdefault(value.dtype.name, []).append(i)
    received = list(values)
    for name in sorted(by_dtype):
        group = by_dtype[name]
        flat = tf.concat([tf.reshape(values[i], [-1]) for i in group], 0)
        flat = comm.broadcast(flat, root=root, path="control")
        sizes = [int(np.prod(values[i].shape)) for i in group]
        for i, part in zip(group, tf.split(flat, sizes), strict=True):
            received[i] = tf.reshape(part, values[i].shape)
    return received
