"""`Profile`: what one short single-process run says about a model.

A profile holds, per trainable variable, its size and whether its gradient
is `IndexedSlices` (a table); per table and lookup call, the lookups per
sample and the mean number of unique ids per batch at several batch
sizes; and the
compute time of a train step at those batch sizes. The simulator needs
nothing else. `unique_ids(batch)` follows Heaps' law, `u = K n^beta` for
`n` lookups, fitted in log-log space and capped by the rows and by `n`.
"""

import dataclasses
import json
import math

import numpy as np

KINDS = ("dense", "sparse")
FORMAT = "keras_hybrid.costs.profile/1"


@dataclasses.dataclass(frozen=True)
class VariableStats:
    """One trainable variable, in the order the optimizer sees them.

    A table may be looked up by several calls in one step (a sampled
    softmax looks its weights up for the targets and for the negatives);
    each call pulls and pushes its own unique ids, so counts are per call.

    Attributes:
        path: String. Keras variable path.
        kind: String, one of `KINDS`: `"sparse"` if its gradient is
            `IndexedSlices` (an embedding table), else `"dense"`.
        shape: Tuple of ints.
        dtype_bytes: Int. Bytes per element.
        index_bytes: Int. Bytes per id of its `IndexedSlices` gradient (0
            for dense variables).
        lookups_per_sample: Tuple of floats. Ids looked up per sample, one
            entry per lookup call (empty if dense).
        batch_sizes: Tuple of ints. Batch sizes measured (empty if dense).
        unique: Tuple of tuples of floats. Per call, the mean unique ids
            per batch at each of `batch_sizes`.
        table_unique: Tuple of floats. The mean unique ids of all calls
            together (the ids of the table's gradient) at each of
            `batch_sizes`, or empty if not measured. The fused exchange
            dedupes a table's calls together, so it moves these.
        dynamic: Bool. Whether it is a `DynamicEmbedding`'s table: its ids
            are keys (counted at the layer's input, admitted or not, as
            its exchange moves them), `shape[0]` is its capacity per
            worker, and each key travels with its lookup count.
    """

    path: str
    kind: str
    shape: tuple
    dtype_bytes: int
    index_bytes: int = 0
    lookups_per_sample: tuple = ()
    batch_sizes: tuple = ()
    unique: tuple = ()
    table_unique: tuple = ()
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"`kind` must be one of {KINDS}. Received: kind={self.kind!r}"
                f" for {self.path!r}"
            )
        if len(self.lookups_per_sample) != len(self.unique) or any(
            len(u) != len(self.batch_sizes) for u in self.unique
        ):
            raise ValueError(
                "`unique` needs one count per batch size for each lookup "
                f"call. Received: {len(self.lookups_per_sample)} calls, "
                f"batch_sizes={self.batch_sizes}, unique={self.unique} "
                f"for {self.path!r}"
            )
        if self.table_unique and len(self.table_unique) != len(
            self.batch_sizes
        ):
            raise ValueError(
                "`table_unique` needs one count per batch size. Received: "
                f"batch_sizes={self.batch_sizes}, "
                f"table_unique={self.table_unique} for {self.path!r}"
            )
        if self.kind == "sparse" and not (self.batch_sizes and self.unique):
            raise ValueError(
                f"Table {self.path!r} needs unique-id counts for at least "
                "one lookup call and one batch size."
            )

    @property
    def rows(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.dtype_bytes

    @property
    def row_bytes(self) -> int:
        return self.bytes // self.rows

    @property
    def calls(self) -> int:
        return len(self.lookups_per_sample)

    def lookups(self, batch_size: int, call: int | None = None) -> int:
        """Ids looked up (duplicates included) by a batch: by one call, or
        by all calls (the rows of the table's `IndexedSlices` gradient)."""
        calls = range(self.calls) if call is None else [call]
        return sum(
            int(round(self.lookups_per_sample[c] * batch_size)) for c in calls
        )

    def heaps_fit(self, call: int = 0) -> tuple[float, float]:
        """`(K, beta)` of `u = K n^beta` through one call's points."""
        n = [self.lookups(b, call) for b in self.batch_sizes]
        return _heaps_fit(n, self.unique[call])

    def unique_ids(self, batch_size: int, call: int = 0) -> float:
        """Expected unique ids of one call in a batch of `batch_size`."""
        n = self.lookups(batch_size, call)
        k, beta = self.heaps_fit(call)
        return float(min(k * n**beta, n, self.rows))

    def table_unique_ids(self, batch_size: int) -> float:
        """Expected unique ids of all calls together in a batch of
        `batch_size`: what a table's fused exchange moves.

        Without `table_unique` (a profile that does not record it),
        the sum over calls, which counts an id shared by two calls twice.
        """
        if self.calls == 1:
            return self.unique_ids(batch_size, 0)
        if not self.table_unique:
            apart = sum(
                self.unique_ids(batch_size, c) for c in range(self.calls)
            )
            return float(min(apart, self.rows))
        n = self.lookups(batch_size)
        points = [self.lookups(b) for b in self.batch_sizes]
        k, beta = _heaps_fit(points, self.table_unique)
        return float(min(k * n**beta, n, self.rows))


def _heaps_fit(lookups, unique) -> tuple[float, float]:
    """`(K, beta)` of `u = K n^beta` through the points (least squares in
    log-log space; `beta = 1` through a single point)."""
    n, u = np.array(lookups, float), np.array(unique, float)
    if len(n) == 1:
        return float(u[0] / n[0]), 1.0
    beta, log_k = np.polyfit(np.log(n), np.log(u), 1)
    return float(math.exp(log_k)), float(beta)


@dataclasses.dataclass(frozen=True)
class Profile:
    """Statistics of one model, from `profiler.profile_model`.

    Attributes:
        name: String. What was profiled (a workload or model name).
        variables: Tuple of `VariableStats`, in optimizer order.
        batch_sizes: Tuple of ints. Batch sizes timed.
        compute_seconds: Tuple of floats. Median train-step time at each.
    """

    name: str
    variables: tuple
    batch_sizes: tuple
    compute_seconds: tuple

    def __post_init__(self) -> None:
        if len(self.batch_sizes) != len(self.compute_seconds):
            raise ValueError(
                "`batch_sizes` and `compute_seconds` must have the same "
                f"length. Received: {len(self.batch_sizes)} and "
                f"{len(self.compute_seconds)}"
            )

    def of_kind(self, kind: str) -> tuple:
        return tuple(v for v in self.variables if v.kind == kind)

    def compute_time(self, batch_size: int) -> float:
        """Seconds of one step, linear in the batch through the timed
        points (a least-squares line; the one point if only one), and
        never below the fastest step timed."""
        b = np.array(self.batch_sizes, float)
        t = np.array(self.compute_seconds, float)
        if len(b) == 1:
            return float(t[0] * batch_size / b[0])
        slope, intercept = np.polyfit(b, t, 1)
        return float(max(intercept + slope * batch_size, t.min()))

    def to_json(self) -> str:
        body = dataclasses.asdict(self)
        return json.dumps({"format": FORMAT, **body}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        """Reads `to_json`'s output.

        Raises:
            ValueError: If `text` is not a profile of this format.
        """
        body = json.loads(text)
        found = body.get("format") if isinstance(body, dict) else None
        if found != FORMAT:
            raise ValueError(
                f"Not a simulator profile (format {FORMAT!r}). Received "
                f"format: {found!r}"
            )
        variables = tuple(
            VariableStats(
                **{
                    **v,
                    "shape": tuple(v["shape"]),
                    "lookups_per_sample": tuple(v["lookups_per_sample"]),
                    "batch_sizes": tuple(v["batch_sizes"]),
                    "unique": tuple(tuple(u) for u in v["unique"]),
                    "table_unique": tuple(v.get("table_unique", ())),
                }
            )
            for v in body["variables"]
        )
        return cls(
            name=body["name"],
            variables=variables,
            batch_sizes=tuple(body["batch_sizes"]),
            compute_seconds=tuple(body["compute_seconds"]),
        )
