"""`LostWorkers`: what `ElasticDriver` does when a member dies.

When a member other than task 0 dies, the driver picks new ports for
every task and writes `recover-<g>.json` (the survivors and the new
addresses); the survivors abort their collectives, serve again on the
new ports and resume from their last commit. Once rank 0 wrote
`recovered-<g>.json`, the driver writes `plan-<g>.json` for later
joiners. If fewer than `min_np` survive, the driver waits up to
`wait_seconds` for discovery to report `min_np` slots, then recovers the
survivors and grows the job back with joiners; else it stops the job. A
re-address (joiners on a host the members' cluster lacks) goes through
the same plan with nobody lost.
"""

import logging
import signal
import time

from keras_hybrid.contract import elastic_board
from keras_hybrid.launch import exit_codes

logger = logging.getLogger("keras_hybrid.launch.elastic.driver")


class LostWorkers:
    """`ElasticDriver`'s handling of lost members and re-addresses (it
    holds the state these methods use)."""

    def _lose(self, task: int, code: int) -> None:
        """A member died: drops a planned change, and recovers the
        survivors now or once discovery reports enough slots."""
        self._lost.add(task)
        rank = self.rank_of(task)
        change = self._change
        if change is not None:
            # Joiners of a change that did not happen wait for a plan
            # naming them on the old addresses: stop them.
            for joiner in change.joiners:
                self._dismissed.add(joiner)
                self._signal(joiner, signal.SIGTERM)
                self._placed.pop(joiner, None)
            if change.written:
                self.generation = max(self.generation, change.generation)
            self._change = None
        for joiner, _ in self._after_readdress:
            self._placed.pop(joiner, None)
        self._after_readdress = []
        self.members = [t for t in self.members if t != task]
        logger.warning(
            "rank %d (%s) exited with %s%s; %d workers are left (tasks %s).",
            rank,
            self._procs[task].where(),
            exit_codes.describe_returncode(code),
            self._procs[task].hint(),
            len(self.members),
            self.members,
        )
        self._placed.pop(task, None)
        if len(self.members) >= self.min_np:
            self._recover([task])
            return
        if self._short_since is None:
            self._short_since = time.monotonic()
        self._short_lost.append(task)
        logger.warning(
            "fewer than --min-np %d workers are left; waiting up to %g s "
            "(--elastic-timeout) for host discovery to report %d slots.",
            self.min_np,
            self.wait_seconds,
            self.min_np,
        )

    def _wait_for_replacements(self) -> int | None:
        """While fewer than `min_np` members are left: recovers the
        survivors once discovery reports `min_np` slots (joiners then grow
        the job back); returns the job's exit code (1) when `wait_seconds`
        ran out."""
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
        hosts of `_after_readdress` (at a step boundary, no abort)."""
        generation = self.generation + 1
        self._envs, self.cluster = self._make_envs()
        if lost:
            elastic_board.write_recovery(
                self.channel, generation, self.members, self.cluster, lost
            )
        else:
            elastic_board.write_plan(
                self.channel,
                generation,
                self.members,
                "readdress",
                cluster=self.cluster,
            )
        self.generation = generation
        self._recovering = generation
        self.recoveries.append(
            {"generation": generation, "members": list(self.members)}
        )
        logger.info(
            "generation %d planned (%s %s): %d members %s on new ports %s",
            generation,
            "lost worker" if lost else "re-address for joiners",
            lost or self._after_readdress,
            len(self.members),
            self.members,
            self.cluster,
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
