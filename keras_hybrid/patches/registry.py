"""Keras is patched only while a multi-worker `HybridStrategy` is open.

A multi-worker strategy changes Keras for the whole process: one writer
per path (`chief_writes`, with `h5_streaming` and `chief_summaries`), one
finite-gradient verdict (`finite_check`), fenced collective calls
(`fenced_calls`), a random stream per worker (`worker_seeds`),
state a step assigns averaged over workers (`worker_state`), a model
built from its dataset's spec, not a drawn batch (`spec_build`), and a
`compute_loss` that averages by itself scaled as Keras' losses are
(`loss_scaling`).
`acquire` puts these in when a strategy opens; `release` takes them out,
in reverse order, when the last open strategy closes, and then stops the
process's `PeerWatchdog`, so plain Keras (or a later strategy) starts
from stock behaviour.

Open strategies are held weakly: one that was garbage-collected without
being closed no longer counts. While several are open the patches follow
the newest one, as they always did.

No private hook is touched here; the modules above list theirs.
"""

import threading
import weakref

from keras_hybrid.patches import build_from_spec
from keras_hybrid.patches import chief_writes
from keras_hybrid.patches import collective_calls
from keras_hybrid.patches import finite_check
from keras_hybrid.patches import loss_scaling
from keras_hybrid.patches import worker_random
from keras_hybrid.strategy import averaged_state
from keras_hybrid.strategy import cluster

# Re-entrant: a strategy may be closed from an `atexit` hook while another
# thread's `acquire` is running.
_lock = threading.RLock()
_open: list[weakref.ref] = []
_current = {"ref": None}  # the strategy the patches follow


def acquire(strategy) -> None:
    """Installs the patches for `strategy` (first holder) or points them at
    it (later holders). Calling it twice for one strategy counts once."""
    with _lock:
        live = _live()
        if not any(s is strategy for s in live):
            _open.append(weakref.ref(strategy))
        _install(strategy)


def release(strategy) -> None:
    """Forgets `strategy`; uninstalls the patches if no open strategy is
    left, else points them at the newest one still open (idempotent)."""
    with _lock:
        live = [s for s in _live() if s is not strategy]
        _open[:] = [weakref.ref(s) for s in live]
        if not live:
            if _current["ref"] is not None:
                _uninstall()
            return
        current = _current["ref"]() if _current["ref"] else None
        if current is not live[-1]:
            _install(live[-1])


def open_count() -> int:
    """Int. How many strategies hold the patches now."""
    with _lock:
        return len(_live())


def _live() -> list:
    return [s for s in (ref() for ref in _open) if s is not None]


def _install(strategy) -> None:
    chief_writes.install(strategy)
    finite_check.install()
    collective_calls.install(strategy)
    worker_random.install()
    averaged_state.install()
    build_from_spec.install()
    loss_scaling.install()
    _current["ref"] = weakref.ref(strategy)


def _uninstall() -> None:
    loss_scaling.uninstall()
    build_from_spec.uninstall()
    averaged_state.uninstall()
    worker_random.uninstall()
    collective_calls.uninstall()
    finite_check.uninstall()
    chief_writes.uninstall()
    # The watchdog aborts this process's collectives when a peer goes away;
    # with no strategy open, peers may finish and exit at will.
    cluster.stop_watchdog()
    _current["ref"] = None
