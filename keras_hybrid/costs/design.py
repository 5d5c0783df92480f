"""`Design`: the options of the hybrid's sparse exchange that the cost
model prices.

Four options change how the hybrid moves rows, and a fifth when it
sends them. The defaults are the
exchange the package runs outside elastic jobs, so that a prediction with
default options prices the code as it runs:

- `padding`, the padded all-to-all: `"per_pair"` (default: each block of
  an all-to-all padded to its own ladder step, the TF engine's pairwise
  exchange); `"max_pair"` (every block padded to the ladder step of the
  largest pair count: one `AllToAllV2`, which elastic jobs and the
  benchmark's `hybrid_padded` mode run); `"exact"` (no padding; modeled,
  not built);
- `fused`, the fused exchange: `True` (default: one count, id, pull and
  push exchange per step for all tables and lookup calls,
  `sparse.fused_exchange`); `False` is the exchange per table and lookup
  call, which elastic jobs, lookups whose ids depend on another lookup's
  rows and the benchmark's `hybrid_per_call` mode run;
- `hierarchical`, the hierarchical exchange (`HybridStrategy(
  hierarchical=...)`, on where this model says the sparse part pays):
  `False` is the flat all-to-alls over all workers and the flat ring
  all-reduce; `True` dedupes ids per host, crosses host pairs once per
  local rank and sums pushes per host (`sparse.hierarchical_exchange`),
  and reduces dense gradients in two levels (`comm.host_all_reduce`;
  modeled where it beats the flat ring, run by the code whenever the
  hierarchical exchange is on);
- `hot_rows`, hot rows (off by default: `HybridStrategy(hot_rows=K)`):
  the K most requested rows of every table reach every worker by one
  all-reduce of their values and one of their gradients per step;
- `schedule`, how the TF engine issues a pairwise all-to-all's sends
  (`TFCommunicator.exchange_schedule`): `"concurrent"` (default: all at
  once) or `"rounds"` (`N - 1` rounds of a shifted permutation, one
  sender per receiver at a time; the benchmark's `hybrid_rounds`). It
  changes no byte: only latency and what a shallow port buffer costs
  (`costs.port_buffer`).

All but `padding="exact"` are built. `padding="per_pair"`, `fused=True`,
`hierarchical=False`, `hot_rows=0`, `schedule="concurrent"` is the code
as it runs by default outside elastic jobs.
"""

import dataclasses

PADDINGS = ("max_pair", "per_pair", "exact")
SCHEDULES = ("concurrent", "rounds")


@dataclasses.dataclass(frozen=True)
class Design:
    """Options of the simulated hybrid exchange.

    Args:
        padding: String, one of `PADDINGS`. How all-to-all blocks are
            padded: `"per_pair"` (default: each block to its own capacity
            ladder step), `"max_pair"` (every block to the ladder step of
            the largest pair count of the step: one `AllToAllV2`, as in
            elastic jobs) or `"exact"` (no padding).
        fused: Bool. If `True` (default), one count exchange, one id
            exchange, one pull and one push (per dtype) per step carry
            every table and lookup call: a table's calls deduped
            together, each pair's block packing all tables and padded as
            `padding` says; if `False`, each table and call has its own
            four all-to-alls (elastic jobs, `hybrid_per_call`).
        hierarchical: Bool. If `True`, the k workers of a host dedupe
            their ids: each all-to-all becomes an in-host stage among the
            k workers and a cross-host stage among the workers of one
            local rank (one per host), which carries the host's unique
            ids once; pushes are summed per host before they cross. The
            dense all-reduce becomes reduce-scatter in the host, ring
            all-reduce across hosts, all-gather in the host.
        hot_rows: Int >= 0. Rows of each partitioned table (the most
            frequent ones) replicated on every worker: their lookups stay
            local, and their gradients (`hot_rows` rows per table) join
            the dense all-reduce.
        zipf: Float > 0. Exponent `s` of the id frequencies,
            `p(k) ~ 1 / (k + 1)**s` (the benchmark's `--zipf`), used only
            to split unique ids into hot and cold when `hot_rows > 0`.
        schedule: String, one of `SCHEDULES`. `"concurrent"` (default):
            a pairwise all-to-all sends to all peers at once;
            `"rounds"`: in `N - 1` rounds, each waiting for the one
            before (a round trip per round, one sender per receiver).

    Raises:
        ValueError: If `padding` or `schedule` is unknown, `hot_rows < 0`
            or `zipf <= 0`.
    """

    padding: str = "per_pair"
    fused: bool = True
    hierarchical: bool = False
    hot_rows: int = 0
    zipf: float = 1.1
    schedule: str = "concurrent"

    def __post_init__(self) -> None:
        if self.padding not in PADDINGS:
            raise ValueError(
                f"`padding` must be one of {PADDINGS}. Received: "
                f"padding={self.padding!r}"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"`schedule` must be one of {SCHEDULES}. Received: "
                f"schedule={self.schedule!r}"
            )
        if isinstance(self.hot_rows, bool) or not isinstance(
            self.hot_rows, int
        ):
            raise TypeError(
                f"`hot_rows` must be an int. Received: {self.hot_rows!r}"
            )
        if self.hot_rows < 0:
            raise ValueError(
                f"`hot_rows` must be >= 0. Received: {self.hot_rows}"
            )
        if not self.zipf > 0:
            raise ValueError(f"`zipf` must be > 0. Received: {self.zipf!r}")

    @property
    def is_default(self) -> bool:
        """Whether this is the exchange the package runs by default."""
        return self == Design(zipf=self.zipf)

    def describe(self) -> str:
        """One line naming the options that differ from the default."""
        built, planned = [], []
        if self.padding == "max_pair":
            built.append("max-pair padding (elastic jobs, hybrid_padded)")
        elif self.padding == "exact":
            planned.append("exact sizes")
        if not self.fused:
            built.append("one exchange per lookup (elastic, hybrid_per_call)")
        if self.hierarchical:
            built.append(
                "hierarchical exchange (HybridStrategy(hierarchical=))"
            )
        if self.hot_rows:
            built.append(
                f"{self.hot_rows} hot rows, zipf {self.zipf} "
                "(HybridStrategy(hot_rows=))"
            )
        if self.schedule == "rounds":
            built.append("all-to-alls in rounds (hybrid_rounds)")
        if not built and not planned:
            return "the default exchange (as built)"
        parts = list(built)
        if planned:
            parts.append("design, modeled not built: " + ", ".join(planned))
        return "; ".join(parts)

    @classmethod
    def all_options(cls, hot_rows: int = 1024, zipf: float = 1.1) -> "Design":
        """Every option on: exact sizes, the fused exchange, the
        hierarchical exchange and `hot_rows` hot rows."""
        return cls("exact", True, True, hot_rows, zipf)
