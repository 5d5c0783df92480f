"""How long a survivor waits for the launcher's recovery plan.

When a collective fails in `fit`, `ElasticRecovery` waits for the
launcher's plan before it gives up and re-raises. The launcher plans
within moments of a lost worker, except when fewer than `--min-np` are
left: then it first waits up to `--elastic-timeout` for discovery to
report enough slots (`launch/elastic/lost_workers.py`), and the launcher passes
that time on (`DISCOVERY_WAIT_ENV`). A survivor waits that time as well,
so that a job short of workers outlasts a slow discovery instead of
failing after a fixed wait; a read in a callback that the call fence
explains with a `RuntimeError` (caused by a lost peer's error) waits
alike.
"""

import os

import tensorflow as tf

from keras_hybrid.contract.elastic_board import DISCOVERY_WAIT_ENV

# How long a plan takes to come when the launcher need not wait.
PLAN_WAIT_SECONDS = 15.0

# A collective failing because a peer went away (TF's errors of a lost
# peer); other errors (invalid arguments, out of memory) are the script's.
_PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
    tf.errors.InternalError,
)


def plan_wait_seconds(error: BaseException) -> float:
    """How long a survivor waits for the launcher's recovery plan after
    `error` stopped `fit`: none for a Python error; `PLAN_WAIT_SECONDS`
    for a TF error; for one of a lost peer (also behind the call fence's
    `RuntimeError`) or a broken TCP link to a peer (`ConnectionError`,
    also as the cause of a `RuntimeError`), that plus `--elastic-timeout`,
    which the launcher may spend waiting for discovery when fewer than
    `--min-np` are left."""
    if isinstance(error, ConnectionError) or isinstance(
        error.__cause__, ConnectionError
    ):
        # A peer's own TCP link broke (the buddy store's sender): the peer
        # may be dying, and the launcher's plan then says so.
        return _lost_peer_wait()
    cause = error if isinstance(error, tf.errors.OpError) else None
    if cause is None and isinstance(error.__cause__, tf.errors.OpError):
        cause = error.__cause__
    if cause is None:
        return 0.0
    if not isinstance(cause, _PEER_ERRORS):
        return PLAN_WAIT_SECONDS
    return _lost_peer_wait()


def _lost_peer_wait() -> float:
    return PLAN_WAIT_SECONDS + float(os.environ.get(DISCOVERY_WAIT_ENV, "0"))
