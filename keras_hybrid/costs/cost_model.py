"""Communication time of a step: alpha-beta costs on a `ClusterSpec`.

Each exchange costs a latency per message round plus its bytes over the
busiest link it crosses (links are full duplex, so a worker's sending and
receiving overlap). Exchanges of a step run one after another, and
computation does not overlap communication: predicted step time =
compute + communication.

- ring all-reduce (buffer D): `2 (N - 1)` rounds of `D / N` over the ring's
  slowest hop (the host interface once there are two hosts);
- ring all-gather (padded block c): `N - 1` rounds of `c`;
- all-to-all (S padded bytes per worker, spread evenly over the N - 1
  peers): `N - 1` pairwise rounds; the host interface carries what all
  `k` workers of a host send off-host, `k S (N - k) / (N - 1)`. Issued in
  rounds (`Design.schedule="rounds"`), each round also waits for the
  receiver's request: twice the latency;
- `ps` (whole variables on shards): a push and a pull round trip to every
  shard; the busiest host interface carries its workers' pushes and pulls
  for variables held elsewhere plus what its shards serve to every other
  host. A large variable on one shard makes that host the hot spot.

With a `PortBuffer` (`costs.port_buffer`), an exchange whose flows
overrun a port's buffer, or queue longer than TCP's timeout, also waits
one timeout; without one, ports queue without limit and never drop.

`ps_only` has two layouts (`PS_LAYOUTS`, `predict`'s `ps_layout`):

- `"per_worker"`: one shard and one worker process per accelerator, as
  the hybrid runs (every accelerator pushes and pulls on its own);
- `"per_host"`: the layout of the parameter-server architecture in
  Parallax's published code (github.com/snuspl/parallax,
  `core/python/ps/`): one server and one worker process per host, the
  host's accelerators replicated in-graph. Their gradients are summed in
  the host before one push per host, and one pull per host feeds them
  all ("local aggregation"); whole variables go to the least loaded of
  the H servers by bytes (`GreedyLoadBalancingStrategy`, its code notes
  that partitioning large variables is not done). Modeled as the flat
  `ps_only` exchange among H one-process hosts, each with a batch of
  `k` accelerators' samples, plus the in-host aggregation: dense
  gradients reduced and values handed back at the ring bound
  (`2 (k - 1)` rounds of `D / k` on the in-host link, a lower bound for
  an in-graph sum on one device), and each accelerator's table rows
  pulled from and pushed to the host's process over the in-host link
  (full duplex, `k - 1` accelerators' rows through the aggregating one).
"""

import dataclasses

import numpy as np

