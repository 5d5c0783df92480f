"""`make_plan`: decides, from the variables alone, how each one travels."""

import dataclasses

from keras_hybrid.plan import kind_overrides
from keras_hybrid.sparse.row_partition import RowPartition


@dataclasses.dataclass(frozen=True)
class VariablePlan:
    """How one variable is stored and synchronized.

    Attributes:
        path: String. The Keras variable path, e.g. `"embedding/embeddings"`.
        kind: String. `"dense"` (replicated, all-reduced) or `"sparse"`
            (rows partitioned over shards, pulled and pushed by id).
        shape: Tuple of ints. Full shape.
        bytes: Int. Full size in bytes.
        source: String. Why this kind: `"layer"` (the table of a
            `keras.layers.Embedding`), `"default"`, `"override"`, or
            `"too few rows"` (fewer rows than shards, kept dense).
        partition: `RowPartition` for sparse variables, else `None`.
    """

    path: str
    kind: str
    shape: tuple
    bytes: int
    source: str
    partition: RowPartition | None = None

    def bytes_per_worker(self) -> int:
        """Bytes one worker stores: all of a dense variable, or the rows of
        its largest shard."""
        if self.partition is None:
            return self.bytes
        rows = self.partition.rows_on_shard(0)
        return self.bytes // self.shape[0] * rows


@dataclasses.dataclass(frozen=True)
class RoutingPlan:
    """The plan for all variables of a model; `str(plan)` is a table."""

    variables: tuple[VariablePlan, ...]
    num_shards: int

    def __getitem__(self, path: str) -> VariablePlan:
        for entry in self.variables:
            if entry.path == path:
                return entry
        raise KeyError(
            f"No variable {path!r} in the plan. Known: "
            f"{[v.path for v in self.variables]}"
        )

    def of_kind(self, kind: str) -> tuple[VariablePlan, ...]:
        return tuple(v for v in self.variables if v.kind == kind)

    def __str__(self) -> str:
        header = f"{'variable':40} {'kind':6} {'shape':>16} {'MB/worker':>10}"
        lines = [header, "-" * len(header)]
        for v in self.variables:
            shape = "x".join(str(d) for d in v.shape)
            lines.append(
                f"{v.path:40} {v.kind:6} {shape:>16} "
                f"{v.bytes_per_worker() / 2**20:10.2f}  ({v.source})"
            )
        return "\n".join(lines)


def make_plan(
    variables,
    num_shards: int,
    overrides: dict | None = None,
) -> RoutingPlan:
    """Classifies variables and lays out sparse ones over `num_shards`.

    Args:
        variables: Iterable of `(path, shape, dtype_size, sparse_source)`.
            `sparse_source` is `None` if nothing marks the variable sparse,
            else `"gradient"` or `"layer"`.
        num_shards: Int. Parameter-server shards (one per worker).
        overrides: Optional dict `{path or regex: "dense" | "sparse"}`.
            An exact path wins over regexes; a regex must full-match.

    Returns:
        A `RoutingPlan`.

    Raises:
        ValueError: If an override is malformed, two regexes match one
            variable, or a 0-d variable is made sparse.
    """
    overrides = kind_overrides.check_overrides(overrides)
    entries = []
    for path, shape, dtype_size, sparse_source in variables:
        shape = tuple(int(d) for d in shape)
        kind, source = (
            ("sparse", sparse_source) if sparse_source else ("dense", "default")
        )
        forced = kind_overrides.override_for(path, overrides)
        if forced is not None:
            kind, source = forced, "override"
        partition = None
        if kind == "sparse":
            if not shape:
                raise ValueError(
                    f"A scalar cannot be partitioned by rows. Received: "
                    f"{path!r} with shape () made sparse."
                )
            if shape[0] < num_shards:
                kind, source = "dense", "too few rows"
            else:
                partition = RowPartition.create(shape[0], num_shards)
        size = dtype_size
        for d in shape:
            size *= d
        entries.append(VariablePlan(path, kind, shape, size, source, partition))
    return RoutingPlan(tuple(entries), num_shards)
