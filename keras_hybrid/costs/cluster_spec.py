"""`ClusterSpec`: the machines a simulated job runs on, and their links."""

import dataclasses
import re

# tc(8) units: a rate in bits per second, a time in seconds.
_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*"


def parse_rate(text: str) -> float:
    """Parses a tc-style rate (`"10gbit"`, `"100mbit"`, `"1gbps"`).

    Returns:
        Float. Bytes per second.

    Raises:
        ValueError: If `text` is not a positive number with a rate unit.
    """
    match = re.fullmatch(_NUMBER, str(text).lower())
    if not match or match.group(2) not in _RATE_UNITS:
        raise ValueError(
            "A rate must be a number and one of the units "
            f"{sorted(_RATE_UNITS)} (tc syntax, e.g. '10gbit'). "
            f"Received: {text!r}"
        )
    bits = float(match.group(1)) * _RATE_UNITS[match.group(2)]
    if bits <= 0:
        raise ValueError(f"A rate must be positive. Received: {text!r}")
    return bits / 8


def parse_time(text: str) -> float:
    """Parses a tc-style time (`"50us"`, `"1ms"`, `"0"`) into seconds.

    Raises:
        ValueError: If `text` is not a number >= 0 with a time unit.
    """
    match = re.fullmatch(_NUMBER, str(text).lower())
    unit = match.group(2) if match else None
    if match and unit == "" and float(match.group(1)) == 0:
        return 0.0
    if not match or unit not in _TIME_UNITS:
        raise ValueError(
            "A time must be a number and one of the units "
            f"{sorted(_TIME_UNITS)} (tc syntax, e.g. '50us'). "
            f"Received: {text!r}"
        )
    return float(match.group(1)) * _TIME_UNITS[unit]


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """Workers (one per accelerator), hosts, and the two kinds of link.

    Workers are numbered host by host: host `h` runs workers
    `h * accelerators_per_host` to `(h + 1) * accelerators_per_host - 1`.
    Workers on one host talk over the intra-host link (PCIe, NVLink, or
    shared memory); every host has one network interface of
    `inter_bandwidth` shared by all its workers. Links are full duplex.

    Args:
        workers: Int. Worker processes (replicas) in the job.
        accelerators_per_host: Int. Workers per host; must divide
            `workers`. Defaults to `1` (every worker on its own host, as in
            the network-namespace emulation).
        inter_bandwidth: Float. Bytes per second of a host's interface.
            Defaults to `1.25e9` (10 Gbit/s).
        inter_latency: Float. Seconds of one message between hosts.
            Defaults to `50e-6`.
        intra_bandwidth: Float. Bytes per second between two workers of
            one host. Defaults to `10e9`.
        intra_latency: Float. Seconds of one message inside a host.
            Defaults to `5e-6`.

    Example:

    ```python
    spec = ClusterSpec(workers=64, accelerators_per_host=8,
                       inter_bandwidth=parse_rate("25gbit"))
    spec.hosts   # 8
    ```

    Raises:
        ValueError: If a count is not positive, `accelerators_per_host`
            does not divide `workers`, or a bandwidth or latency is not
            positive (latencies may be 0).
    """

    workers: int
    accelerators_per_host: int = 1
    inter_bandwidth: float = 1.25e9
    inter_latency: float = 50e-6
    intra_bandwidth: float = 10e9
    intra_latency: float = 5e-6

    def __post_init__(self) -> None:
        for name in ("workers", "accelerators_per_host"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int. Received: {name}={value!r}"
                )
            if value < 1:
                raise ValueError(
                    f"`{name}` must be >= 1. Received: {name}={value}"
                )
        if self.workers % self.accelerators_per_host:
            raise ValueError(
                "`accelerators_per_host` must divide `workers`. Received: "
                f"workers={self.workers}, accelerators_per_host="
                f"{self.accelerators_per_host}"
            )
        for name in ("inter_bandwidth", "intra_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"`{name}` must be > 0 bytes/s. Received: "
                    f"{name}={getattr(self, name)!r}"
                )
        for name in ("inter_latency", "intra_latency"):
            if not getattr(self, name) >= 0:
                raise ValueError(
                    f"`{name}` must be >= 0 seconds. Received: "
                    f"{name}={getattr(self, name)!r}"
                )

    @property
    def hosts(self) -> int:
        return self.workers // self.accelerators_per_host

    def with_workers(self, workers: int) -> "ClusterSpec":
        """The same hosts and links with `workers` workers; hosts are
        filled to `accelerators_per_host` (fewer if `workers` is smaller).
        """
        per_host = min(self.accelerators_per_host, workers)
        return dataclasses.replace(
            self, workers=workers, accelerators_per_host=per_host
        )

    def ring_link(self) -> tuple[float, float]:
        """(latency, bandwidth) of the slowest hop of a host-ordered ring:
        the host interface as soon as there are two hosts (its latency;
        the lower of the two bandwidths if hosts also have several
        workers, since every hop of a ring step moves the same bytes)."""
        if self.hosts > 1:
            bandwidth = self.inter_bandwidth
            if self.accelerators_per_host > 1:
                bandwidth = min(bandwidth, self.intra_bandwidth)
            return self.inter_latency, bandwidth
        return self.intra_latency, self.intra_bandwidth
