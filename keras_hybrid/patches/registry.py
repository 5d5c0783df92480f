"""The one registry of runtime patches: in while a strategy is in use,
out in exactly the reverse order.

A multi-worker `HybridStrategy` changes Keras for the whole process from
its first `scope()`: one writer per path (`chief_summaries`,
`h5_streaming`, `chief_writes`), one finite-gradient verdict
(`finite_check`), optimizer clipping of the summed gradients
(`gradient_clipping`), fenced collective calls (`collective_calls`),
TF's embedding lookups of Keras variables by rows (`tf_lookups`), a
random stream per worker (`worker_random`), state a step assigns
averaged over workers (`state_averaging`), a model built from its
dataset's spec (`build_from_spec`), optimizers that cannot train a
model's dynamic tables refused at `compile` (`dynamic_compile`), losses
scaled by each worker's share of the batch (`loss_scaling`), a progress
bar that draws in place only on a terminal (`progress_bar`); an elastic
strategy also scales losses by the current group size and resizes and
recovers inside `fit` (`elastic_training`).

`acquire(strategy, elastic, one_process)` puts in, under one lock, every
set that the open strategies need (a strategy of one process needs only
the sets marked `one_process`: `build_from_spec`), in the order of
`SETS`, patch by patch; `release` takes out what no open strategy needs
any more, popping the stack of installed patches, so each attribute gets
back exactly what it held before it was patched, even where two sets
patch the same attribute. When the last open strategy is released, Keras
is stock again and the process's `PeerWatchdog` stops. Open strategies
are held weakly: one that was collected without being closed no longer
counts. While several are open the patches serve the newest
(`PatchSet.follow`).

Private Keras sites are read and written only through `_compat.keras`
(`current`, `replace`); public classes and modules directly.
"""

import contextlib
import gc
import threading
import weakref

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.patches import build_from_spec
from keras_hybrid.patches import chief_summaries
from keras_hybrid.patches import chief_writes
from keras_hybrid.patches import collective_calls
from keras_hybrid.patches import dynamic_compile
from keras_hybrid.patches import elastic_training
from keras_hybrid.patches import finite_check
from keras_hybrid.patches import gradient_clipping
from keras_hybrid.patches import h5_streaming
from keras_hybrid.patches import loss_means
from keras_hybrid.patches import loss_scaling
from keras_hybrid.patches import progress_bar
from keras_hybrid.patches import state_averaging
from keras_hybrid.patches import tf_lookups
from keras_hybrid.patches import worker_random
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy import cluster

# Installation order; removal is the reverse.
SETS = (
    chief_summaries.PATCHES,
    h5_streaming.PATCHES,
    chief_writes.PATCHES,
    finite_check.PATCHES,
    gradient_clipping.PATCHES,
    collective_calls.PATCHES,
    tf_lookups.PATCHES,
    worker_random.PATCHES,
    state_averaging.PATCHES,
    build_from_spec.PATCHES,
    dynamic_compile.PATCHES,
    loss_scaling.PATCHES,
    loss_means.PATCHES,
    progress_bar.PATCHES,
    elastic_training.PATCHES,
)
# An attribute a class inherits: restoring it means deleting the override.
_INHERITED = object()

# Re-entrant: a strategy may be closed from an `atexit` hook while another
# thread's `acquire` is running.
_lock = threading.RLock()
_holders: list = []  # [(weakref to a strategy, elastic)], oldest first
# The stack of installed sets: [(PatchSet, [(Patch, what it replaced)])].
_installed: list = []
_serving = {"ref": None}  # the strategy the installed sets follow


# What a strategy needs, by how it runs: the sets marked `one_process`;
# every set that is not elastic; every set.
ONE_PROCESS, MULTI_WORKER, ELASTIC = "one_process", "multi_worker", "elastic"


def acquire(strategy, elastic: bool = False, one_process: bool = False):
    """Puts in the patches `strategy` needs (a strategy of one process:
    only the sets marked `one_process`), or points them at it if they are
    in already. Calling it twice for one strategy counts once."""
    kind = ELASTIC if elastic else ONE_PROCESS if one_process else MULTI_WORKER
    with _lock:
        if not any(s is strategy for s, _ in _live()):
            _holders.append((weakref.ref(strategy), kind))
        _settle()


def release(strategy) -> None:
    """Forgets `strategy`; takes out what no open strategy needs, in
    reverse order of installation (idempotent)."""
    with _lock:
        _holders[:] = [
            (weakref.ref(s), e) for s, e in _live() if s is not strategy
        ]
        _settle()


