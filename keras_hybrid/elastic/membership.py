"""`ElasticMembership`: which tasks train now, as the collectives see it.

Under `keras-hybrid-run --min-np/--max-np` the cluster lists `--max-np`
tasks from the start and only the active members run collectives: their
group size and group key are `tf.Variable`s read by every collective, so a
traced step runs unchanged over a new membership. Each membership is a
generation `g` with group key `GROUP_KEY_BASE + g`; TF's collective leader
(task 0, or the survivor a recovery named) never leaves in a planned
shrink. A worker's rank is its task's index in the sorted member list,
which is also the order of its slice of each global batch; rank 0 (the
lowest member) is the chief.

The launcher and the workers exchange plans (`contract.elastic_board`) on a
board: files, or the launcher's TCP server (`contract.plan_channel`).
No private hook is touched here.
"""

import contextlib
import json
import os
import re
import time

import tensorflow as tf

from keras_hybrid.contract.commit_server import commit_files_from_env
from keras_hybrid.contract.elastic_board import BUDDY_COPIES_ENV
from keras_hybrid.contract.elastic_board import COMMIT_INTERVAL_ENV
from keras_hybrid.contract.elastic_board import DEFAULT_COMMIT_INTERVAL
from keras_hybrid.contract.elastic_board import DIR_ENV
from keras_hybrid.contract.elastic_board import GROUP_KEY_BASE
from keras_hybrid.contract.elastic_board import MAX_NP_ENV
from keras_hybrid.contract.elastic_board import MEMBERS_ENV
from keras_hybrid.contract.elastic_board import MIN_NP_ENV
from keras_hybrid.contract.elastic_board import PAIR_GROUP_KEY_BASE
from keras_hybrid.contract.elastic_board import STATE_GROUP_KEY_BASE
from keras_hybrid.contract.plan_channel import FileChannel
from keras_hybrid.contract.plan_channel import channel_from_env


