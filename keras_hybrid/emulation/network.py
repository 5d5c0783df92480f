"""An emulated network: one network namespace per worker, on one bridge.

```
 ns kh<pid>n0 (10.213.0.1) --veth-- bridge kh<pid>br --veth-- ns kh<pid>n1 ...
```

Each worker's interface sends at most `rate`, with `delay` added to every
packet it sends (`tc qdisc ... netem rate R delay D`); the bridge end of
each veth pair is limited to `rate` too, so a worker also receives at most
`rate`. Traffic never leaves the machine: the bridge has no address and
no uplink. Needs root (`ip netns`, `ip link`, `tc`).

When the kernel has no `sch_netem` (some containers), a zero delay is
still possible: the rate limit then uses a token bucket (`tbf`). A
non-zero delay without netem is an error, not a silent rate-only run.

`EmulatedNetwork` removes everything it created on exit, also after an
exception, Ctrl-C or SIGTERM.

Example:

```python
spec = netem.parse("10gbit:50us")
with netem.EmulatedNetwork(4, spec) as net:
    argv = net.wrap(0, ["python", "train.py"])  # runs in worker 0's netns
    address = net.addresses[0]  # "10.213.0.1"
```
"""

import dataclasses
import itertools
import os
import re
import signal
import subprocess

from absl import logging

SUBNET = "10.213.0"
MAX_WORKERS = 250
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)?$")
_RATE_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_DELAY_US = {"us": 1, "ms": 1e3, "s": 1e6, None: 1}


@dataclasses.dataclass(frozen=True)
class NetemSpec:
    """A link: `rate` as `tc` spells it, and a one-way delay.

    Args:
        rate: String. E.g. `"10gbit"`.
        delay_us: Float. Microseconds added to every packet sent.
    """

    rate: str
    delay_us: float

    @property
    def bits_per_second(self) -> float:
        number, unit = _RATE.match(self.rate).groups()
        return float(number) * _RATE_BITS[unit]

    def __str__(self) -> str:
        return f"{self.rate}:{self.delay_us:g}us"


def parse(text: str) -> NetemSpec:
    """Parses `BANDWIDTH:LATENCY`, e.g. `"10gbit:50us"` or `"1gbit:0"`.

    Raises:
        ValueError: If the text is not of that form.
    """
    rate, sep, delay = text.partition(":")
    rate_ok = _RATE.match(rate.strip().lower())
    delay_ok = _DELAY.match(delay.strip().lower())
    if not sep or not rate_ok or not delay_ok or float(rate_ok.group(1)) <= 0:
        raise ValueError(
            "`--netem` must be BANDWIDTH:LATENCY with a bandwidth in "
            "bit/kbit/mbit/gbit and a latency in us/ms/s, e.g. 10gbit:50us. "
            f"Received: --netem={text!r}"
        )
    number, unit = delay_ok.groups()
    return NetemSpec(rate.strip().lower(), float(number) * _DELAY_US[unit])


def check_root() -> None:
    """Raises `PermissionError` unless running as root."""
    if os.geteuid() != 0:
        raise PermissionError(
            "`--netem` needs root: it creates network namespaces, veth "
            f"pairs and tc qdiscs. Running as uid {os.geteuid()}. Run the "
            "benchmark as root (e.g. with sudo), or leave out --netem."
        )