def forget_collected() -> None:
    """Runs a garbage collection and takes out what only strategies
    collected without `close()` needed (strategies hold reference cycles,
    so dropping the last name does not free them at once)."""
    gc.collect()
    with _lock:
        _settle()


def open_strategies() -> list:
    """The strategies that hold the patches now, oldest first."""
    with _lock:
        return [s for s, _ in _live()]


def open_count() -> int:
    """Int. How many strategies hold the patches now."""
    with _lock:
        return len(_live())


def installed() -> list[str]:
    """Names of the installed sets, in installation order."""
    with _lock:
        return [patch_set.name for patch_set, _ in _installed]


def sites(elastic: bool = True) -> list[str]:
    """Names of every attribute the sets replace (with `elastic`, those of
    elastic strategies too), each once, in installation order."""
    names = []
    for patch_set in SETS:
        if patch_set.elastic and not elastic:
            continue
        for patch in patch_set.patches:
            if patch.name not in names:
                names.append(patch.name)
    return names


@contextlib.contextmanager
def installing(strategy, *patch_sets: PatchSet):
    """Puts in `patch_sets`, in order, serving `strategy`, for the block,
    and takes them out in reverse order after it (tests of some sets
    alone; no strategy may hold the registry meanwhile).

    Raises:
        RuntimeError: If an open strategy holds patches now.
    """
    forget_collected()
    with _lock:
        if _installed:
            raise RuntimeError(
                f"Cannot install {[s.name for s in patch_sets]} alone: the "
                f"registry holds {installed()} for an open strategy."
            )
        for patch_set in patch_sets:
            _put_in(patch_set)
            _follow(patch_set, strategy)
    try:
        yield
    finally:
        with _lock:
            for _ in patch_sets:
                _take_out_last()


def _live() -> list:
    live = [(ref(), kind) for ref, kind in _holders]
    return [(s, kind) for s, kind in live if s is not None]


def _settle() -> None:
    """Makes the installed stack the sets the open strategies need, and
    points them at the newest open strategy."""
    live = _live()
    kinds = {kind for _, kind in live}
    elastic = ELASTIC in kinds
    several = bool(kinds - {ONE_PROCESS})
    wanted = [
        s
        for s in SETS
        if live and (elastic or not s.elastic) and (several or s.one_process)
    ]
    while _installed and not _starts(wanted, [s for s, _ in _installed]):
        _take_out_last()
    added = wanted[len(_installed) :]
    for patch_set in added:
        _put_in(patch_set)
    serving = live[-1][0] if live else None
    served = _serving["ref"]() if _serving["ref"] is not None else None
    for patch_set, _ in _installed:
        if serving is not served or patch_set in added:
            _follow(patch_set, serving)
    _serving["ref"] = weakref.ref(serving) if serving is not None else None
    if not live:
        # The watchdog aborts this process's collectives when a peer goes
        # away; with no strategy open, peers may finish and exit at will.
        cluster.stop_watchdog()


def _starts(sets: list, prefix: list) -> bool:
    return sets[: len(prefix)] == prefix


def _put_in(patch_set: PatchSet) -> None:
    replaced = []
    for patch in patch_set.patches:
        stored, found = _read(patch)
        _write(patch, patch.replacement(found))
        replaced.append((patch, stored))
    _installed.append((patch_set, replaced))


def _take_out_last() -> None:
    patch_set, replaced = _installed.pop()
    for patch, stored in reversed(replaced):
        _restore(patch, stored)
    _follow(patch_set, None)


def _follow(patch_set: PatchSet, strategy) -> None:
    if patch_set.follow is not None:
        patch_set.follow(strategy)


def _read(patch) -> tuple:
    """What the attribute holds as stored, and as Python finds it."""
    if patch.target is PRIVATE_KERAS:
        value = keras_compat.current(patch.attribute)
        return value, value
    if isinstance(patch.target, type):
        stored = patch.target.__dict__.get(patch.attribute, _INHERITED)
        return stored, getattr(patch.target, patch.attribute)
    value = getattr(patch.target, patch.attribute)
    return value, value


def _write(patch, value) -> None:
    if patch.target is PRIVATE_KERAS:
        keras_compat.replace(patch.attribute, value)
    else:
        setattr(patch.target, patch.attribute, value)


def _restore(patch, stored) -> None:
    if stored is _INHERITED:
        delattr(patch.target, patch.attribute)
    else:
        _write(patch, stored)
