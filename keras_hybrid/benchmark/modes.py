"""The ways of synchronizing a model that the benchmark compares.

A mode is a name, a description, the `HybridStrategy` arguments that make
it, and a check that says whether it can run here. Modes live in a small
registry so that new engines plug in with one `register(Mode(...))`.

| mode | tables | IndexedSlices of replicated variables |
| --- | --- | --- |
| `hybrid` | partitioned, pull/push | all-gathered (tiny tables only) |
| `hybrid_padded` | as `hybrid`, blocks padded to the largest | as `hybrid` |
| `hybrid_rounds` | as `hybrid`, all-to-all in rounds | as `hybrid` |
| `hybrid_per_call` | as `hybrid`, one exchange per lookup | as `hybrid` |
| `hybrid_hot` | as `hybrid`, `--hot_rows` rows all-reduced | as `hybrid` |
| `hybrid_flat` | as `hybrid`, one exchange among all workers | as `hybrid` |
| `hybrid_hierarchical` | as `hybrid`, ids deduped per host | as `hybrid` |
| `allgather` | replicated | all-gathered: stock TensorFlow |
| `dense` | replicated | densified and all-reduced |
| `horovod` | replicated | all-gathered by Horovod, as `hvd` does |
| `ps_only` | not available (see `PS_ONLY_REASON`) | |
"""

import dataclasses
import importlib.util
from collections.abc import Callable

TABLES_SPARSE = {".*embeddings": "sparse"}
ALL_DENSE = {".*": "dense"}
PS_ONLY_REASON = (
    "mode ps_only is left out: parameter-server semantics for dense "
    "variables (gradient pushed to an owner shard, summed and applied "
    "there, new value pulled by every worker) are not implemented; a dense "
    "kernel cannot be a partitioned table, which refuses whole reads."
)


@dataclasses.dataclass(frozen=True)
class Mode:
    """One way of synchronizing gradients.

    Args:
        name: String. Flag value, e.g. `"hybrid"`.
        description: String. One line for logs and docs.
        strategy_kwargs: Tuple of `(name, value)` pairs passed to
            `HybridStrategy`.
        unavailable: Callable returning `None` when the mode can run, else
            a message that says why not and how to fix it.
        skip_reason: String or `None`. If set, the mode is accepted but
            left out of the results with this reason.
        communicator_settings: Tuple of `(attribute, value)` pairs set on
            the strategy's communicator once it exists.
        extended_settings: Tuple of `(attribute, value)` pairs set on the
            strategy's `extended` once it exists.
        hot_rows: Boolean. Whether the mode takes `--hot_rows` (and the
            worker re-chooses them every `--hot_every` steps).
    """

    name: str
    description: str
    strategy_kwargs: tuple = ()
    unavailable: Callable[[], str | None] = lambda: None
    skip_reason: str | None = None
    communicator_settings: tuple = ()
    extended_settings: tuple = ()
    hot_rows: bool = False

    def make_strategy(self, hot_rows: int = 0):
        """A `HybridStrategy` for this mode (cluster from the env);
        `hot_rows` is used only by modes with `hot_rows` set."""
        from keras_hybrid.hybrid_strategy import HybridStrategy

        kwargs = dict(self.strategy_kwargs)
        if self.hot_rows:
            kwargs["hot_rows"] = hot_rows
        strategy = HybridStrategy(**kwargs)
        for name, value in self.communicator_settings:
            setattr(strategy.communicator, name, value)
        for name, value in self.extended_settings:
            setattr(strategy.extended, name, value)
        return strategy


_REGISTRY: dict[str, Mode] = {}


def register(mode: Mode) -> None:
    """Adds `mode` to the registry (a new name, or replaces one)."""
    _REGISTRY[mode.name] = mode


def names() -> tuple[str, ...]:
    """Registered mode names, in registration order."""
    return tuple(_REGISTRY)


