"""`ElasticRecovery`: the survivors of a lost worker go on from a commit.

The same path serves a planned re-address (`PlannedReaddress`): a joiner
on a host that the members' cluster lacks needs them to serve on a new
cluster; they commit at a step boundary and go through steps 1 to 4
below with nobody lost, so no step is replayed.

When members die (any of them, task 0 too), the launcher writes
`recover-<g>.json`: the survivors, new addresses for every task and the
survivor that leads the new cluster's collectives (TensorFlow's leader
resolves every group; a context cannot change it, so a lost leader is
replaced in the new context). A thread of each survivor watches the
elastic directory and, on that plan, aborts this process's collectives,
so that the step (or the per-step broadcast) waiting for the dead peer
fails at once. `fit` (see `patches.elastic_training`) catches the error
and calls `recover`, which:

1. replaces the eager context by one serving collectives on the new ports
   with the plan's leader (`_compat.tf.reset_collectives`; TF 2.21 fails
   every later collective of a context that saw a peer die); the
   watcher's aborts and this reset take turns under one lock, and a plan
   that came meanwhile aborts the new context too, so that a worker lost
   during a recovery stops it at once for the newer plan;
2. makes the survivors the group of every collective (generation g); the
   lowest survivor is rank 0 (it reads the launcher's plans, writes the
   chief's files and sends the state to joiners);
3. agrees with the other survivors on the last commit they all hold
   (`ElasticCommit`), or receives it from the lowest rank that holds it
   if this worker lacks it
   (a joiner admitted after it; of partitioned tables, only their layout
   at the commit: see `commit_layout`), and gives every Keras variable new
   storage holding it (on TF 2.21 `assign` to a variable made before the
   reset does nothing); partitioned tables and their slots take their
   rows from the commit's own rows and buddy copies (`buddy_store`) and
   are re-balanced over the survivors; so do the keys of dynamic tables
   (`dynamic_shard`), whose hash tables are made anew;
4. drops every traced function; `fit` then runs again from the commit's
   epoch, and draws without training the batches of that epoch before
   the commit's batch (`elastic.replay`), so the lost steps are replayed
   on the same global batches.

No private hook is touched here.
"""

import json
import re
import threading
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.contract import elastic_board
from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.elastic import buddy_store
from keras_hybrid.elastic import commit_layout
from keras_hybrid.elastic import dynamic_shard
from keras_hybrid.elastic.commit import PlannedReaddress
from keras_hybrid.elastic.commit import broadcast_values
from keras_hybrid.elastic.commit import is_local
from keras_hybrid.elastic.commit import is_partitioned
from keras_hybrid.elastic.commit import state_variables
from keras_hybrid.elastic.commit import variables_bytes
from keras_hybrid.elastic.plan_wait import plan_wait_seconds
from keras_hybrid.strategy import cluster
from keras_hybrid.strategy import local_variables
from keras_hybrid.strategy.global_read_variable import GlobalReadVariable

_PLAN = re.compile(r"recover-(\d+)\.json$")
_JOB = "worker"
# How long a failed step waits for the launcher's recovery plan before the
# error is taken for what it is (the launcher sees a death within 0.05 s).
# A probe of the peer watchdog lasts at most its interval (<= 10 s).
_WATCHDOG_JOIN_SECONDS = 12.0