from keras_hybrid.costs import traffic
from keras_hybrid.costs.design import Design


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What the simulator predicts for one mode and worker count.

    Attributes:
        mode: String, one of `traffic.MODES`.
        workers: Int.
        batch: Int. Samples per worker and step.
        bytes: Dict `{path: bytes}` one worker sends per step, and
            `"total"`.
        comm_seconds: Float. Communication time per step.
        compute_seconds: Float. Compute time per step (from the profile).
        cross_host_sparse_bytes: Float. Bytes of tables one host's
            interface sends per step (`traffic.cross_host_sparse_bytes`).
        latency_seconds: Float. The part of `comm_seconds` that is
            latency (the same step on links with zero latency subtracted).
        queue_seconds: Float. The part of `comm_seconds` spent waiting
            for TCP timeouts at overrun port buffers (`PortBuffer`).
    """

    mode: str
    workers: int
    batch: int
    bytes: dict
    comm_seconds: float
    compute_seconds: float
    cross_host_sparse_bytes: float = 0.0
    latency_seconds: float = 0.0
    queue_seconds: float = 0.0

    @property
    def step_seconds(self) -> float:
        return self.comm_seconds + self.compute_seconds

    @property
    def samples_per_sec(self) -> float:
        return self.workers * self.batch / self.step_seconds

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "workers": self.workers,
            "batch": self.batch,
            "bytes_per_step": self.bytes,
            "comm_ms": 1e3 * self.comm_seconds,
            "compute_ms": 1e3 * self.compute_seconds,
            "step_ms": 1e3 * self.step_seconds,
            "samples_per_sec": self.samples_per_sec,
            "cross_host_sparse_bytes": self.cross_host_sparse_bytes,
            "latency_ms": 1e3 * self.latency_seconds,
            "queue_ms": 1e3 * self.queue_seconds,
        }


def _pairwise_latency(spec) -> float:
    """Latency of one message to every peer, one round per peer."""
    k = spec.accelerators_per_host
    return (k - 1) * spec.intra_latency + (
        spec.workers - k
    ) * spec.inter_latency


def exchange_seconds(exchange, spec, schedule: str = "concurrent") -> float:
    """Seconds one `Exchange` (`costs.exchange`) takes on `spec`, its
    pairwise all-to-alls issued as `schedule` says (`design.SCHEDULES`)."""
    n, k = spec.workers, spec.accelerators_per_host
    # In rounds, each round's receiver asks its sender first: a round
    # trip per round instead of one message per peer.
    hops = 2 if schedule == "rounds" else 1
    if n == 1:
        return 0.0
    latency, bandwidth = spec.ring_link()
    hosts = spec.hosts
    if exchange.scope == "hierarchical":
        # Reduce-scatter and all-gather among the host's k workers, ring
        # all-reduce of a 1/k slice across hosts by each of the k local
        # ranks at once (k flows share the interface). Used only where it
        # pays: else the flat ring.
        d = exchange.wire
        two_level = 2 * (k - 1) * (
            spec.intra_latency + d / k / spec.intra_bandwidth
        ) + 2 * (hosts - 1) * (
            spec.inter_latency + d / hosts / spec.inter_bandwidth
        )
        return min(two_level, 2 * (n - 1) * (latency + d / n / bandwidth))
    if exchange.kind == "all_to_all" and exchange.scope == "intra":
        # Among the k workers of each host: k - 1 rounds.
        return hops * (k - 1) * spec.intra_latency + (
            exchange.wire / spec.intra_bandwidth
        )
    if exchange.kind == "all_to_all" and exchange.scope == "inter":
        # Among one worker per host: H - 1 rounds; the k local ranks'
        # exchanges share the host's interface.
        return hops * (hosts - 1) * spec.inter_latency + (
            k * exchange.wire / spec.inter_bandwidth
        )
    if exchange.kind == "all_reduce":
        return 2 * (n - 1) * (latency + exchange.wire / n / bandwidth)
    if exchange.kind == "all_gather":
        return (n - 1) * (latency + exchange.wire / bandwidth)
    if exchange.kind == "all_to_all":
        per_peer = exchange.wire / (n - 1)
        intra = (k - 1) * per_peer / spec.intra_bandwidth
        inter = k * (n - k) * per_peer / spec.inter_bandwidth
        return hops * _pairwise_latency(spec) + max(intra, inter)
    if exchange.kind == "ps":
        return 2 * _pairwise_latency(spec) + _ps_transfer(exchange, spec)
    raise ValueError(f"Unknown exchange kind {exchange.kind!r}.")


def _ps_transfer(exchange, spec) -> float:
    """Bytes-over-bandwidth time of the busiest link of a `ps` exchange."""
    n, k = spec.workers, spec.accelerators_per_host
    loads = np.asarray(exchange.shard_bytes, float).reshape(spec.hosts, k)
    total = loads.sum()
    on_host = loads.sum(axis=1)
    # Off-host: k workers push (and pull) what other hosts hold; the
    # host's shards receive pushes from (and serve) n - k workers.
    off_host = k * (total - on_host) + (n - k) * on_host
    # On-host, per worker: pushes to the other shards of its host, and
    # serving its own shard to the k - 1 others.
    within = (on_host[:, None] - loads) + (k - 1) * loads
    return max(
        float(off_host.max()) / spec.inter_bandwidth if spec.hosts > 1 else 0,
        float(within.max()) / spec.intra_bandwidth,
    )


PS_LAYOUTS = ("per_worker", "per_host")


def predict(
    profile,
    mode: str,
    spec,
    batch: int,
    ps_layout: str = "per_worker",
    buffer=None,
    **kwargs,
) -> Prediction:
    """Predicts bytes and times of one step of `mode` on `spec`.

    Args:
        profile: A `Profile`.
        mode: String, one of `traffic.MODES`.
        spec: A `ClusterSpec`.
        batch: Int. Samples per worker and step.
        ps_layout: String, one of `PS_LAYOUTS`: the servers and worker
            processes of `ps_only` (see the module doc). Other modes
            ignore it. Defaults to `"per_worker"`.
        buffer: A `PortBuffer`, or `None` (default) for ports that queue
            without limit: then no exchange waits for a timeout.
        **kwargs: Passed to `traffic.step_exchanges` (`bucket_bytes`,
            `design`). `design.schedule` also sets how all-to-alls are
            issued.

    Raises:
        ValueError: If `ps_layout` is unknown.
    """
    if ps_layout not in PS_LAYOUTS:
        raise ValueError(
            f"`ps_layout` must be one of {PS_LAYOUTS}. Received: "
            f"ps_layout={ps_layout!r}"
        )
    k = spec.accelerators_per_host
    if mode == "ps_only" and ps_layout == "per_host" and k > 1:
        return _predict_ps_per_host(profile, spec, batch, **kwargs)
    exchanges = traffic.step_exchanges(
        profile,
        mode,
        spec.workers,
        batch,
        per_host=spec.accelerators_per_host,
        **kwargs,
    )
    schedule = (kwargs.get("design") or Design()).schedule
    comm, latency, queue = _step_seconds(exchanges, spec, schedule, buffer)
    return Prediction(
        mode=mode,
        workers=spec.workers,
        batch=batch,
        bytes=traffic.bytes_per_path(exchanges),
        comm_seconds=comm,
        compute_seconds=profile.compute_time(batch),
        cross_host_sparse_bytes=traffic.cross_host_sparse_bytes(
            exchanges, spec.workers, spec.accelerators_per_host
        ),
        latency_seconds=latency,
        queue_seconds=queue,
    )


def _step_seconds(exchanges, spec, schedule: str, buffer) -> tuple:
    """(communication, its latency, its timeouts) of a step's exchanges,
    in seconds; `buffer` is a `PortBuffer` or `None`."""
    no_latency = dataclasses.replace(spec, inter_latency=0, intra_latency=0)
    comm = sum(exchange_seconds(e, spec, schedule) for e in exchanges)
    latency = comm - sum(
        exchange_seconds(e, no_latency, schedule) for e in exchanges
    )
    queue = 0.0
    if buffer is not None:
        queue = sum(
            buffer.exchange_seconds(e, spec, schedule) for e in exchanges
        )
    return comm + queue, latency, queue


def _predict_ps_per_host(profile, spec, batch: int, **kwargs) -> Prediction:
    """`ps_only` with one server and one process per host (module doc).
    Bytes are per host process."""
    k, hosts = spec.accelerators_per_host, spec.hosts
    host_spec = dataclasses.replace(
        spec, workers=hosts, accelerators_per_host=1
    )
    exchanges = traffic.step_exchanges(
        profile, "ps_only", hosts, batch * k, per_host=1, **kwargs
    )
    comm = sum(exchange_seconds(e, host_spec) for e in exchanges)
    no_latency = dataclasses.replace(host_spec, inter_latency=0)
    latency = comm - sum(exchange_seconds(e, no_latency) for e in exchanges)
    dense = sum(v.bytes for v in profile.of_kind("dense"))
    rows = sum(
        v.unique_ids(batch, call) * v.row_bytes
        for v in profile.of_kind("sparse")
        for call in range(v.calls)
    )
    local_latency = 2 * (k - 1) * spec.intra_latency
    local = (
        local_latency
        + 2 * (k - 1) * dense / k / spec.intra_bandwidth
        + (k - 1) * rows / spec.intra_bandwidth
    )
    return Prediction(
        mode="ps_only",
        workers=spec.workers,
        batch=batch,
        bytes=traffic.bytes_per_path(exchanges),
        comm_seconds=comm + local,
        compute_seconds=profile.compute_time(batch),
        cross_host_sparse_bytes=traffic.cross_host_sparse_bytes(
            exchanges, hosts, 1
        ),
        latency_seconds=latency + local_latency,
    )


def sweep(
    profile, spec, worker_counts, batch: int, modes=traffic.MODES, **kwargs
):
    """`predict` for every mode and worker count (hosts refilled)."""
    return [
        predict(profile, mode, spec.with_workers(n), batch, **kwargs)
        for n in worker_counts
        for mode in modes
    ]
