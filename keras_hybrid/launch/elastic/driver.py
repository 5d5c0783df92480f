"""`ElasticDriver`: runs a job whose workers come and go with discovery.

The cluster in every worker's `TF_CONFIG` lists `max_np` tasks, each on
its host (`host_slots`; a task not running is never contacted). The
driver polls the discovery script; each host gets its slots' tasks
(`host_slots.plan_hosts`): joiners start on new slots (over ssh on other
hosts, `processes`), on the next free task ids, and once every
joiner reached `fit` (its `ready-<task>` file) the driver writes the next
membership plan. A host with fewer slots retires its highest tasks
(TF's collective leader, task 0 until it is lost, never leaves). The
workers switch at a train-step boundary (`keras_hybrid.elastic.resize`)
and a member writes `applied-<g>.json`; only then is the next change
planned. Retired workers exit 0. The job ends when the leader exits 0.

A joiner on a host that the members' cluster lacks comes after a
re-address: a `readdress` plan with a cluster that has it, which the
members carry out at a step boundary through the recovery path
(`keras_hybrid.elastic.recovery`, new ports, nobody lost).

When members die (any of them: the collective leader too, which the
recovery plan replaces by a survivor; all those seen dead at once in one
plan), the driver picks new ports for every task and writes
`recover-<g>.json` (the survivors, the new addresses and the leader); the
survivors abort their collectives, serve again on the new ports and
resume from their last commit (`lost_workers`). Once rank 0 of the
survivors wrote `recovered-<g>.json`, the driver writes `plan-<g>.json`
for later joiners. A joiner that dies before it was admitted costs the
members nothing: the change is dropped and tried again. If fewer than
`min_np` survive, the driver waits up to `wait_seconds` for discovery to
report `min_np` slots, then recovers the survivors and grows the job back
with joiners; else it stops the job.
"""

import dataclasses
import functools
import logging
import shutil
import signal
import tempfile
import time

from keras_hybrid.contract import elastic_board
from keras_hybrid.contract.plan_channel import FileChannel
from keras_hybrid.launch import exit_codes
from keras_hybrid.launch.elastic import host_slots
from keras_hybrid.launch.elastic.commit_store import remove_commit_dir
from keras_hybrid.launch.elastic.host_discovery import HostDiscovery
from keras_hybrid.launch.elastic.host_ports import HostPortsError
from keras_hybrid.launch.elastic.host_ports import task_ports
from keras_hybrid.launch.elastic.job_setup import setup_job
from keras_hybrid.launch.elastic.job_setup import widen_job
from keras_hybrid.launch.elastic.lost_workers import LostWorkers
from keras_hybrid.launch.elastic.processes import ElasticProcesses
from keras_hybrid.launch.elastic.task_env import ElasticSettings
from keras_hybrid.launch.elastic.task_env import task_envs
from keras_hybrid.launch.root_cause import root_cause_lines
from keras_hybrid.launch.ssh import ssh_hostname

logger = logging.getLogger(__name__)
_TICK = 0.05


@dataclasses.dataclass
class _Change:
    generation: int
    members: list
    joiners: list
    written: bool = False


