"""`ElasticResize`: switches an elastic job's members at a step boundary.

The strategy adds this callback to every `fit` of an elastic job. After
each train step, rank 0 looks for the launcher's next plan and broadcasts
it to the current members (one small eager broadcast), so every member
decides the same switch at the same step:

- rank 0 reads a plan only between two cycles of gradient accumulation
  (`optimizers.accumulation`): the accumulators hold each member's own
  part of the gradients until the cycle's last step sums them;
- a member that the plan drops leaves `fit` with `SystemExit(0)`;
- the others make the plan's members the group of every later collective
  (`ElasticMembership.switch`); the traced step runs on unchanged, since
  group size, group key, the loss scale and each worker's slice of the
  global batch are read from variables;
- if the plan adds joiners, rank 0 broadcasts the training position
  (epoch, step, global step) and every replicated weight and optimizer
  slot to the joiners, in a group of its own (the other members go on,
  and wait for the joiners in the next collective);
- partitioned tables and their optimizer slots move by virtual shard
  (`resharding.reshard_members`), over the new group for a grow (joiners
  receive their rows there, not from rank 0) and over the old group for a
  shrink (leavers hand their rows over before they exit). The traced step
  reads each table's assignment from variables and its row count at run
  time, and the all-to-all's number of blocks from the group size, so it
  runs on unchanged too (`_retrace` says when it does not).

A joiner first traces its train step (ahead, in its first step, while the
members train), then waits for a plan that names it, receives the state
and its table rows, and then runs the batches it skipped through a
function that only draws them from the iterator, so that its data
continue in global-step order from the same global batch as the others.
"""

import collections
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.comm.call_fence import active as active_fence
from keras_hybrid.contract import elastic_board
from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.dynamic import key_moves
from keras_hybrid.elastic import commit
from keras_hybrid.optimizers import accumulation
from keras_hybrid.sparse import resharding
from keras_hybrid.strategy import cluster
from keras_hybrid.strategy import global_read_variable

_HEADER = 4  # epoch, next batch, global step, fenced calls so far
_ADMISSION = "admission"  # a joiner's first step: trace, then wait
_NO_TABLES = {"sent": 0, "moved": 0, "wire": 0, "count": 0, "seconds": 0.0}


