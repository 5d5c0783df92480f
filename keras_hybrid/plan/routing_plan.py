"""`make_plan`: decides, from what is known of each variable, how it travels.

A pure function of the variables' facts (`VariableFacts`), the number of
shards, the user's overrides and the link: `HybridStrategy.plan` is its
result, and the strategy places variables as it says.
"""

import dataclasses
import textwrap

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
# How `str(RoutingPlan)` is laid out: every line fits in `WIDTH` columns.
WIDTH = 100
_CHOICE = {"sparse": "partitioned", "dense": "replicated"}


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
        reason: String. The choice, the figure that decided it and what
            the variable is, in words.
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
class DynamicTablePlan:
    """The rows of a `DynamicEmbedding`: each worker holds up to
    `shape[0]` rows, of the keys it owns.

    Attributes:
        path: String. The rows' variable path.
        shape: Tuple of ints. Rows and width on each worker (capacity).
        bytes: Int. Bytes of the rows on each worker.
        reason: String. Where keys live and how they are admitted.
        kind: `"dynamic"`.
    """

    path: str
    shape: tuple
    bytes: int
    reason: str = ""
    kind: str = "dynamic"

    def bytes_per_worker(self) -> int:
        return self.bytes


@dataclasses.dataclass(frozen=True)
class RoutingPlan:
    """The plan for all variables of a model; `str(plan)` is a table.
    `dynamic` lists the tables of `DynamicEmbedding` layers, which the
    plan does not place: each worker holds its own keys' rows."""

    variables: tuple[VariablePlan, ...]
    num_shards: int
    dynamic: tuple[DynamicTablePlan, ...] = ()

    def __getitem__(self, path: str) -> VariablePlan | DynamicTablePlan:
        for entry in self.variables + self.dynamic:
            if entry.path == path:
                return entry
        raise KeyError(
            f"No variable {path!r} in the plan. Known: "
            f"{[v.path for v in self.variables + self.dynamic]}"
        )

    def of_kind(self, kind: str) -> tuple:
        return tuple(v for v in self.variables + self.dynamic if v.kind == kind)

    def __str__(self) -> str:
        header = f"{'kind':6} {'shape':>13} {'MB/worker':>9}  variable"
        lines = [header, "-" * WIDTH]
        room = WIDTH - len(header) + len("variable")
        for v in self.variables + self.dynamic:
            shape = "x".join(str(d) for d in v.shape) or "()"
            kind = f"{v.kind:6}"
            # "dynamic" takes a column of the shape's.
            width = 13 - (len(kind) - 6)
            lines.append(
                f"{kind} {shape:>{width}} {v.bytes_per_worker() / 2**20:9.2f}"
                f"  {_elided(v.path, room)}"
            )
            lines += textwrap.wrap(
                v.reason,
                WIDTH,
                initial_indent=" " * 4,
                subsequent_indent=" " * 6,
            )
            if getattr(v, "partition", None) is not None:
                lines.append(f"    rows per worker {_rows(v)}")
        return "\n".join(lines)


def _elided(text: str, width: int) -> str:
    """`text`, with its middle elided to fit `width` columns."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2) :]


def _rows(entry: VariablePlan) -> str:
    """Rows per worker of a table, listed for up to 8 workers."""
    rows = entry.rows_per_worker()
    virtual = f"({entry.partition.num_virtual} virtual shards)"
    if len(rows) <= 8:
        return " ".join(str(r) for r in rows) + f" {virtual}"
    return f"{min(rows)} to {max(rows)} on {len(rows)} workers {virtual}"


def make_plan(
    variables,
    num_shards: int,
    overrides: dict | None = None,
    link: cost_rule.Link | None = None,
    min_rows: int | None = None,
    workers: int | None = None,
    traced: bool = False,
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
        traced: Bool. Whether a step was traced (and placement decided):
            a table still provisional then is one no step reads, and its
            reason says so.

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
        kind, source, figure, cost = _decide(facts, workers, link, min_rows)
        forced = kind_overrides.override_for(facts.path, overrides)
        if forced is None and facts.keras_path:
            forced = kind_overrides.override_for(facts.keras_path, overrides)
        if forced is not None:
            kind, source, figure = forced, "override", "set by variable_kinds"
        partition = None
        if kind == "sparse":
            if not facts.shape:
                raise ValueError(
                    f"A scalar cannot be partitioned by rows. Received: "
                    f"{facts.path!r} with shape () made sparse."
                )
            if facts.shape[0] < min_rows:
                kind, source = "dense", "too few rows"
                figure = _too_few(facts.shape[0], num_shards, min_rows)
            else:
                partition = RowPartition.create(facts.shape[0], num_shards)
        reason = _reason(kind, source, figure, facts, traced)
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


def _reason(kind, source, figure, facts, traced) -> str:
    """The plan's reason: the choice, the figure that decided it and what
    the variable is."""
    if source == "provisional":
        choice = "unused" if traced else "provisional"
    else:
        choice = _CHOICE[kind]
    return f"{choice}: {figure} ({facts.describe()})"


def _too_few(rows: int, num_shards: int, min_rows: int) -> str:
    """Why a table is kept dense for having fewer than `min_rows`."""
    noun = "row" if rows == 1 else "rows"
    if min_rows == num_shards:
        return f"{rows} {noun} for {num_shards} workers"
    return f"{rows} {noun} for up to {min_rows} workers (elastic --max-np)"


def _decide(facts: VariableFacts, num_shards: int, link, min_rows: int):
    """`(kind, source, figure, cost)` of one variable, overrides aside,
    weighed for `num_shards` workers."""
    size = _size(facts.bytes)
    if not facts.shape:
        return "dense", "not a table", size, None
    if facts.shape[0] < min_rows:
        figure = _too_few(facts.shape[0], num_shards, min_rows)
        return "dense", "too few rows", figure, None
    if facts.blocker:
        return "dense", "blocked", facts.blocker, None
    if facts.use == "whole":
        return "dense", "read whole", f"{size}, {facts.whole_reader}", None
    if facts.use == "unseen":
        if facts.candidate:
            figure = "no step reads it yet, placed when one does"
            return "sparse", "provisional", figure, None
        if not cost_rule.may_pay(
            facts.shape[0], facts.row_bytes, num_shards, link
        ):
            why = f"{size}, partitioning cannot pay on {num_shards} workers"
            return "dense", "small", why, None
        return "dense", "not a table", f"{size}, gathered nowhere", None
    cost = cost_rule.table_cost(
        facts.shape[0], facts.row_bytes, facts.lookups, num_shards, link
    )
    source = "gathered" if cost.partition else "cost"
    kind = "sparse" if cost.partition else "dense"
    return kind, source, cost.summary(), cost


def _size(nbytes: int) -> str:
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.1f} MB"
    if nbytes >= 1e3:
        return f"{nbytes / 1e3:.1f} kB"
    return f"{nbytes} B"