class ElasticMembership:
    """The current members of an elastic job and their collective group.

    Args:
        task: Int. This process's task index in the `--max-np` cluster.
        directory: String. The launcher's elastic directory.
        members: Optional list of ints. Initial members (sorted task
            indices); `None` for a joiner, which waits for a plan naming it.
        min_np: Int. Fewest workers the job runs with.
        max_np: Int. Most workers (tasks in the cluster).
        commit_interval: Int. Global steps between two in-memory commits
            (`ElasticCommit`). Defaults to `DEFAULT_COMMIT_INTERVAL`.
        commit_files: Optional. Where commits of partitioned tables go
            (`file_store`): a shared directory
            (`contract.commit_files.CommitFiles`) or the launcher's server
            (`contract.commit_server.CommitClient`); None: buddy copies
            (`buddy_store`).
        buddy_copies: Int. How many next members keep a buddy copy of
            each member's rows (without `commit_files`). Defaults to `1`.
    """

    def __init__(
        self,
        task: int,
        directory: str,
        members: list[int] | None,
        min_np: int,
        max_np: int,
        commit_interval: int = DEFAULT_COMMIT_INTERVAL,
        commit_files=None,
        buddy_copies: int = 1,
    ) -> None:
        self.task = task
        self.buddy_copies = buddy_copies
        self.commit_interval = commit_interval
        self.commit_files = commit_files
        self.directory = directory
        # Where the launcher's plans are: files in `directory`, or its
        # TCP server (`from_env`).
        self.channel = FileChannel(directory)
        self.min_np = min_np
        self.max_np = max_np
        self.generation = 0
        self.global_step = 0  # train steps of the job so far
        # A re-address plan's generation, agreed at this step's end.
        self.readdress: int | None = None
        self.members: list[int] = [] if members is None else sorted(members)
        # Every task's collective address (`host:port`) in the current
        # cluster, by task; None: all on this host.
        self.addresses: list[str] | None = None
        # This process's `contract.buddy_receiver.BuddyReceiver` (the
        # buddy store; started by its first `BuddySender`).
        self.buddy_receiver = None
        self.rebuild_variables()
        if members is not None:
            self._set(0, self.members)

    def rebuild_variables(self) -> None:
        """Makes the group key, size and rank variables anew, with their
        current values (after an eager context reset, see
        `ElasticRecovery`)."""
        with tf.init_scope():
            self._group_key = tf.Variable(
                GROUP_KEY_BASE + self.generation,
                dtype=tf.int32,
                trainable=False,
            )
            self._group_size = tf.Variable(
                max(1, len(self.members)), dtype=tf.int32, trainable=False
            )
            self._rank = tf.Variable(self.rank, dtype=tf.int64, trainable=False)

    @classmethod
    def from_env(cls, task: int) -> "ElasticMembership | None":
        """The membership the launcher described, or None (not elastic)."""
        directory = os.environ.get(DIR_ENV)
        if not directory:
            return None
        members = os.environ.get(MEMBERS_ENV)
        membership = cls(
            task,
            directory,
            None if not members else [int(t) for t in members.split(",")],
            int(os.environ[MIN_NP_ENV]),
            int(os.environ[MAX_NP_ENV]),
            int(os.environ.get(COMMIT_INTERVAL_ENV, DEFAULT_COMMIT_INTERVAL)),
            commit_files_from_env(),
            int(os.environ.get(BUDDY_COPIES_ENV, "1")),
        )
        membership.channel = channel_from_env(directory)
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        workers = config.get("cluster", {}).get("worker")
        membership.addresses = list(workers) if workers else None
        return membership

    # -- where this process sits

    @property
    def joining(self) -> bool:
        """Boolean. Whether this process still waits to be admitted."""
        return self.task not in self.members

    @property
    def rank(self) -> int:
        return self.members.index(self.task) if not self.joining else 0

    @property
    def size(self) -> int:
        # A joiner counts as one process until admitted: it runs nothing
        # collective before that.
        return len(self.members) if not self.joining else 1

    def host_of(self, task: int) -> str:
        """The host name or address that reaches `task`, as the current
        cluster names it."""
        if not self.addresses:
            return "localhost"
        return self.addresses[task].rpartition(":")[0]

    def group_tensors(self) -> tuple:
        """`(group_size, group_key)` tensors for a collective."""
        return self._group_size.read_value(), self._group_key.read_value()

    def rank_and_size(self) -> tuple:
        """`(rank, size)` as int64 tensors, for slicing a global batch."""
        return self._rank.read_value(), tf.cast(
            self._group_size.read_value(), tf.int64
        )

    def pair_group_key(self, rank: int, peer: int) -> int:
        """Group key of the 2-member group of the members at `rank` and
        `peer` in this generation: unique per generation and pair of
        tasks, so a key never names two different groups.

        Raises:
            ValueError: If a rank is not a member's, or the generation
                has outgrown the key range.
        """
        if not 0 <= min(rank, peer) <= max(rank, peer) < len(self.members):
            raise ValueError(
                f"Ranks {rank} and {peer} must both be ranks of the "
                f"{len(self.members)} members {self.members}."
            )
        low, high = sorted((self.members[rank], self.members[peer]))
        n = self.max_np
        key = PAIR_GROUP_KEY_BASE + (self.generation * n + low) * n + high
        if key >= 1 << 31:
            raise ValueError(
                f"Generation {self.generation} with --max-np {n} has no "
                "pair group key left below 2**31. Restart the job to "
                "start again at generation 0."
            )
        return key

    @contextlib.contextmanager
    def state_group(self, tasks: list[int], communicator):
        """Within this context, collectives run over `tasks` only (the
        member that sends the state, first, then the joiners of this
        generation, which receive it), and `communicator` shows their rank
        (index in `tasks`: the sender is rank 0) and size."""
        tasks = list(tasks)
        saved = (communicator.rank, communicator.size)
        self._group_key.assign(STATE_GROUP_KEY_BASE + self.generation)
        self._group_size.assign(len(tasks))
        communicator.rank = tasks.index(self.task)
        communicator.size = len(tasks)
        try:
            yield
        finally:
            self._group_key.assign(GROUP_KEY_BASE + self.generation)
            self._group_size.assign(len(self.members))
            communicator.rank, communicator.size = saved

    def switch(self, generation: int, members: list[int]) -> None:
        """Makes `members` the group of every later collective."""
        self._set(generation, sorted(members))

    def _set(self, generation: int, members: list[int]) -> None:
        self.generation = generation
        self.members = members
        self._group_key.assign(GROUP_KEY_BASE + generation)
        self._group_size.assign(len(members))
        if self.task in members:
            self._rank.assign(members.index(self.task))

    # -- the launcher's files

    def read_plan(self, generation: int) -> dict | None:
        """The launcher's plan for `generation`, or None if not written."""
        text = self.channel.get(f"plan-{generation}.json")
        return None if text is None else json.loads(text)

    def announce_ready(self) -> None:
        """Tells the launcher that this joiner reached `fit`."""
        self.channel.put(f"ready-{self.task}", "")

    def wait_for_admission(self, poll_seconds: float = 0.05) -> dict:
        """Blocks until a plan admits this process; returns it.

        The plans of an earlier process of this task (a joiner or member
        that was lost or left, and that this process replaces) are not
        this one's admission: only a plan naming this task among its
        joiners after the last record of that end counts (see
        `admission`).
        """
        while True:
            plan = admission(self.channel, self.task)
            if plan is not None:
                return plan
            time.sleep(poll_seconds)

    def report_applied(self, event: dict) -> None:
        """Tells the launcher (rank 0) that a generation took effect."""
        name = f"applied-{event['generation']}.json"
        self.channel.put(name, json.dumps(event))


_RECORD = re.compile(r"(plan|recover)-(\d+)\.json$")


def admission(channel, task: int) -> dict | None:
    """The plan that admits the current process of `task`, or None yet.

    Reads the launcher's plans and recovery plans in generation order: a
    plan naming `task` among its joiners admits it; a later recovery that
    lost it, or a plan without it, ends that admission (it was an earlier
    process of the task). Pure but for reading the plan `channel`
    (`contract.plan_channel`: files or the launcher over TCP).
    """
    records = []
    for name in channel.names():
        match = _RECORD.match(name)
        if match:
            records.append((int(match.group(2)), match.group(1), name))
    admitted = None
    for _, kind, name in sorted(records):
        text = channel.get(name)
        if text is None:
            continue
        record = json.loads(text)
        if kind == "recover":
            if task in record["lost"]:
                admitted = None
        elif task in record.get("joiners", ()):
            admitted = record
        elif task not in record["members"]:
            admitted = None
    return admitted