def get(name: str) -> Mode:
    """The registered `Mode` called `name`.

    Raises:
        ValueError: If no mode has this name.
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"`--modes` entries must be among {names()}. Received: {name!r}"
        )
    return _REGISTRY[name]


def resolve(requested: list[str]) -> list[Mode]:
    """Checks the requested modes; returns them in the order given.

    Raises:
        ValueError: If a name is unknown, repeated, or the list is empty.
        RuntimeError: If a requested mode cannot run on this machine (for
            example `horovod` without Horovod); the message says how to
            get it.
    """
    if not requested:
        raise ValueError("`--modes` must name at least one mode.")
    if len(set(requested)) != len(requested):
        raise ValueError(
            f"`--modes` has a repeated entry. Received: {requested}"
        )
    chosen = [get(name) for name in requested]
    for mode in chosen:
        problem = mode.unavailable()
        if problem:
            raise RuntimeError(problem)
    return chosen


_HOROVOD_LAUNCH = (
    "mode horovod is not run by this CLI: it launches each worker itself "
    "(in its own network namespace with --netem), and the Horovod engine "
    "takes its workers from `horovodrun`. In the Horovod environment "
    "(`make test-horovod` builds it) run the side-by-side comparison "
    "`horovodrun -np N -H localhost:N --gloo python "
    "examples/horovod_comparison/main.py` (docs/horovod.md), or drop "
    "horovod from --modes."
)


def _horovod_missing() -> str | None:
    if importlib.util.find_spec("horovod") is not None:
        try:
            importlib.import_module("horovod.tensorflow")
            return _HOROVOD_LAUNCH
        except ImportError as error:
            detail = f" (import failed: {error})"
    else:
        detail = ""
    return (
        "mode horovod needs `horovod.tensorflow`, which is not importable "
        f"here{detail}. Horovod 0.28.1 builds only against TensorFlow "
        "2.15.1: create a separate venv with `tensorflow-cpu==2.15.1` and "
        "`HOROVOD_WITH_TENSORFLOW=1 pip install horovod==0.28.1`, or drop "
        "horovod from --modes."
    )


register(
    Mode(
        "hybrid",
        "this package: tables partitioned (pull/push), dense all-reduced",
        # The benchmark measures the partitioned path whatever the cost
        # rule would choose on this link.
        (("variable_kinds", TABLES_SPARSE),),
    )
)
register(
    Mode(
        "allgather",
        "all variables replicated; IndexedSlices all-gathered (stock TF)",
        (("variable_kinds", ALL_DENSE), ("indexed_slices", "allgather")),
    )
)
register(
    Mode(
        "dense",
        "all variables replicated; every gradient densified, all-reduced",
        (("variable_kinds", ALL_DENSE), ("indexed_slices", "densify")),
    )
)
register(
    Mode(
        "ps_only",
        "dense variables on parameter-server shards too",
        skip_reason=PS_ONLY_REASON,
    )
)
register(
    Mode(
        "horovod",
        "all variables replicated; Horovod engine (IndexedSlices gathered)",
        (
            ("engine", "horovod"),
            ("variable_kinds", ALL_DENSE),
            ("indexed_slices", "allgather"),
        ),
        unavailable=_horovod_missing,
    )
)
register(
    Mode(
        "hybrid_padded",
        "hybrid, every all-to-all block padded to the largest pair count "
        "(one AllToAllV2, as elastic jobs run it)",
        (("variable_kinds", TABLES_SPARSE),),
        communicator_settings=(("exchange", "padded"),),
    )
)
register(
    Mode(
        "hybrid_rounds",
        "hybrid, the pairwise all-to-all in N-1 rounds of a shifted "
        "permutation, each worker receiving from one peer at a time "
        "(communicator.exchange_schedule='rounds')",
        (("variable_kinds", TABLES_SPARSE),),
        communicator_settings=(("exchange_schedule", "rounds"),),
    )
)
register(
    Mode(
        "hybrid_per_call",
        "hybrid, one exchange per table and lookup call (4 collectives "
        "each) instead of one fused exchange per step",
        (("variable_kinds", TABLES_SPARSE),),
        extended_settings=(("fuse_lookups", False),),
    )
)
register(
    Mode(
        "hybrid_hot",
        "hybrid with --hot_rows rows per table served by an all-reduce, "
        "chosen from running counts",
        (("variable_kinds", TABLES_SPARSE),),
        hot_rows=True,
    )
)
register(
    Mode(
        "hybrid_flat",
        "hybrid, one flat exchange among all workers "
        "(HybridStrategy(hierarchical=False))",
        (("variable_kinds", TABLES_SPARSE), ("hierarchical", False)),
    )
)
register(
    Mode(
        "hybrid_hierarchical",
        "hybrid, ids deduped per host and crossing hosts once, pushes "
        "summed in host (HybridStrategy(hierarchical=True)); flat where "
        "the hosts do not allow it",
        (("variable_kinds", TABLES_SPARSE), ("hierarchical", True)),
    )
)
