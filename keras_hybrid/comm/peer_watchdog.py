"""`PeerWatchdog`: fails every collective when a peer stops answering.

TensorFlow implements a collective's `timeout` with a new thread that
sleeps for the whole timeout (TF 2.21, measured: 2 threads per call, alive
for `timeout` seconds), so giving one to every collective of every training
step piles up thousands of threads and the process dies of it. Instead, the
collectives inside a step carry no timeout, and this thread does what
`MultiWorkerMirroredStrategy` does: it probes every peer's server every few
seconds and, once one has not answered for `timeout_seconds`, aborts all
collectives of this process with an error naming the peer. Eager
collectives (barriers, broadcasts, saves) keep their own timeout.

Probes and the abort go through `_compat.tf.check_peer_health` and
`abort_collectives`.
"""

import threading
import time

from absl import logging

from keras_hybrid._compat import tf as tf_compat


class PeerWatchdog:
    """A daemon thread that aborts collectives when a peer is gone.

    Args:
        job: String. The cluster's job name.
        rank: Int. This worker's task index.
        size: Int. Number of workers.
        timeout_seconds: Float. How long a peer may fail probes before
            every collective of this process is aborted.
    """

    def __init__(self, job: str, rank: int, size: int, timeout_seconds: float):
        self.timeout_seconds = float(timeout_seconds)
        self._job = f"job:{job}"
        self.interval = max(0.5, min(10.0, self.timeout_seconds / 4))
        self._peers = [
            f"/job:{job}/replica:0/task:{i}" for i in range(size) if i != rank
        ]
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="keras_hybrid_peer_watchdog", daemon=True
        )
        self.aborted = None  # the message, once collectives were aborted

    def start(self) -> "PeerWatchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_seconds: float | None = None) -> None:
        """Waits until the thread ended (after `stop`), at most
        `timeout_seconds`."""
        self._thread.join(timeout_seconds)

    def set_peers(self, tasks: list[int]) -> None:
        """Probes only `tasks` from now on (an elastic job's members)."""
        self._peers = [f"/{self._job}/replica:0/task:{t}" for t in tasks]

    def unreachable_peers(self, probe_seconds: float = 2.0) -> list[int]:
        """Ranks of the peers whose server does not answer one probe now
        (for example because the process exited)."""
        ranks = []
        for peer in self._peers:
            try:
                tf_compat.check_peer_health(peer, int(probe_seconds * 1000))
            except Exception:  # any failure to answer counts
                ranks.append(int(peer.rsplit(":", 1)[1]))
        return ranks

    def _run(self) -> None:
        failing_since: dict[str, float] = {}
        probe_ms = int(min(self.interval, self.timeout_seconds) * 1000)
        while not self._stop.wait(self.interval):
            for peer in list(self._peers):
                try:
                    tf_compat.check_peer_health(peer, probe_ms)
                    failing_since.pop(peer, None)
                except Exception as e:  # any failure to answer counts
                    first = failing_since.setdefault(peer, time.monotonic())
                    if time.monotonic() - first >= self.timeout_seconds:
                        self._abort(peer, e)
                        return

    def _abort(self, peer: str, error: Exception) -> None:
        self.aborted = (
            f"keras-hybrid: worker {peer} has not answered for "
            f"{self.timeout_seconds:g} s (timeout_seconds); aborting every "
            f"collective of this worker. Last probe: {error}"
        )
        logging.error("%s", self.aborted)
        tf_compat.abort_collectives(self.aborted)
