"""`LostWorkers`: what `ElasticDriver` does when a member dies.

When members die (any of them, the collective leader too; all those seen
dead at once in one plan), the driver picks new ports for every task and
writes `recover-<g>.json`: the survivors, the new addresses and the task
that leads the new cluster's collectives (another survivor when the
leader was lost). The survivors abort their collectives, serve again on
the new ports and resume from their last commit. Once rank 0 wrote
`recovered-<g>.json`, the driver writes `plan-<g>.json` for later
joiners. If fewer than `min_np` survive, the driver waits up to
`wait_seconds` for discovery to report `min_np` slots, then recovers the
survivors and grows the job back with joiners; else it stops the job. A
re-address (joiners on a host the members' cluster lacks) goes through
the same plan with nobody lost.
"""

import dataclasses
import logging
import signal
import time

from keras_hybrid.contract import elastic_board
from keras_hybrid.launch import exit_codes
from keras_hybrid.launch.ssh import SSH_FAILURE_EXIT_CODE

logger = logging.getLogger("keras_hybrid.launch.elastic.driver")
# Failed joiners in a row (each died before it was admitted) that stop the
# job: a joiner that keeps failing would be started again forever.
_JOINER_TRIES = 3


class LostWorkers:
    """`ElasticDriver`'s handling of lost members and re-addresses (it
    holds the state these methods use)."""

    def _lose(self, tasks: list, codes: dict) -> None:
        """Members died (all those seen dead at once), or joiners of a
        plan already written (which may have joined): drops a planned
        change, and recovers the survivors now or once discovery reports
        enough slots. Any member may be lost, the collective leader too:
        the recovery names a surviving one (`_recover`)."""
        for task in tasks:
            self._lost.add(task)
            self._log_loss(task, codes[task])
        self._drop_change(keep=tasks)
        for joiner, _ in self._after_readdress:
            self._placed.pop(joiner, None)
        self._after_readdress = []
        self.members = [t for t in self.members if t not in tasks]
        for task in tasks:
            self._placed.pop(task, None)
        logger.warning(
            "%d workers are left (tasks %s).", len(self.members), self.members
        )
        if len(self.members) >= self.min_np:
            self._recover(list(tasks))
            return
        if self._short_since is None:
            self._short_since = time.monotonic()
        self._short_lost.extend(tasks)
        logger.warning(
            "fewer than --min-np %d workers are left; waiting up to %g s "
            "(--elastic-timeout) for host discovery to report %d slots.",
            self.min_np,
            self.wait_seconds,
            self.min_np,
        )

    def _log_loss(self, task: int, code: int) -> None:
        proc = self._procs[task]
        who = (
            f"rank {self.members.index(task)}"
            if task in self.members
            else "a joiner of the plan in flight"
        )
        logger.warning(
            "%s (%s) exited with %s%s%s.",
            who,
            proc.where(),
            exit_codes.describe_returncode(code),
            ", the collective leader" if task == self._settings.leader else "",
            proc.hint(),
        )

    def _drop_change(self, keep=()) -> None:
        """Drops the planned change: its joiners (but those in `keep`,
        dead already) are stopped; they wait for a plan naming them on
        addresses that are about to change."""
        change = self._change
        if change is None:
            return
        for joiner in change.joiners:
            if joiner not in keep:
                self._dismissed.add(joiner)
                self._signal(joiner, signal.SIGTERM)
            self._placed.pop(joiner, None)
        if change.written:
            self.generation = max(self.generation, change.generation)
        self._change = None

    def _lose_joiner(self, task: int, code: int) -> int | None:
        """A joiner died before its plan was written: the members lose
        nothing. The change is dropped, and discovery's next answer starts
        joiners again; a joiner that could not start (exit code 127, or
        ssh's own failure) or `_JOINER_TRIES` failed joiners in a row stop
        the job. Returns the job's exit code then, else None."""
        proc = self._procs[task]
        self._lost.add(task)
        self._failed_joiners += 1
        fatal = code == exit_codes.NOT_STARTED_EXIT_CODE or (
            proc.remote and code == SSH_FAILURE_EXIT_CODE
        )
        if fatal or self._failed_joiners >= _JOINER_TRIES:
            logger.error(
                "%s, a joiner that was not admitted yet, exited with %s%s; "
                "%s; stopping the job.",
                proc.where(),
                exit_codes.describe_returncode(code),
                proc.hint(),
                "it could not start"
                if fatal
                else f"{self._failed_joiners} joiners failed in a row",
            )
            return self._stop_all(
                signal.SIGTERM, exit_codes.exit_code_for(code)
            )
        logger.warning(
            "%s, a joiner that was not admitted yet, exited with %s%s; the "
            "members go on, and joiners start again at the next discovery "
            "(%d of %d failed joiners in a row).",
            proc.where(),
            exit_codes.describe_returncode(code),
            proc.hint(),
            self._failed_joiners,
            _JOINER_TRIES,
        )
        self._drop_change(keep=[task])
        return None

    def _wait_for_replacements(self) -> int | None:
        """While fewer than `min_np` members are left: recovers the
        survivors once discovery reports `min_np` slots (joiners then grow
        the job back); returns the job's exit code (1) when `wait_seconds`
        ran out."""
        if not self.members:
            logger.error(
                "lost task(s) %s: no worker is left to hold the last commit "
                "(every member was lost since it was taken); stopping the "
                "job. Restart it from a checkpoint.",
                self._short_lost,
            )
            return self._stop_all(signal.SIGTERM, 1)
        slots = sum(n for _, n in self._discover())
        if slots >= self.min_np:
            self._short_since = None
            self._recover(self._short_lost)
            self._short_lost = []
            return None
        waited = time.monotonic() - self._short_since
        if waited < self.wait_seconds:
            return None
        logger.error(
            "lost task(s) %s: %d worker(s) left (tasks %s), fewer than "
            "--min-np %d, and host discovery reported %d slot(s) for %g s "
            "(--elastic-timeout), never the %d needed to replace them; "
            "stopping the job.",
            self._short_lost,
            len(self.members),
            self.members,
            self.min_np,
            slots,
            self.wait_seconds,
            self.min_np,
        )
        return self._stop_all(signal.SIGTERM, 1)

    def _recover(self, lost: list) -> None:
        """Writes the survivors' recovery plan on new ports; with nobody
        `lost`, the members' plan to serve on a new cluster that has the
        hosts of `_after_readdress` (at a step boundary, no abort). The
        lowest member leads the new cluster's collectives: the leader
        stays unless it was lost (members never have a lower task than
        it but joiners admitted since a recovery)."""
        generation = self.generation + 1
        leader = min(self.members)
        self._settings = dataclasses.replace(self._settings, leader=leader)
        self._envs, self.cluster = self._make_envs()
        if lost:
            elastic_board.write_recovery(
                self.channel,
                generation,
                self.members,
                self.cluster,
                lost,
                leader,
            )
        else:
            elastic_board.write_plan(
                self.channel,
                generation,
                self.members,
                "readdress",
                cluster=self.cluster,
                leader=leader,
            )
        self.generation = generation
        self._recovering = generation
        self.recoveries.append(
            {"generation": generation, "members": list(self.members)}
        )
        logger.info(
            "generation %d planned (%s %s): %d members %s on new ports %s, "
            "task %d leading",
            generation,
            "lost worker" if lost else "re-address for joiners",
            lost or self._after_readdress,
            len(self.members),
            self.members,
            self.cluster,
            leader,
        )

    def _advance_recovery(self) -> None:
        """Once rank 0 resumed after a recovery, writes that generation's
        plan too (joiners read every generation's plan)."""
        generation = self._recovering
        if generation is None:
            return
        if (
            self.channel.get(elastic_board.recovered_name(generation))
            is not None
        ):
            self._recovering = None
            if not self._after_readdress:
                elastic_board.write_plan(
                    self.channel, generation, self.members, "lost_worker"
                )
            else:
                self._start_joiners(self._after_readdress)
                self._after_readdress = []
