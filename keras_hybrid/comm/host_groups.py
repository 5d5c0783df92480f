"""Which worker runs on which host: host index and local rank per rank.

The hierarchical exchange needs every worker to agree on
the hosts of all workers. They read it from the same place, the cluster
every worker was given (`TF_CONFIG`'s `host:port` addresses; their host
part names the machine), so they agree by construction. Hosts are numbered
in the order of their first worker, and a worker's local rank is its index
among its host's workers in rank order.

`KERAS_HYBRID_HOSTS` (comma-separated, one host name per rank) overrides
the addresses, for tests that emulate several hosts on one machine. Every
worker must be given the same value.
"""

import dataclasses
import os

HOSTS_ENV = "KERAS_HYBRID_HOSTS"


@dataclasses.dataclass(frozen=True)
class HostGroups:
    """Hosts of a job whose hosts run equally many workers.

    Attributes:
        host_of: Tuple of ints. Host index of each rank.
        local_of: Tuple of ints. Local rank of each rank on its host.
        per_host: Int. Workers per host.

    Example:

    ```python
    groups, reason = host_groups.from_hosts(["a", "b", "a", "b"])
    groups.host_of  # (0, 1, 0, 1)
    groups.rank_of(1, 1)  # 3
    ```
    """

    host_of: tuple
    local_of: tuple
    per_host: int

    @property
    def num_hosts(self) -> int:
        return len(self.host_of) // self.per_host

    def rank_of(self, host: int, local: int) -> int:
        """Int. The rank of local rank `local` on host `host`."""
        for rank, (h, r) in enumerate(
            zip(self.host_of, self.local_of, strict=True)
        ):
            if (h, r) == (host, local):
                return rank
        raise ValueError(
            f"No worker is local rank {local} of host {host}. Received a "
            f"job of {self.num_hosts} hosts x {self.per_host} workers."
        )

    def host_peers(self, rank: int) -> tuple:
        """Ranks on `rank`'s host, itself included, in rank order."""
        return tuple(
            r for r, h in enumerate(self.host_of) if h == self.host_of[rank]
        )

    def rank_peers(self, rank: int) -> tuple:
        """Ranks of `rank`'s local rank on every host, itself included."""
        local = self.local_of[rank]
        return tuple(r for r, lr in enumerate(self.local_of) if lr == local)

    def relay_of(self) -> tuple:
        """Per rank `o`, per host `h`: the worker of host `h` with `o`'s
        local rank (`[size][hosts]` as tuples); it carries host `h`'s ids
        owned by `o` across hosts."""
        return tuple(
            tuple(
                self.rank_of(h, self.local_of[o]) for h in range(self.num_hosts)
            )
            for o in range(len(self.host_of))
        )


def from_hosts(hosts: list) -> tuple:
    """`(HostGroups or None, reason)` from the host name of each rank.

    `None` comes with the reason a hierarchical exchange cannot run: one
    worker, one host, one worker per host, or hosts with unequal numbers
    of workers.
    """
    names = list(dict.fromkeys(hosts))
    host_of = tuple(names.index(h) for h in hosts)
    counts = [host_of.count(h) for h in range(len(names))]
    if len(hosts) < 2 or len(names) < 2:
        return None, f"one host runs all {len(hosts)} worker(s)"
    if len(set(counts)) > 1:
        return None, (
            "hosts run unequal numbers of workers "
            f"({dict(zip(names, counts, strict=True))})"
        )
    if counts[0] == 1:
        return None, "every host runs one worker"
    seen = [0] * len(names)
    local_of = []
    for h in host_of:
        local_of.append(seen[h])
        seen[h] += 1
    return HostGroups(host_of, tuple(local_of), counts[0]), ""


def host_names(cluster_spec, job: str, size: int) -> list:
    """Host name of each rank: `KERAS_HYBRID_HOSTS` if set, else the host
    part of each worker's address in `cluster_spec` (`None`: one process).

    Raises:
        ValueError: If `KERAS_HYBRID_HOSTS` does not name one host per
            worker.
    """
    override = os.environ.get(HOSTS_ENV)
    if override:
        names = [h.strip() for h in override.split(",")]
        if len(names) != size or not all(names):
            raise ValueError(
                f"`{HOSTS_ENV}` must name one host per worker, comma-"
                f"separated. Received: {override!r} for {size} workers. "
                "Unset it to take the hosts from the cluster addresses."
            )
        return names
    if cluster_spec is None:
        return ["localhost"] * size
    return [
        _host_part(cluster_spec.task_address(job, rank)) for rank in range(size)
    ]


def _host_part(address: str) -> str:
    """`host` of `host:port`, `[v6]:port` or a bare host."""
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0] if ":" in address else address