class EmulatedNetwork:
    """Network namespaces joined by a bridge, with tc limits; see module.

    Args:
        num_workers: Int. One namespace per worker.
        spec: `NetemSpec` or `None`. Rate and delay of every worker's
            link; `None` leaves the links unlimited (no qdisc).
        tag: String or `None`. Short unique tag in the names. Defaults to
            this process id.
        subnet: String. First three octets of the addresses; namespace
            `i` gets `subnet.(i + 1)`. Defaults to `"10.213.0"`.
        reach_from_host: Bool. Give the bridge the address `subnet.254`
            so that this (the root) namespace reaches every namespace, as
            an ssh client or a launcher outside them needs. Defaults to
            `False` (the namespaces reach only each other).
        tbf_queue_ms: Float. With `tbf` (no netem), the longest a packet
            may wait in a link's token bucket before it is dropped (tbf's
            `latency`), which sets the queue's size. Defaults to 50.

    Raises:
        PermissionError: Without root.
        ValueError: For more than `MAX_WORKERS` workers.
        RuntimeError: If a command fails (the message has its stderr),
            for example a delay without the kernel's netem.
    """

    def __init__(
        self,
        num_workers: int,
        spec: NetemSpec | None,
        tag: str | None = None,
        *,
        subnet: str = SUBNET,
        reach_from_host: bool = False,
        tbf_queue_ms: float = 50.0,
    ) -> None:
        if not 1 <= num_workers <= MAX_WORKERS:
            raise ValueError(
                f"`--netem` supports 1 to {MAX_WORKERS} workers. Received: "
                f"{num_workers}"
            )
        if tbf_queue_ms <= 0:
            raise ValueError(
                "`tbf_queue_ms` must be > 0 (ms a packet may wait in a "
                f"link's token bucket). Received: {tbf_queue_ms}"
            )
        self.num_workers = num_workers
        self.spec = spec
        self.tbf_queue_ms = tbf_queue_ms
        # One tag per network, not per process: a network torn down a moment
        # ago may still hold its names while the kernel frees its namespaces
        # asynchronously, and a second network in the same run (calibration,
        # then measurement) would collide with them.
        self.tag = tag or f"{os.getpid() % 100000}{next(_instances) % 100}"
        self.bridge = f"kh{self.tag}br"
        self.namespaces = [f"kh{self.tag}n{i}" for i in range(num_workers)]
        self.host_links = [f"kh{self.tag}v{i}" for i in range(num_workers)]
        self.addresses = [f"{subnet}.{i + 1}" for i in range(num_workers)]
        self.bridge_address = f"{subnet}.254" if reach_from_host else None
        self.qdisc_kind = None
        self._created: list[list[str]] = []  # undo commands, newest last
        self._old_sigterm = None

    def wrap(self, rank: int, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace of worker `rank`."""
        return ["ip", "netns", "exec", self.namespaces[rank], *argv]

    def __enter__(self) -> "EmulatedNetwork":
        check_root()
        self._old_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        logging.info(
            "netem: %d namespaces on bridge %s, %s per link (%s)",
            self.num_workers,
            self.bridge,
            self.spec or "no limit",
            self.qdisc_kind or "no qdisc",
        )
        return self

    def __exit__(self, *exc) -> None:
        errors = []
        while self._created:
            undo = self._created.pop()
            result = subprocess.run(undo, capture_output=True, text=True)
            if result.returncode:
                errors.append(f"{' '.join(undo)}: {result.stderr.strip()}")
        if errors:
            logging.warning("netem clean-up: %s", "; ".join(errors))
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    # -- set-up

    def _build(self) -> None:
        if self.spec is not None:
            self.qdisc_kind = "netem" if _has_netem() else "tbf"
        if self.qdisc_kind == "tbf" and self.spec.delay_us > 0:
            raise RuntimeError(
                "`--netem` with a latency needs the kernel's netem qdisc "
                "(sch_netem), which this kernel does not have ('tc qdisc "
                f"add ... netem' fails). Received: --netem={self.spec}. Use "
                f"a latency of 0 (--netem={self.spec.rate}:0) for a "
                "rate-only token-bucket limit, or a kernel with sch_netem."
            )
        self._run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._undo(["ip", "link", "del", self.bridge])
        if self.bridge_address is not None:
            self._run(
                ["ip", "addr", "add", f"{self.bridge_address}/24"]
                + ["dev", self.bridge]
            )
        self._run(["ip", "link", "set", self.bridge, "up"])
        for rank in range(self.num_workers):
            self._add_worker(rank)

    def _add_worker(self, rank: int) -> None:
        ns, link = self.namespaces[rank], self.host_links[rank]
        self._run(["ip", "netns", "add", ns])
        self._undo(["ip", "netns", "del", ns])
        self._run(
            ["ip", "link", "add", link, "type", "veth"]
            + ["peer", "name", "eth0", "netns", ns]
        )
        # Deleted before the namespace: deleting a namespace deletes its
        # veth end and so the pair, but only when the kernel frees the
        # namespace, which it does asynchronously, so the host end would
        # outlive the clean-up for a moment.
        self._undo(["ip", "link", "del", link])
        self._run(["ip", "link", "set", link, "master", self.bridge, "up"])
        inside = ["ip", "netns", "exec", ns]
        address = f"{self.addresses[rank]}/24"
        self._run(inside + ["ip", "addr", "add", address, "dev", "eth0"])
        self._run(inside + ["ip", "link", "set", "lo", "up"])
        self._run(inside + ["ip", "link", "set", "eth0", "up"])
        if self.spec is None:
            return
        # What the worker sends: rate and delay; what it receives: rate.
        egress = self._qdisc(self.spec.delay_us)
        self._run(
            inside + ["tc", "qdisc", "add", "dev", "eth0", "root"] + egress
        )
        self._run(["tc", "qdisc", "add", "dev", link, "root", *self._qdisc(0)])

    def _qdisc(self, delay_us: float) -> list[str]:
        if self.qdisc_kind == "netem":
            return ["netem", "rate", self.spec.rate, "delay", f"{delay_us}us"]
        burst = tbf_burst_bytes(self.spec.bits_per_second)
        return [
            "tbf",
            "rate",
            self.spec.rate,
            "burst",
            str(burst),
            "latency",
            f"{self.tbf_queue_ms:g}ms",
        ]

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(
                f"netem set-up failed: `{' '.join(argv)}` exited "
                f"{result.returncode}: {result.stderr.strip()}"
            )

    def _undo(self, argv: list[str]) -> None:
        self._created.append(argv)


def tbf_burst_bytes(bits_per_second: float) -> int:
    """The token bucket of a rate-only link: bytes it lets through at once
    after an idle spell."""
    # At least 4 ms of traffic keeps tbf at its rate with the kernel's
    # timer granularity.
    return max(64_000, int(bits_per_second / 8 * 4e-3))


def tbf_limit_bytes(bits_per_second: float, queue_ms: float) -> float:
    """Bytes a rate-only link's tbf queues before it drops: tc sets the
    limit to `rate x latency + burst` for `latency` = `queue_ms`."""
    return bits_per_second / 8 * queue_ms / 1e3 + tbf_burst_bytes(
        bits_per_second
    )


_instances = itertools.count()


def _has_netem() -> bool:
    """Whether `tc` can create a netem qdisc (tried on a dummy device)."""
    probe = f"khprobe{os.getpid() % 100000}"
    made = subprocess.run(
        ["ip", "link", "add", probe, "type", "dummy"], capture_output=True
    )
    if made.returncode:
        return False
    try:
        result = subprocess.run(
            ["tc", "qdisc", "add", "dev", probe, "root", "netem"],
            capture_output=True,
        )
        return result.returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", probe], capture_output=True)


def _exit_on_sigterm(signum, frame) -> None:
    # Turns SIGTERM into SystemExit so `finally` and `__exit__` clean up.
    raise SystemExit(128 + signum)
