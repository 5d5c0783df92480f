"""`ElasticDriver`: runs a job whose workers come and go with discovery.

The cluster in every worker's `TF_CONFIG` lists `max_np` tasks (loopback
addresses, ports chosen at start); a task that is not running is never
contacted. The driver polls the discovery script; when slots appear it
starts joiners for free task indices and, once every joiner has reached
`fit` (its `ready-<task>` file), writes the next membership plan. When
slots disappear it writes a plan without the highest tasks (task 0, TF's
collective leader, never leaves). The workers switch at a train-step
boundary (`keras_hybrid.strategy.elastic_resize`) and rank 0 writes
`applied-<g>.json`; only then is the next change planned. Retired
workers exit 0. The job ends when task 0 exits.
"""

import dataclasses
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

from keras_hybrid.launch import elastic_files as em
from keras_hybrid.launch import exit_codes
from keras_hybrid.launch.host_discovery import HostDiscovery
from keras_hybrid.launch.output_forwarder import OutputForwarder
from keras_hybrid.launch.topology import free_ports
from keras_hybrid.launch.topology import local_specs
from keras_hybrid.launch.worker_env import worker_env

logger = logging.getLogger(__name__)
_TICK = 0.05


@dataclasses.dataclass
class _Change:
    generation: int
    members: list
    joiners: list
    written: bool = False


class ElasticDriver:
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
    ) -> None:
        check_bounds(min_np, max_np)
        self.command = list(command)
        self.min_np, self.max_np = min_np, max_np
        self.discovery = discovery
        self.poll_seconds = poll_seconds
        self.wait_seconds = wait_seconds
        self.grace_seconds = grace_seconds
        self.directory = tempfile.mkdtemp(prefix="keras_hybrid_elastic_")
        specs = local_specs(free_ports(max_np))
        cluster = [spec.address for spec in specs]
        seed = secrets.randbelow(2**31)
        self._envs = [
            {
                **os.environ,
                **worker_env(spec, cluster, threads=threads, extra_env=env),
                em.DIR_ENV: self.directory,
                em.MIN_NP_ENV: str(min_np),
                em.MAX_NP_ENV: str(max_np),
                em.SEED_ENV: str(seed),
            }
            for spec in specs
        ]
        self.members: list[int] = []
        self.generation = 0
        self._procs: dict[int, subprocess.Popen] = {}
        self._forwarders: list[OutputForwarder] = []
        self._locks = (threading.Lock(), threading.Lock())
        self._change: _Change | None = None
        self._signals: list[int] = []
        self._dismissed: set[int] = set()  # joiners stopped at the end

    def run(self, timeout: float | None = None) -> int:
        """Runs the job; returns its exit code (0 when task 0 finished and
        every other member exited 0)."""
        previous = {
            s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)
        }
        for sig in previous:
            signal.signal(sig, lambda signum, _: self._signals.append(signum))
        try:
            return self._run(timeout)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self, timeout: float | None) -> int:
        deadline = time.monotonic() + timeout if timeout else None
        slots = self._wait_for_slots(self.min_np)
        if slots is None:
            return 1
        self.members = list(range(min(slots, self.max_np)))
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
            self._advance_change()
            if self._change is None and time.monotonic() >= next_poll:
                next_poll = time.monotonic() + self.poll_seconds
                self._plan_change(self.discovery.total())
            time.sleep(_TICK)

    # -- processes

    def _start(self, task: int, members: list | None) -> None:
        env = dict(self._envs[task])
        if members is not None:
            env[em.MEMBERS_ENV] = ",".join(str(t) for t in members)
        else:
            env.pop(em.MEMBERS_ENV, None)
        proc = subprocess.Popen(
            self.command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._procs[task] = proc
        for pipe, sink, lock in (
            (proc.stdout, sys.stdout, self._locks[0]),
            (proc.stderr, sys.stderr, self._locks[1]),
        ):
            forwarder = OutputForwarder(pipe, sink, f"[{task}] ", lock)
            forwarder.start()
            self._forwarders.append(forwarder)
        logger.info(
            "started task %d (%s)", task, "member" if members else "joiner"
        )

    def _check_processes(self) -> int | None:
        """Returns the job's exit code once it is over, else None."""
        for task, proc in sorted(self._procs.items()):
            code = proc.poll()
            if code is None or code == 0 or task in self._dismissed:
                continue
            logger.error(
                "task %d exited with %s; stopping the job (a lost worker "
                "is not recovered yet, see docs/elastic.md).",
                task,
                exit_codes.describe_returncode(code),
            )
            return self._stop_all(
                signal.SIGTERM, exit_codes.exit_code_for(code)
            )
        chief = self._procs.get(0)
        if chief is None or chief.poll() is None:
            return None
        # Task 0 finished training: joiners not admitted yet have nothing
        # to join; members finish the same `fit` on their own.
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
        proc = self._procs[task]
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

    def _stop_all(self, sig: int, code: int) -> int:
        for task in self._procs:
            self._signal(task, sig)
        deadline = time.monotonic() + self.grace_seconds
        while any(p.poll() is None for p in self._procs.values()):
            if time.monotonic() >= deadline:
                for task in self._procs:
                    self._signal(task, signal.SIGKILL)
                break
            time.sleep(_TICK)
        for forwarder in self._forwarders:
            forwarder.join(timeout=5.0)
        return code

    # -- membership changes

    def _wait_for_slots(self, needed: int) -> int | None:
        deadline = time.monotonic() + self.wait_seconds
        while True:
            slots = self.discovery.total()
            if slots >= needed:
                return slots
            if time.monotonic() >= deadline:
                logger.error(
                    "host discovery reported %d slots, fewer than --min-np "
                    "%d, for %g s (--elastic-timeout); giving up.",
                    slots,
                    needed,
                    self.wait_seconds,
                )
                return None
            time.sleep(self.poll_seconds)

    def _plan_change(self, slots: int) -> None:
        target = max(self.min_np, min(self.max_np, slots))
        if slots < self.min_np:
            logger.warning(
                "host discovery reports %d slots, fewer than --min-np %d; "
                "keeping %d workers.",
                slots,
                self.min_np,
                len(self.members),
            )
        if target == len(self.members):
            return
        generation = self.generation + 1
        if target < len(self.members):
            members = self.members[:target]
            self._change = _Change(generation, members, [])
            return
        busy = set(self.members) | {
            t for t, p in self._procs.items() if p.poll() is None
        }
        free = [t for t in range(self.max_np) if t not in busy]
        joiners = free[: target - len(self.members)]
        if not joiners:
            return
        for task in joiners:
            self._start(task, None)
        self._change = _Change(generation, self.members + joiners, joiners)

    def _advance_change(self) -> None:
        change = self._change
        if change is None:
            return
        if not change.written:
            ready = [
                os.path.exists(os.path.join(self.directory, f"ready-{t}"))
                for t in change.joiners
            ]
            if all(ready):
                em.write_plan(
                    self.directory,
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
        applied = os.path.join(
            self.directory, f"applied-{change.generation}.json"
        )
        if os.path.exists(applied):
            self.members = list(change.members)
            self.generation = change.generation
            self._change = None


def check_bounds(min_np: int, max_np: int) -> None:
    """Raises `ValueError` unless `2 <= min_np <= max_np`."""
    if not 2 <= min_np <= max_np:
        raise ValueError(
            "Elastic jobs need 2 <= --min-np <= --max-np (task 0 and at "
            f"least one peer). Received: --min-np {min_np}, --max-np "
            f"{max_np}."
        )