class ElasticResize(keras.callbacks.Callback):
    """Applies the launcher's membership plans at train-step boundaries.

    Installed by `HybridStrategy` under `keras-hybrid-run --min-np/--max-np`;
    not meant to be created by users.

    Args:
        strategy: The elastic `HybridStrategy`.
    """

    def __init__(self, strategy) -> None:
        super().__init__()
        self._strategy = strategy
        self._membership = strategy.communicator.membership
        self._comm = strategy.communicator
        self._epoch = 0
        self._next_batch = 0
        self._skip_until = None
        self._skip_count = 1  # batches one skipped call draws
        self._real_train_function = None
        self._last_logs = {}
        self._last_end = None
        self._gaps = collections.deque(maxlen=50)
        self._pending = None  # a resize whose stall is not measured yet
        # Trace and run time of the first step traced again after a resize.
        self._first_step = {}
        self._local_reads = None

    def trains(self) -> bool:
        """Boolean. False while this joiner skips batches it missed."""
        return self._skip_until is None

    # -- Keras hooks

    def on_train_begin(self, logs=None):
        if self._membership.joining:
            # The first step gets the iterator, which tracing needs.
            self._real_train_function = self.model.train_function
            self._skip_until = _ADMISSION
            self.model.train_function = self._join
            # Members validated the epochs this joiner skips long ago.
            keras_compat.set_validation_gate(self.model, self.trains)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self._skip_until is not None:
            self._skip_count = self._batches_in_call(batch)
            self._route(batch)

    def on_train_batch_end(self, batch, logs=None):
        if self._skip_until is not None:
            # A join point at the end of an epoch: the members read its
            # metrics and validate next, with this joiner among them.
            if self._skip_until is not _ADMISSION and (
                (self._epoch, batch + 1) >= self._skip_until
            ):
                self._open()
            return
        self._last_logs = logs or {}
        now = time.perf_counter()
        if self._last_end is not None:
            gap = now - self._last_end
            if self._pending is not None:
                self._finish_resize(gap)
            else:
                self._gaps.append(gap)
        self._last_end = now
        self._next_batch = batch + 1
        self._membership.global_step += 1
        self._maybe_resize()
        # The gap to the next step includes the switch: that is the stall.
        self._last_end = now

    # -- members

    def _maybe_resize(self) -> None:
        membership = self._membership
        proposal = np.zeros([3 + membership.max_np], np.int64)
        if membership.rank == 0 and self._between_cycles():
            plan = membership.read_plan(membership.generation + 1)
            if plan is not None:
                proposal[0] = plan["generation"]
                proposal[1] = elastic_board.REASONS.index(plan["reason"])
                proposal[2] = len(plan["members"])
                proposal[3 : 3 + len(plan["members"])] = plan["members"]
        agreed = self._strategy.communicator.broadcast(
            tf.constant(proposal), root=0, path="control"
        )
        agreed = np.asarray(agreed)
        if agreed[0] == 0:
            return
        members = [int(t) for t in agreed[3 : 3 + agreed[2]]]
        reason = elastic_board.REASONS[agreed[1]]
        if reason == "readdress":
            # `ElasticCommit` commits after this step, then stops `fit`.
            self._membership.readdress = int(agreed[0])
            return
        self._switch(int(agreed[0]), members, reason)

    def _between_cycles(self) -> bool:
        """Whether the members may change after this step: no gradients
        wait in the optimizer's accumulators, which hold each member's
        own part (`optimizers.accumulation`). A plan waits for the end of
        the cycle."""
        optimizer = getattr(self.model, "optimizer", None)
        return optimizer is None or accumulation.between_cycles(optimizer)

    def _switch(self, generation: int, members: list, reason: str) -> None:
        start = time.perf_counter()
        membership = self._membership
        old = list(membership.members)
        joiners = [t for t in members if t not in old]
        left = [t for t in old if t not in members]
        tables = _NO_TABLES
        if left:
            # The old group still holds every row: leavers hand theirs over.
            tables = self._move_tables(old, members)
        if membership.task not in members:
            self._retire(generation, reason, len(old), len(members))
        self._adopt(generation, members)
        if left and tables["count"]:
            resharding.rebind_members(
                resharding.tables_of(self._strategy), self._comm, old, members
            )
        moved = 0
        if joiners:
            # Only the joiners need the state: the old rank 0 sends it.
            moved = _state_bytes(self.model) * len(joiners)
            if membership.task == old[0]:
                with membership.state_group([old[0], *joiners], self._comm):
                    self._send_state()
            tables = self._move_tables(old, members)
        if self._retrace(len(old), len(members)):
            self.model.train_function = self._timed(self.model.train_function)
        self._pending = {
            "generation": generation,
            "global_step": self._membership.global_step,
            "epoch": self._epoch,
            "reason": reason,
            "old_size": len(old),
            "new_size": len(members),
            "joined": joiners,
            "left": left,
            "bytes_moved": moved + tables["moved"],
            "state_bytes": moved,
            "table_bytes": tables["moved"],
            "table_wire_bytes": tables["wire"],
            "table_seconds": tables["seconds"],
            "switch_seconds": time.perf_counter() - start,
        }
        # The lowest member that stays reports (the old rank 0, unless it
        # retired, or a joiner below it became rank 0).
        if membership.task == min(t for t in old if t in members):
            membership.report_applied(self._pending)

    def _retire(self, generation: int, reason: str, old: int, new: int) -> None:
        logging.info(
            "keras-hybrid elastic: task %d retires at global step %d "
            "(generation %d, %s: %d -> %d workers)",
            self._membership.task,
            self._membership.global_step,
            generation,
            reason,
            old,
            new,
        )
        raise SystemExit(0)

    def _move_tables(self, old: list, members: list) -> dict:
        """Moves the rows of partitioned tables and their slots, and the
        keys of dynamic tables, from `old` to `members` (a collective over
        the larger group)."""
        tables = resharding.tables_of(self._strategy)
        dynamic = dynamic_table.tables_with(self._comm)
        if not tables and not dynamic and len(members) < len(old):
            return _NO_TABLES  # every member has trained the same tables
        # A grow checks that the joiners have the same tables (or none).
        start = time.perf_counter()
        counts = resharding.reshard_members(tables, self._comm, old, members)
        if dynamic:
            group = old if len(old) > len(members) else members
            keys = key_moves.move_members(
                dynamic, self._comm, group, old, members
            )
            counts["moved"] += keys["moved"]
            counts["wire"] += keys["wire"]
        return {
            **counts,
            "count": len(tables),
            "seconds": time.perf_counter() - start,
        }

    def _finish_resize(self, gap: float) -> None:
        """Completes the pending resize's record with its stall."""
        normal = float(np.median(self._gaps)) if self._gaps else 0.0
        event = self._record(
            gap_seconds=gap,
            normal_step_seconds=normal,
            stall_seconds=max(0.0, gap - normal),
        )
        logging.info(
            "keras-hybrid elastic: resize at global step %d (%s): %d -> %d "
            "workers, %d bytes moved (%d of table rows; %d on the wire, "
            "padding included), stall %.3f s "
            "(step gap %.3f s, normal step %.3f s; switch %.3f s, train "
            "step traced again in %.3f s)",
            event["global_step"],
            event["reason"],
            event["old_size"],
            event["new_size"],
            event["bytes_moved"],
            event["table_bytes"],
            event["table_wire_bytes"],
            event["stall_seconds"],
            gap,
            normal,
            event["switch_seconds"],
            event.get("retrace_seconds", 0.0),
        )

    def _record(self, **timing) -> dict:
        """Records the pending resize with its `timing` in
        `CommunicationStats`; returns the record."""
        event = {
            **self._pending,
            **self._first_step,
            **timing,
            "time": time.time(),
        }
        self._pending = None
        self._first_step = {}
        self._strategy.communicator.stats.record_resize(event)
        return event

    def cut_short(self) -> None:
        """Records the pending resize without a stall: a lost worker ended
        `fit` before the resize's first step did
        (`patches.elastic_training`)."""
        if self._pending is None:
            return
        event = self._record(
            gap_seconds=None,
            normal_step_seconds=None,
            stall_seconds=None,
            cut_short=True,
        )
        logging.warning(
            "keras-hybrid elastic: resize at global step %d (%s): %d -> %d "
            "workers, %d bytes moved; a lost worker cut its first step "
            "short, so it has no stall",
            event["global_step"],
            event["reason"],
            event["old_size"],
            event["new_size"],
            event["bytes_moved"],
        )

    def _adopt(self, generation: int, members: list) -> None:
        """Makes `members` this process's group (variables, Python view,
        watchdog peers)."""
        membership = self._membership
        membership.switch(generation, members)
        comm = self._strategy.communicator
        comm.rank, comm.size = membership.rank, membership.size
        watchdog = cluster.watchdog()
        if watchdog is not None:
            watchdog.set_peers([t for t in members if t != membership.task])

    def _timed(self, train_function):
        """`train_function` whose first call records how long tracing it
        again and then running it took (`retrace_seconds`,
        `first_step_seconds`)."""
        self._first_step = {}

        def first_call(iterator):
            start = time.perf_counter()
            step = keras_compat.traced_step_of(train_function)
            if step is not None:
                step.get_concrete_function(iterator)
            traced = time.perf_counter()
            logs = train_function(iterator)
            self._first_step = {
                "retrace_seconds": traced - start,
                "first_step_seconds": time.perf_counter() - traced,
            }
            self.model.train_function = train_function
            return logs

        return first_call

    def _retrace(self, old_size: int, new_size: int) -> bool:
        """Drops the functions traced for the old size and layout; returns
        whether the train function is new."""
        model = self.model
        # Functions traced for the old size (evaluate, predict) must be
        # traced again. A train step need not: group size and key, rank,
        # loss scale, the all-to-all's blocks and the tables' partitions
        # and row counts are read when it runs. It must if it holds
        # collectives whose shapes follow the size (all-gathers of
        # IndexedSlices), or if one side is one worker, whose traced step
        # skips collectives altogether.
        model.test_function = None
        model.predict_function = None
        if (
            min(old_size, new_size) == 1
            or self._strategy.extended.traced_size_dependent_collectives
        ):
            model.make_train_function(force=True)
            return True
        return False

    def _send_state(self) -> None:
        """Broadcasts the position and every weight and slot from rank 0
        to the joiners."""
        comm = self._strategy.communicator
        fence = active_fence()
        header = tf.constant(
            [
                self._epoch,
                self._next_batch,
                self._membership.global_step,
                fence.count if fence is not None else 0,
            ],
            tf.int64,
        )
        comm.broadcast(header, root=0, path="control")
        _broadcast_variables(comm, _state_variables(self.model))

    # -- joiners

    def _admit(self) -> None:
        membership = self._membership
        membership.announce_ready()
        plan = membership.wait_for_admission()
        start = time.perf_counter()
        self._adopt(plan["generation"], plan["members"])
        comm = self._comm
        sender = min(t for t in plan["members"] if t not in plan["joiners"])
        with membership.state_group([sender, *plan["joiners"]], comm):
            header = comm.broadcast(
                tf.zeros([_HEADER], tf.int64), root=0, path="control"
            )
            epoch, batch, global_step, fenced = (int(v) for v in header)
            # The job's position from here on, as the members see it.
            membership.global_step = global_step
            _broadcast_variables(comm, _state_variables(self.model))
        old = [t for t in plan["members"] if t not in plan["joiners"]]
        self._move_tables(old, plan["members"])
        # Traced ahead for any size (`_pretrace`), so kept unless a member
        # would trace again too.
        if self._retrace(len(old), len(plan["members"])):
            self._real_train_function = self.model.train_function
        self.model.train_function = self._skip
        fence = active_fence()
        if fence is not None:
            fence.count = fenced
        self._skip_until = (epoch, batch)
        # Keras reads metric results at the end of each skipped epoch; the
        # members made those (collective) reads before this joiner came.
        self._local_reads = global_read_variable.local_reads()
        self._local_reads.__enter__()
        # At an epoch's end Keras reads the epoch's metrics only if the
        # last step's logs have their keys (`_get_metrics_result_or_logs`),
        # as the members' steps do: a join point there must give them too
        # (read locally here; Keras' read at the join point is global).
        self._last_logs = dict(self.model.get_metrics_result())
        logging.info(
            "keras-hybrid elastic: task %d joined as rank %d of %d at "
            "global step %d (epoch %d, batch %d) in %.3f s",
            membership.task,
            membership.rank,
            membership.size,
            global_step,
            epoch,
            batch,
            time.perf_counter() - start,
        )

    def _join(self, iterator):
        """A joiner's first step: traces the train step while the members
        train, waits to be admitted, and skips this batch."""
        self._pretrace(iterator)
        self._admit()
        return self._skip(iterator)

    def _pretrace(self, iterator) -> None:
        step = keras_compat.traced_step_of(self._real_train_function)
        if step is None:
            return
        start = time.perf_counter()
        comm = self._strategy.communicator
        saved = comm.rank, comm.size
        # Only Python-side shortcuts for one worker read the size while
        # tracing; the collectives read the group from variables.
        comm.rank, comm.size = 1, self._membership.max_np
        try:
            step.get_concrete_function(iterator)
        finally:
            comm.rank, comm.size = saved
        logging.info(
            "keras-hybrid elastic: task %d traced its train step in %.3f s "
            "before joining",
            self._membership.task,
            time.perf_counter() - start,
        )

    def _route(self, batch: int) -> None:
        """Skips the batches before the join point, then trains."""
        if self._skip_until is _ADMISSION:
            return
        if (self._epoch, batch) < self._skip_until:
            self.model.train_function = self._skip
            return
        self._open()

    def _open(self) -> None:
        """This joiner reached the join point: it trains from now on."""
        self.model.train_function = self._real_train_function
        self._skip_until = None
        self._local_reads.__exit__(None, None, None)
        self._local_reads = None
        keras_compat.set_validation_gate(self.model, None)

    def _batches_in_call(self, batch: int) -> int:
        """The batches the call of the train function that starts at
        `batch` runs: `steps_per_execution`, fewer at the end of an epoch
        of known length."""
        count = max(1, int(getattr(self.model, "steps_per_execution", 1)))
        steps = (self.params or {}).get("steps")
        if steps is not None:
            count = max(1, min(count, steps - batch))
        return count

    def _skip(self, iterator):
        for _ in range(self._skip_count):
            next(iterator)
        return self._last_logs


def _state_variables(model) -> list:
    """Replicated weights and optimizer variables, each once, in creation
    order. Partitioned tables and their slots move with `resharding`, the
    keys of dynamic tables with `key_moves`."""
    return [
        v
        for v in commit.state_variables(model)
        if not commit.is_partitioned(v) and not commit.is_local(v)
    ]


def _state_bytes(model) -> int:
    """Bytes of the weights and optimizer variables a joiner receives."""
    return commit.variables_bytes(_state_variables(model))


def _broadcast_variables(comm, variables) -> None:
    """Broadcasts `variables` from rank 0, one fused tensor per dtype;
    receivers assign."""
    received = commit.broadcast_values(comm, variables)
    if comm.rank == 0:
        return
    for v, value in zip(variables, received, strict=True):
        v.assign(value)
