"""`make_plan`: decides, from what is known of each variable, how it travels.

A pure function of the variables' facts (`VariableFacts`), the number of
shards, the user's overrides and the link: `HybridStrategy.plan` is its
result, and the strategy places variables as it says.
"""

import dataclasses

from keras_hybrid.plan import cost_rule
from keras_hybrid.plan import kind_overrides
from keras_hybrid.plan.variable_facts import VariableFacts
from keras_hybrid.sharding.row_partition import RowPartition

# Why a variable has its kind (`VariablePlan.source`).
SOURCES = (
    "override",  # variable_kinds
    "provisional",  # a possible table, decided when a step is traced
    "gathered",  # read only by gathers and cheaper partitioned
    "cost",  # read only by gathers but cheaper replicated
    "read whole",  # some op reads the whole value
    "blocked",  # a regularizer or constraint that is not row by row
    "small",  # partitioning cannot pay on this link
    "too few rows",  # fewer rows than shards
    "not a table",  # scalar, or never looked up
)


@dataclasses.dataclass(frozen=True)
class VariablePlan:
    """How one variable is stored and synchronized.

    Attributes:
        path: String. The variable's unique path (`variable_kinds` key).
        kind: String. `"dense"` (replicated, all-reduced) or `"sparse"`
            (rows partitioned over shards, pulled and pushed by id).
        shape: Tuple of ints. Full shape.
        bytes: Int. Full size in bytes.
        source: String, one of `SOURCES`.
        reason: String. The decision in words, with the figures.
        partition: `RowPartition` for sparse variables, else `None`.
        cost: `cost_rule.TableCost` where both choices were costed.
    """

    path: str
    kind: str
    shape: tuple
    bytes: int
    source: str
    reason: str = ""
    partition: RowPartition | None = None
    cost: cost_rule.TableCost | None = None

    def bytes_per_worker(self) -> int:
        """Bytes one worker stores: all of a dense variable, or the rows of
        its largest shard."""
        if self.partition is None:
            return self.bytes
        return self.bytes // self.shape[0] * max(self.rows_per_worker())

    def rows_per_worker(self) -> tuple[int, ...]:
        """Rows each worker stores: of a table, its shard; of a dense
        variable, all of them."""
        if self.partition is None:
            return (self.shape[0] if self.shape else 1,)
        part = self.partition
        return tuple(part.rows_on_shard(s) for s in range(part.num_shards))


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
        width = max([8] + [len(v.path) for v in self.variables])
        header = (
            f"{'variable':{width}} {'kind':6} {'shape':>14} {'MB/worker':>9} "
            f"{'sparse kB/step':>14} {'dense kB/step':>13}  reason"
        )
        lines = [header, "-" * len(header)]
        for v in self.variables:
            shape = "x".join(str(d) for d in v.shape)
            sparse = dense = "-"
            if v.cost is not None:
                sparse = f"{v.cost.sparse_bytes / 1e3:.1f}"
                dense = f"{v.cost.dense_bytes / 1e3:.1f}"
            lines.append(
                f"{v.path:{width}} {v.kind:6} {shape:>14} "
                f"{v.bytes_per_worker() / 2**20:9.2f} {sparse:>14} "
                f"{dense:>13}  {v.source}: {v.reason}"
            )
        for v in self.variables:
            if v.partition is not None:
                rows = " ".join(str(r) for r in v.rows_per_worker())
                lines.append(
                    f"{v.path}: rows per worker {rows} "
                    f"({v.partition.num_virtual} virtual shards)"
                )
        return "\n".join(lines)


def make_plan(
    variables,
    num_shards: int,
    overrides: dict | None = None,
    link: cost_rule.Link | None = None,
    min_rows: int | None = None,
    workers: int | None = None,
) -> RoutingPlan:
    """Decides the kind of each variable and lays out sparse ones.

    Args:
        variables: Iterable of `VariableFacts`.
        num_shards: Int. Parameter-server shards (one per worker).
        overrides: Optional dict `{path or regex: "dense" | "sparse"}`.
            An exact path wins over regexes; a regex must full-match.
        link: Optional `cost_rule.Link`. Defaults to `Link()`.
        min_rows: Optional int. A variable with fewer rows stays dense,
            overrides included. Defaults to `num_shards`. An elastic job
            passes its most workers (`--max-np`): a resize spreads every
            partitioned table over up to that many, each holding at
            least one row.
        workers: Optional int. The workers the cost rule weighs a table's
            kind for. Defaults to `num_shards`. An elastic job passes
            `--max-np`, so that every process, a joiner counted as one
            worker until admitted included, decides the same kinds.

    Returns:
        A `RoutingPlan`.

    Raises:
        ValueError: If an override is malformed, two regexes match one
            variable, or a 0-d variable is made sparse.
    """
    overrides = kind_overrides.check_overrides(overrides)
    link = link or cost_rule.Link()
    min_rows = max(num_shards, min_rows or 0)
    workers = workers or num_shards
    entries = []
    for facts in variables:
        kind, source, reason, cost = _decide(facts, workers, link, min_rows)
        forced = kind_overrides.override_for(facts.path, overrides)
        if forced is None and facts.keras_path:
            forced = kind_overrides.override_for(facts.keras_path, overrides)
        if forced is not None:
            kind, source, reason = forced, "override", "variable_kinds"
        partition = None
        if kind == "sparse":
            if not facts.shape:
                raise ValueError(
                    f"A scalar cannot be partitioned by rows. Received: "
                    f"{facts.path!r} with shape () made sparse."
                )
            if facts.shape[0] < min_rows:
                kind, source = "dense", "too few rows"
                reason = _too_few(facts.shape[0], num_shards, min_rows)
            else:
                partition = RowPartition.create(facts.shape[0], num_shards)
        entries.append(
            VariablePlan(
                facts.path,
                kind,
                tuple(facts.shape),
                facts.bytes,
                source,
                reason,
                partition,
                cost,
            )
        )
    return RoutingPlan(tuple(entries), num_shards)


def _too_few(rows: int, num_shards: int, min_rows: int) -> str:
    """The reason of a table kept dense for having fewer than `min_rows`."""
    if min_rows == num_shards:
        return f"{rows} rows for {num_shards} shards"
    return f"{rows} rows for up to {min_rows} shards (elastic --max-np)"


def _decide(facts: VariableFacts, num_shards: int, link, min_rows: int):
    """`(kind, source, reason, cost)` of one variable, overrides aside,
    weighed for `num_shards` workers."""
    if not facts.shape:
        return "dense", "not a table", "a scalar", None
    if facts.shape[0] < min_rows:
        reason = _too_few(facts.shape[0], num_shards, min_rows)
        return "dense", "too few rows", reason, None
    if facts.blocker:
        return "dense", "blocked", facts.blocker, None
    if facts.use == "whole":
        return "dense", "read whole", facts.whole_reader, None
    if facts.use == "unseen":
        if facts.candidate:
            return (
                "sparse",
                "provisional",
                "decided when a step is traced",
                None,
            )
        if not cost_rule.may_pay(
            facts.shape[0], facts.row_bytes, num_shards, link
        ):
            size = f"{facts.bytes / 1e3:.1f} kB"
            why = f"{size}: partitioning cannot pay on {num_shards} workers"
            return "dense", "small", why, None
        return "dense", "not a table", "never looked up by id", None
    cost = cost_rule.table_cost(
        facts.shape[0], facts.row_bytes, facts.lookups, num_shards, link
    )
    source = "gathered" if cost.partition else "cost"
    kind = "sparse" if cost.partition else "dense"
    return kind, source, cost.summary(), cost
