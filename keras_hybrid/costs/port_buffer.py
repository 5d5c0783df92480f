"""`PortBuffer`: a network port's queue, and what overrunning it costs.

Each host reaches the network through one port (a switch port, or the
token bucket of an emulated link) that queues at most `buffer_bytes`
and drains at the host link's rate. When an exchange starts, every TCP
flow into the busiest port puts up to `flight_bytes` (its whole block if
that is smaller) into the queue at once. The model prices two outcomes,
each at one TCP retransmission timeout (`rto`, Linux's minimum: 200 ms)
for the exchange, since every worker of a collective waits for its
slowest pair:

- **loss**: the flows' burst exceeds the buffer; the port drops packets,
  and a flow whose lost packets are at the tail of its block has no later
  packets to signal the loss, so it waits for the timeout;
- **delay beyond the timeout**: the queued burst takes longer than `rto`
  to drain, so TCP times out although nothing was lost (spurious
  retransmissions, and the window restarts).

Flows into the busiest port, per exchange (k workers per host, H hosts,
N workers):

| exchange | flows | block per flow |
| --- | --- | --- |
| ring all-reduce of D | 1 (the ring's previous hop) | D / N |
| ring all-gather of a block c | 1 | c |
| pairwise all-to-all of S per worker, concurrent | k (N - k) | S / (N - 1) |
| the same in rounds (`Design.schedule="rounds"`) | k | S / (N - 1) |
| hierarchical cross-host stage | k (H - 1), or k in rounds | S / (H - 1) |

The hierarchical exchange's in-host stage crosses no port; `ps` pushes
and pulls are not priced here (0). With one host nothing crosses a port.

Validity: checked against emulated runs of 2, 4 and 8 hosts of one
worker (1 to 7 flows into a port, blocks of 1 to 150 kB per flow,
buffers of 75 kB to 1.9 MB; docs/simulator.md). There an exchange loses
at most once per flow before the others finish. With many more flows
into a port than that, retransmissions can be lost again and TCP backs
off (2 `rto`, 4 `rto`, ...), so the price is a lower bound there.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class PortBuffer:
    """A port's queue and the TCP timeout that losses cost.

    Args:
        buffer_bytes: Float. Bytes the port queues before it drops: a
            switch's buffer per port, or an emulated link's token-bucket
            limit (`emulation.network.tbf_limit_bytes`).
        flight_bytes: Float. Bytes one flow puts into the port at once
            when an exchange starts (its whole block if that is smaller).
            Fitted: the emulated runs' drops allow 28 to 57 kB (4 workers
            dropped at an 84 kB buffer, 8 workers nothing at 401 kB);
            `40_000` is the middle of that range on a log scale. Defaults
            to `40_000`.
        rto: Float. Seconds of a TCP retransmission timeout. Defaults to
            `0.2` (Linux's minimum RTO).

    Example:

    ```python
    port = PortBuffer(buffer_bytes=512e3)
    port.exchange_seconds(exchange, spec)   # 0.0 or port.rto
    ```

    Raises:
        ValueError: If `buffer_bytes` or `flight_bytes` is not > 0 or
            `rto` is < 0.
    """

    buffer_bytes: float
    flight_bytes: float = 40_000.0
    rto: float = 0.2

    def __post_init__(self) -> None:
        for name in ("buffer_bytes", "flight_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"`{name}` must be > 0 bytes. Received: "
                    f"{name}={getattr(self, name)!r}"
                )
        if not self.rto >= 0:
            raise ValueError(
                f"`rto` must be >= 0 seconds. Received: rto={self.rto!r}"
            )

    def flows(
        self, exchange, spec, schedule: str = "concurrent"
    ) -> tuple[int, float]:
        """Flows into the busiest port and bytes per flow (module doc).

        Args:
            exchange: An `Exchange` (`costs.exchange`).
            spec: The `ClusterSpec`.
            schedule: String, one of `design.SCHEDULES`: how a pairwise
                all-to-all's sends are issued.
        """
        n, k, hosts = spec.workers, spec.accelerators_per_host, spec.hosts
        if hosts < 2 or exchange.scope == "intra" or exchange.kind == "ps":
            return 0, 0.0
        if exchange.kind == "all_reduce":
            return 1, exchange.wire / n
        if exchange.kind == "all_gather":
            return 1, exchange.wire
        peers = hosts - 1 if exchange.scope == "inter" else n - 1
        off_host = k * (hosts - 1) if exchange.scope == "inter" else k * (n - k)
        flows = k if schedule == "rounds" else off_host
        return flows, exchange.wire / peers

    def exchange_seconds(
        self, exchange, spec, schedule: str = "concurrent"
    ) -> float:
        """Seconds of timeouts `exchange` waits for: `rto` or 0."""
        flows, block = self.flows(exchange, spec, schedule)
        if not flows or not block:
            return 0.0
        burst = flows * min(block, self.flight_bytes)
        lost = burst > self.buffer_bytes
        late = min(burst, self.buffer_bytes) / spec.inter_bandwidth > self.rto
        return self.rto if lost or late else 0.0

    def describe(self) -> str:
        """One line stating the buffer and the timeout."""
        return (
            f"{self.buffer_bytes / 1e3:g} kB per port, flows put "
            f"{self.flight_bytes / 1e3:g} kB each at once, TCP timeout "
            f"{1e3 * self.rto:g} ms per exchange that overruns it"
        )