class ElasticRecovery:
    """Watches for the launcher's recovery plans and carries them out.

    Created by the elastic `fit` wrapper; not meant to be created by users.

    Args:
        strategy: The elastic `HybridStrategy`.
        model: The `keras.Model` being trained.
        commit: The `ElasticCommit` of this `fit`.
        poll_seconds: Float. How often the thread looks for a plan.
    """

    def __init__(self, strategy, model, commit, poll_seconds=0.05) -> None:
        self._strategy = strategy
        self._membership = strategy.communicator.membership
        self._model = model
        self._commit = commit
        self._poll_seconds = poll_seconds
        self._lock = threading.Lock()
        # Held around every abort (this thread) and the context reset
        # (`recover`): an abort must not land between them, nor on the old
        # context once `recover` has built the new one.
        self._context_lock = threading.Lock()
        self._handled = self._latest_plan_generation()
        self._pending: dict | None = None
        self._seen = self._handled  # newest plan the thread acted on
        self._attempted = self._handled  # newest plan `recover` tried
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch,
            name="keras_hybrid_elastic_recovery",
            daemon=True,
        )
        self.event: dict | None = None  # the last recovery, stall pending

    def start(self) -> "ElasticRecovery":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    # -- the watcher thread

    def _latest_plan_generation(self) -> int:
        generations = [0]
        for name in self._membership.channel.names():
            match = _PLAN.match(name)
            if match:
                generations.append(int(match.group(1)))
        return max(generations)

    def _read_plan(self, generation: int) -> dict:
        name = elastic_board.recovery_name(generation)
        return json.loads(self._membership.channel.get(name))

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            generation = self._latest_plan_generation()
            with self._lock:
                seen = max(self._handled, self._seen)
            if generation <= seen:
                continue
            plan = self._read_plan(generation)
            logging.warning(
                "keras-hybrid elastic: task %d: task(s) %s lost; aborting "
                "this worker's collectives to recover (generation %d)",
                self._membership.task,
                plan["lost"],
                generation,
            )
            with self._context_lock:
                tf_compat.abort_collectives(_abort_message(plan))
                with self._lock:
                    self._seen = generation
                    self._pending = plan

    # -- recovery (the fit wrapper's thread)

    def recover(self, error: BaseException) -> dict:
        """Carries out the launcher's recovery plan after `error` stopped
        `fit`; returns the commit to resume from.

        Raises:
            The `error` itself if no recovery plan comes (the error was not
            caused by a lost worker).
        """
        if isinstance(error, PlannedReaddress):
            # Every member committed at the same step boundary: nothing
            # is aborted, lost or replayed.
            plan = self._membership.read_plan(error.generation)
        else:
            plan = self._wait_for_plan(error)
        if plan is None:
            raise error
        self._attempted = plan["generation"]
        start = time.perf_counter()
        last_good_step_end = self._commit.last_step_end
        membership = self._membership
        comm = self._strategy.communicator
        old_size = len(membership.members)
        logging.warning(
            "keras-hybrid elastic: task %d recovers after %s: %s",
            membership.task,
            type(error).__name__,
            str(error).splitlines()[0][:200] if str(error) else "",
        )
        spec = tf.train.ClusterSpec({_JOB: plan["cluster"]})
        # No other thread may touch the eager context between the reset and
        # enabling collectives (it would start a local one): stop the peer
        # watchdog first, and start a new one on the new context.
        watchdog = cluster.watchdog()
        if watchdog is not None:
            cluster.stop_watchdog()
            watchdog.join(_WATCHDOG_JOIN_SECONDS)
        with self._context_lock:
            tf_compat.reset_collectives(
                spec, _JOB, membership.task, "grpc", plan["leader"]
            )
            with self._lock:
                newer = self._pending
            if newer is not None and newer["generation"] > plan["generation"]:
                # A plan came while this one was being taken up: its abort
                # hit the old context. Fail the new one's collectives so
                # that this recovery stops at once and takes up the newer
                # plan, instead of waiting on a lost peer until the timeout.
                logging.warning(
                    "keras-hybrid elastic: task %d: generation %d was "
                    "planned while it took up generation %d; taking up the "
                    "newer plan",
                    membership.task,
                    newer["generation"],
                    plan["generation"],
                )
                tf_compat.abort_collectives(_abort_message(newer))
        membership.rebuild_variables()
        membership.addresses = list(plan["cluster"])
        membership.switch(plan["generation"], plan["members"])
        comm.rank, comm.size = membership.rank, membership.size
        if watchdog is not None:
            info = cluster.ClusterInfo(
                rank=membership.task,
                size=len(plan["cluster"]),
                cluster_spec=spec,
                leader=plan["leader"],
            )
            cluster.start_watchdog(info, watchdog.timeout_seconds).set_peers(
                [t for t in plan["members"] if t != membership.task]
            )
        commit, moved = self._agree(plan["members"])
        _check_tables(commit, plan["members"], error)
        if moved and self._commit.find(commit["global_step"]) is None:
            # Kept like the others' copy: without any commit, this joiner
            # alone would commit at `fit`'s restart (a collective with the
            # buddy store, which the others never join).
            self._commit.commits.append(commit)
        tables = self._rebuild(commit, plan["members"])
        self._commit.restore_position(commit)
        model = self._model
        model.train_function = None
        model.test_function = None
        model.predict_function = None
        with self._lock:
            self._handled = plan["generation"]
            if self._pending is not None and (
                self._pending["generation"] <= self._handled
            ):
                # A newer one stays: its abort already failed this context.
                self._pending = None
        self.event = {
            "generation": plan["generation"],
            "global_step": commit["global_step"],
            "epoch": commit["epoch"],
            "reason": plan.get("reason", "lost_worker"),
            "old_size": old_size,
            "new_size": len(plan["members"]),
            "joined": [],
            "left": list(plan["lost"]),
            "bytes_moved": moved + tables["moved"],
            "table_bytes": tables["moved"],
            "table_wire_bytes": tables["wire"],
            "switch_seconds": time.perf_counter() - start,
            # From the end of the last good step to the start of recovery.
            "detect_seconds": start - last_good_step_end
            if last_good_step_end is not None
            else 0.0,
            "last_good_step_end": last_good_step_end,
            "normal_step_seconds": self._commit.normal_step_seconds(),
        }
        if membership.rank == 0:
            membership.channel.put(
                elastic_board.recovered_name(plan["generation"]),
                json.dumps({"generation": plan["generation"]}),
            )
        logging.info(
            "keras-hybrid elastic: task %d recovered as rank %d of %d in "
            "%.3f s; replaying from global step %d (epoch %d, batch %d)",
            membership.task,
            membership.rank,
            membership.size,
            self.event["switch_seconds"],
            commit["global_step"],
            commit["epoch"],
            commit["batch"],
        )
        return commit

    def _wait_for_plan(self, error: BaseException) -> dict | None:
        deadline = time.monotonic() + plan_wait_seconds(error)
        while True:
            with self._lock:
                plan = self._pending
            if plan is not None and plan["generation"] > self._attempted:
                return plan
            if time.monotonic() >= deadline:
                return None
            time.sleep(self._poll_seconds)

    def _rebuild(self, commit: dict, survivors: list) -> dict:
        """Gives every Keras variable of the model a new `tf.Variable` in
        the new context, holding `commit`'s value (metrics keep theirs);
        partitioned tables and slots get theirs from `buddy_store` and
        are re-balanced over `survivors`. Returns the byte counts of that
        re-balance (`resharding.reshard_members`).

        On TF 2.21, `assign` to a variable made before the context reset
        does nothing (`assign_add` and scatters still work, see
        `tests/compat/test_hooks.py`), and Keras' optimizers, metrics and
        our own code assign.
        """
        model = self._model
        variables = state_variables(model)
        if len(variables) != len(commit["values"]):
            raise ValueError(
                f"The commit of global step {commit['global_step']} holds "
                f"{len(commit['values'])} variables; the model has "
                f"{len(variables)} now. A model must not create variables "
                "during elastic training."
            )
        pairs = list(zip(variables, commit["values"], strict=True))
        tables = [v for v, _ in pairs if is_partitioned(v)]
        pairs = [(v, value) for v, value in pairs if not is_partitioned(v)]
        seen = {id(v) for v in variables}
        for v in getattr(model, "metrics_variables", []):
            if id(v) not in seen:
                seen.add(id(v))
                storage = v.value
                # This worker's part (a whole read would be global).
                local = (
                    storage.stored_tensor()
                    if isinstance(storage, GlobalReadVariable)
                    else storage
                )
                pairs.append((v, np.asarray(local)))
        comm = self._strategy.communicator
        with tf.init_scope():
            for variable, value in pairs:
                if not isinstance(variable, keras.Variable):
                    raise TypeError(
                        "Elastic recovery restores Keras variables. "
                        f"Received: {variable!r} of type "
                        f"{type(variable).__name__} in the model's state."
                    )
                old = variable.value
                name = old.name.split(":")[0]
                if isinstance(old, GlobalReadVariable):
                    # Metric state: its reads stay global (the joiners'
                    # and the other survivors' steps reduce it too).
                    new = GlobalReadVariable(
                        communicator=comm,
                        reduce_op=old.reduce_op,
                        initial_value=value,
                        trainable=False,
                        name=name,
                    )
                else:
                    new = tf_compat.plain_variable(
                        value, name=name, trainable=old.trainable, like=old
                    )
                if local_variables.is_local(old):
                    # A dynamic table's shard or slot: still this worker's.
                    local_variables.add(new)
                tf_compat.keep_variable_key(new, old)
                keras_compat.set_variable_storage(variable, new)
        counts = {"sent": 0, "moved": 0, "wire": 0}
        task = self._membership.task
        if tables:
            counts = buddy_store.restore(
                self._strategy, tables, commit["tables"], survivors, task
            )
        if dynamic_table.tables_with(comm):
            keys = dynamic_shard.restore(
                comm, commit["tables"], survivors, task
            )
            counts = {
                "sent": counts["sent"] + keys["sent"],
                "moved": counts["moved"] + keys["moved"],
                "wire": counts["wire"] + keys["wire"],
            }
        return counts

    def _agree(self, survivors) -> tuple:
        """The last commit every survivor holds whose tables can be
        restored (received from the lowest rank holding it by survivors
        that lack it), and the bytes that rank sent."""
        comm = self._strategy.communicator
        latest = self._commit.latest_step(survivors)
        # Max of negatives: the smallest latest commit of the survivors;
        # a worker without commits (-1) takes the others'.
        agreed = comm.all_reduce(
            [tf.constant([-latest if latest >= 0 else -(2**62)], tf.int64)],
            op="max",
            path="control",
        )[0]
        step = -int(np.asarray(agreed)[0])
        commit = self._commit.find(step)
        lacking = comm.all_reduce(
            [tf.constant([0 if commit is not None else 1], tf.int64)],
            op="sum",
            path="control",
        )[0]
        lacking = int(np.asarray(lacking)[0])
        if not lacking:
            return commit, 0
        # Rank 0 may lack it: a joiner admitted after it, lower in task
        # order than every other survivor (the first task was lost).
        lowest = comm.all_reduce(
            [
                tf.constant(
                    [-comm.rank if commit is not None else -comm.size],
                    tf.int64,
                )
            ],
            op="max",
            path="control",
        )[0]
        root = -int(np.asarray(lowest)[0])
        commit = self._receive(commit, step, root)
        replicated = [
            v
            for v in state_variables(self._model)
            if not is_partitioned(v) and not is_local(v)
        ]
        return commit, variables_bytes(replicated) * lacking

    def _receive(self, commit: dict | None, step: int, root: int) -> dict:
        """Rank `root` broadcasts its commit of `step` (position and
        values, and the layout of partitioned tables: see
        `commit_layout`)."""
        comm = self._strategy.communicator
        variables = state_variables(self._model)
        if comm.rank == root:
            if commit is None:
                raise RuntimeError(
                    f"No survivor holds the commit of global step {step}; "
                    "the survivors cannot agree on a state to resume from."
                )
            header = [commit["epoch"], commit["batch"], commit["fenced"]]
            values = commit["values"]
        else:
            header = [0, 0, 0]
            values = [
                None
                if is_partitioned(v)
                else np.zeros(v.shape, tf.as_dtype(v.dtype).as_numpy_dtype)
                for v in variables
            ]
        header = comm.broadcast(tf.constant(header, tf.int64), root=root)
        # Partitioned tables have no value in a commit (None): their rows
        # are in its `tables`, restored from the store. A dynamic table's
        # variables are each worker's own: a survivor that lacks the
        # commit starts them from zeros, and takes its keys from the
        # store's (`dynamic_shard`).
        replicated = [
            i
            for i, v in enumerate(variables)
            if not is_partitioned(v) and not is_local(v)
        ]
        sent = broadcast_values(comm, [values[i] for i in replicated], root)
        received = list(values)
        for i, value in zip(replicated, sent, strict=True):
            received[i] = np.asarray(value)
        epoch, batch, fenced = (int(v) for v in np.asarray(header))
        tables = None
        if any(is_partitioned(v) for v in variables) or (
            dynamic_table.tables_with(comm)
        ):
            tables = commit_layout.broadcast_layout(
                comm,
                commit["tables"] if commit is not None else None,
                self._commit.files,
                root,
            )
        return {
            "global_step": step,
            "epoch": epoch,
            "batch": batch,
            "fenced": fenced,
            "values": values if comm.rank == root else received,
            "tables": tables,
            # Not a generation of this worker: the next commit follows the
            # first step of the survivors' group, as on the others.
            "generation": -1,
        }

    def finish(self, communicator) -> None:
        """Completes the last recovery's record once the first replayed
        step ended: logs it and adds it to `CommunicationStats`."""
        event, self.event = self.event, None
        if event is None:
            return
        now = time.perf_counter()
        last = event.pop("last_good_step_end")
        gap = now - last if last is not None else 0.0
        normal = event["normal_step_seconds"]
        event.update(
            gap_seconds=gap,
            stall_seconds=max(0.0, gap - normal),
            time=time.time(),
        )
        communicator.stats.record_resize(event)
        logging.info(
            "keras-hybrid elastic: resize at global step %d (%s %s): %d "
            "-> %d workers, %d bytes moved, stall %.3f s (from the "
            "last good step to the first replayed step %.3f s, normal step "
            "%.3f s, failure seen after %.3f s, recovery %.3f s, then fit "
            "restarted and traced its step again)",
            event["global_step"],
            event["reason"].replace("_", " "),
            event["left"],
            event["old_size"],
            event["new_size"],
            event["bytes_moved"],
            event["stall_seconds"],
            gap,
            normal,
            event["detect_seconds"],
            event["switch_seconds"],
        )


def _check_tables(commit: dict, survivors, error) -> None:
    """Raises on every survivor if `commit` holds tables (partitioned, or
    dynamic tables' keys) that cannot be restored over `survivors`.

    A survivor admitted after `commit` (a loss within a step of a grow)
    holds its layout only (`commit_layout`): it needs no rows of it.
    """
    try:
        buddy_store.check_survivable(commit["tables"], survivors)
    except NotImplementedError as unrecoverable:
        raise unrecoverable from error


def _abort_message(plan: dict) -> str:
    return (
        f"keras-hybrid elastic: task(s) {plan['lost']} lost; "
        f"recovering in generation {plan['generation']}"
    )