class ElasticDriver(LostWorkers):
    """Starts, grows and shrinks the workers of one elastic job.

    Args:
        command: List of strings. Program and arguments of every worker.
        min_np: Int. Fewest workers to train with.
        max_np: Int. Most workers (tasks listed in the cluster).
        discovery: `HostDiscovery`.
        threads: Optional int. Threads per worker. Defaults to
            `max(1, cpu_count // max_np)`.
        env: Optional dict. Extra variables for every worker.
        poll_seconds: Float. Seconds between discovery runs.
            Defaults to `1.0`.
        wait_seconds: Float. How long to wait for discovery to report
            `min_np` slots before failing. Defaults to `60.0`.
        grace_seconds: Float. Seconds between SIGTERM and SIGKILL when
            stopping workers. Defaults to `10.0`.
        commit_interval: Int. Global steps between two in-memory commits
            of the workers' state. Defaults to
            `elastic_board.DEFAULT_COMMIT_INTERVAL`.
        commit_store: Optional string. `"directory"`: partitioned tables
            are committed to files in a directory the workers share;
            `"served"`: to files on this host, served over TCP;
            `"buddy"`: to a buddy copy on the next worker
            (`launch.elastic.commit_store`). Defaults to `"directory"` on
            one host or with `commit_dir`, else `"served"`.
        commit_dir: Optional string. The shared directory holding the
            job's commit folder (the directory store). Defaults to one
            under /dev/shm.
        elastic_dir: Optional string. A directory every host shares, for
            the job's plan files (the job is then multi-host). Defaults to
            a local temporary directory, or, when discovery names other
            hosts, the launcher's TCP server (`plan_channel`).
        address: Optional string. The address other hosts reach this
            host (its tasks, plan board and commit server) on. Defaults
            to this host's address on the route to the first other host
            discovery names (`ssh.reach_address`).
        start_np: Optional int. Workers to start with (`-np`); the job
            waits for discovery to report that many slots. Defaults to
            every slot discovery reports, up to `max_np`.
        output: Optional `worker_streams.OutputSettings`. Which ranks the
            console shows whole, and per-task log files. Defaults to every
            worker's whole output.
        buddy_copies: Int. With the buddy store, how many next workers
            keep a copy of each worker's rows (2 survives any two lost
            at once). Defaults to `1`.
        preload: What local workers fork from (`launch.preloader`): `"auto"`,
            module names, `()`, or `None` for `$KERAS_HYBRID_PRELOAD`.
    """

    def __init__(
        self,
        command: list[str],
        min_np: int,
        max_np: int,
        discovery: HostDiscovery,
        *,
        threads: int | None = None,
        env: dict | None = None,
        poll_seconds: float = 1.0,
        wait_seconds: float = 60.0,
        grace_seconds: float = 10.0,
        commit_interval: int = elastic_board.DEFAULT_COMMIT_INTERVAL,
        commit_store: str | None = None,
        commit_dir: str | None = None,
        elastic_dir: str | None = None,
        address: str | None = None,
        start_np: int | None = None,
        output=None,
        buddy_copies: int = 1,
        preload=None,
    ) -> None:
        check_bounds(min_np, max_np)
        if int(commit_interval) < 1:
            raise ValueError(
                "`commit_interval` must be a positive number of global "
                f"steps. Received: commit_interval={commit_interval!r}."
            )
        self.command = list(command)
        self.min_np, self.max_np = min_np, max_np
        self.start_np = start_np
        self.discovery = discovery
        self.poll_seconds = poll_seconds
        self.wait_seconds = wait_seconds
        self.grace_seconds = grace_seconds
        self.elastic_dir = elastic_dir
        self.address = address
        self.directory = tempfile.mkdtemp(
            prefix="keras_hybrid_elastic_", dir=elastic_dir
        )
        # Set by `_setup` from discovery's first answer (`_widen` later).
        self.multi_host = elastic_dir is not None
        self.channel = FileChannel(self.directory)
        self._job = None  # `job_setup.JobSetup`
        self.commit_dir: str | None = None
        self.commit_server = None  # the served store's `CommitServer`
        self._commit = (commit_store, commit_dir)
        self._settings = ElasticSettings(
            self.directory,
            min_np,
            max_np,
            int(commit_interval),
            {},
            threads,
            env,
            resolve=functools.lru_cache(maxsize=None)(ssh_hostname),
            discovery_wait_seconds=wait_seconds,
            buddy_copies=int(buddy_copies),
        )
        self._placed: dict[int, str] = {}  # members' (and joiners') hosts
        self._envs, self.cluster = [], []
        self.members: list[int] = []
        self.generation = 0
        self._workers = ElasticProcesses(
            command, grace_seconds, self.rank_of, output, preload
        )
        self._procs = self._workers.procs
        self._change: _Change | None = None
        self._signals: list[int] = []
        self._dismissed: set[int] = set()  # joiners stopped at the end
        self._lost: set[int] = set()  # members and joiners that died
        self._failed_joiners = 0  # joiners that died in a row, unadmitted
        self._short_since: float | None = None  # waiting for slots
        self._short_lost: list[int] = []
        self._recovering: int | None = None  # generation of a recovery
        self._after_readdress: list = []  # joiners to start after it
        self.recoveries: list[dict] = []

    def _setup(self, discovered: list) -> None:
        """Multi-host or not, the plan channel and the commit store
        (`job_setup`), from discovery's first answer."""
        store, commit_dir = self._commit
        self._use(
            setup_job(
                discovered,
                self.directory,
                self.elastic_dir,
                store,
                commit_dir,
                self.address,
            )
        )

    def _widen(self, remote: list) -> None:
        """Discovery named other hosts in a one-host job: it becomes
        multi-host (`job_setup.widen_job`); the joiners there start
        after the members' re-address (`_plan_change`)."""
        logger.info(
            "host discovery named other hosts %s in a job that ran on this "
            "host only: it becomes multi-host.",
            remote,
        )
        self._use(widen_job(self._job, remote, self.address))

    def rank_of(self, task: int) -> int | None:
        """A member's rank (its index among the sorted members), or None
        for a task that is not a member."""
        members = sorted(self.members)
        return members.index(task) if task in members else None

    def _use(self, setup) -> None:
        self._job = setup
        self.multi_host, self.channel = setup.multi_host, setup.channel
        self.commit_dir = setup.commit_dir
        self.commit_server = setup.commit_server
        self._settings = dataclasses.replace(
            self._settings,
            commit_env=setup.commit_env(local=True),
            remote_commit_env=setup.commit_env(local=False),
            local_address=setup.local_address,
            channel_env=self.channel.env(),
        )

    def _make_envs(self) -> tuple:
        """Every task's variables on new ports, each free on its task's
        host (`host_ports`: one ssh round trip per other host), and the
        cluster.

        Raises:
            HostPortsError: If another host could not be asked.
        """
        ports = task_ports(self._placed, self.max_np)
        return task_envs(self._placed, self._settings, ports)

    def run(self, timeout: float | None = None) -> int:
        """Runs the job; returns its exit code (0 when the collective
        leader finished and every other member exited 0)."""
        previous = {
            s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)
        }
        for sig in previous:
            signal.signal(sig, lambda signum, _: self._signals.append(signum))
        try:
            code = self._run(timeout)
            if code not in (0, 128 + signal.SIGINT, 128 + signal.SIGTERM):
                exceptions = self._workers.streams.exceptions()
                for line in root_cause_lines(exceptions):
                    logger.error("%s", line)
            return code
        except HostPortsError as error:
            # A host that cannot be asked would fail its workers' start
            # over the same ssh: the job stops as for a failed joiner.
            logger.error("%s; stopping the job.", error)
            code = error.returncode
            return self._stop_all(
                signal.SIGTERM, exit_codes.exit_code_for(code or 1)
            )
        finally:
            self._workers.preloader.close()
            close = getattr(self.channel, "close", None)
            if close is not None:
                close()
            if self.commit_server is not None:
                self.commit_server.close()
            remove_commit_dir(self.commit_dir)
            # The plan and recovery files are the job's own: no run reads
            # another's.
            shutil.rmtree(self.directory, ignore_errors=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self, timeout: float | None) -> int:
        deadline = time.monotonic() + timeout if timeout else None
        discovered = self._wait_for_slots(self.start_np or self.min_np)
        if discovered is None:
            return 1
        self._setup(discovered)
        first = host_slots.plan_hosts(
            {}, discovered, 0, self.start_np or self.max_np
        )
        self._placed = dict(first.start)
        self._envs, self.cluster = self._make_envs()
        self.members = sorted(self._placed)
        for task in self.members:
            self._start(task, self.members)
        next_poll = time.monotonic() + self.poll_seconds
        while True:
            if self._signals:
                return self._stop_all(self._signals[0], 128 + self._signals[0])
            code = self._check_processes()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                logger.error("timed out after %g s; stopping.", timeout)
                return self._stop_all(
                    signal.SIGTERM, exit_codes.TIMEOUT_EXIT_CODE
                )
            if self._short_since is not None:
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self.poll_seconds
                    code = self._wait_for_replacements()
                    if code is not None:
                        return code
                time.sleep(_TICK)
                continue
            self._advance_recovery()
            self._advance_change()
            if (
                self._change is None
                and self._recovering is None
                and time.monotonic() >= next_poll
            ):
                next_poll = time.monotonic() + self.poll_seconds
                self._plan_change(self._discover())
            time.sleep(_TICK)

    # -- processes

    def _start(self, task: int, members: list | None) -> None:
        env = dict(self._envs[task])
        if members is not None:
            env[elastic_board.MEMBERS_ENV] = ",".join(str(t) for t in members)
        proc = self._workers.start(task, self._placed[task], env)
        # A joiner may reuse the index of a task lost or dismissed before.
        self._lost.discard(task)
        self._dismissed.discard(task)
        logger.info(
            "started %s (%s)",
            proc.where(),
            f"rank {self.rank_of(task)}" if members else "joiner",
        )

    def _check_processes(self) -> int | None:
        """Returns the job's exit code once it is over, else None."""
        dead = [
            (task, code)
            for task, proc in sorted(self._procs.items())
            if (code := proc.poll()) not in (None, 0)
            and task not in self._dismissed
            and task not in self._lost
        ]
        change = self._change
        admitted = set(change.joiners) if change and change.written else set()
        lost = [t for t, _ in dead if t in self.members or t in admitted]
        if lost:
            self._lose(lost, dict(dead))
        for task, code in dead:
            if task not in lost:
                code = self._lose_joiner(task, code)
                if code is not None:
                    return code
        leader = self._procs.get(self._settings.leader)
        if leader is None or leader.poll() != 0:
            return None
        # The leader finished training (it never retires): joiners not
        # admitted yet have nothing to join; members finish the same
        # `fit` on their own.
        pending = self._change.joiners if self._change else []
        for task in pending:
            self._dismissed.add(task)
            self._signal(task, signal.SIGTERM)
        if any(
            p.poll() is None for t, p in self._procs.items() if t not in pending
        ):
            return None
        self._stop_all(signal.SIGTERM, 0)
        return 0

    def _signal(self, task: int, sig: int) -> None:
        self._workers.signal(task, sig)

    def _stop_all(self, sig: int, code: int) -> int:
        self._workers.stop_all(sig)
        return code

    # -- membership changes

    def _discover(self) -> list[tuple[str, int]]:
        """Discovery's `(host, slots)`. Its first answer decides whether
        the job is multi-host (`_setup`); a one-host job widens when a
        later answer names other hosts (`_widen`)."""
        discovered = self.discovery.slots()
        remote = host_slots.remote_hosts(discovered)
        if self.members and remote and not self.multi_host:
            self._widen(remote)
        return discovered

    def _wait_for_slots(self, needed: int) -> list | None:
        return self.discovery.wait_for(
            needed, self.wait_seconds, self.poll_seconds
        )

    def _plan_change(self, discovered: list) -> None:
        slots = sum(n for _, n in discovered)
        if slots < self.min_np:
            logger.warning(
                "host discovery reports %d slots, fewer than --min-np %d; "
                "keeping %d workers.",
                slots,
                self.min_np,
                len(self.members),
            )
        busy = set(self.members) | {
            t for t, p in self._procs.items() if p.poll() is None
        }
        plan = host_slots.plan_hosts(
            self._placed,
            discovered,
            self.min_np,
            self.max_np,
            busy,
            self._settings.leader,
        )
        generation = self.generation + 1
        if plan.retire:
            members = [t for t in self.members if t not in plan.retire]
            self._change = _Change(generation, members, [])
            return
        if not plan.start:
            return
        old = host_slots.hosts_of(self.cluster)
        self._placed.update(plan.start)
        new = host_slots.task_addresses(
            self._placed,
            [0] * self.max_np,
            self._settings.local_address,
            self._settings.resolve,
        )
        if host_slots.hosts_of(new) == old:
            self._start_joiners(plan.start)
            return
        # The members' server definition lacks a joiner's host: they
        # serve again on a cluster that has it, then the joiners start.
        self._after_readdress = list(plan.start)
        self._recover([])

    def _start_joiners(self, start: list) -> None:
        joiners = [task for task, _ in start]
        for task in joiners:
            # An earlier process of this task (lost or retired) may have
            # left its `ready-<task>`: only the new process's counts.
            self.channel.remove(f"ready-{task}")
            self._start(task, None)
        self._change = _Change(
            self.generation + 1, self.members + joiners, joiners
        )

    def _advance_change(self) -> None:
        change = self._change
        if change is None:
            return
        if not change.written:
            ready = [
                self.channel.get(f"ready-{t}") is not None
                for t in change.joiners
            ]
            if all(ready):
                elastic_board.write_plan(
                    self.channel,
                    change.generation,
                    change.members,
                    "discovery",
                    change.joiners,
                )
                change.written = True
                logger.info(
                    "generation %d planned: %d -> %d workers %s",
                    change.generation,
                    len(self.members),
                    len(change.members),
                    change.members,
                )
            return
        applied = f"applied-{change.generation}.json"
        if self.channel.get(applied) is not None:
            for task in set(self.members) - set(change.members):
                self._placed.pop(task, None)
            self.members = list(change.members)
            self.generation = change.generation
            self._change = None
            self._failed_joiners = 0


def check_bounds(min_np: int, max_np: int) -> None:
    """Raises `ValueError` unless `1 <= min_np <= max_np`."""
    if not 1 <= min_np <= max_np:
        raise ValueError(
            "Elastic jobs need 1 <= --min-np <= --max-np. Received: "
            f"--min-np {min_np}, --max-np {max_np}."
        )
