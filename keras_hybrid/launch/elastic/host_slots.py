"""Where an elastic job's tasks run: slots per host to task starts and
retirements, and the cluster addresses that follow.

Pure functions of the placement (task -> host) and of discovery's answer;
`ElasticDriver` carries them out. Imports nothing heavy.
"""

import dataclasses
from collections.abc import Callable

from keras_hybrid.launch.ssh import is_local_host
from keras_hybrid.launch.topology import LOOPBACK

# The name of this machine's slots in a placement (`localhost`,
# `127.0.0.1` are one host).
LOCAL = "localhost"


@dataclasses.dataclass(frozen=True)
class HostPlan:
    """The next change of an elastic job's placement.

    Args:
        retire: List of ints. Tasks to retire (a planned shrink).
        start: List of `(task, host)` pairs. Joiners to start (a grow).
            Empty when `retire` is not: one change at a time.
    """

    retire: list
    start: list


def host_key(host: str) -> str:
    """String. `host`, or `LOCAL` for any name of this machine."""
    return LOCAL if is_local_host(host) else host


def merge_slots(discovered: list[tuple[str, int]]) -> dict[str, int]:
    """Slots per host (`host_key`), in discovery's order; a host named on
    several lines gets their sum."""
    slots: dict[str, int] = {}
    for host, count in discovered:
        key = host_key(host)
        slots[key] = slots.get(key, 0) + int(count)
    return slots


def plan_hosts(
    placed: dict[int, str],
    discovered: list[tuple[str, int]],
    min_np: int,
    max_np: int,
    busy: set | frozenset = frozenset(),
    leader: int = 0,
) -> HostPlan:
    """Which tasks to retire or start so that each host runs its slots.

    A host with fewer slots than tasks retires its highest tasks (the
    `leader` of TensorFlow's collectives, never), but the job keeps
    `min_np` tasks. Otherwise each host with free slots gets joiners, in
    discovery's order, on the lowest free task ids, up to `max_np` tasks.

    Args:
        placed: Dict of int to string. The members' tasks and hosts.
        discovered: List of `(host, slots)`, as from `HostDiscovery`.
        min_np: Int. Fewest tasks.
        max_np: Int. Most tasks (task ids are `0 .. max_np - 1`).
        busy: Set of ints. Task ids not free (processes still running).
        leader: Int. The task that leads the collectives (task 0 until a
            recovery lost it). Defaults to `0`.

    Returns:
        `HostPlan`.

    Example:

    ```python
    plan_hosts({0: "a", 1: "a"}, [("a", 2), ("b", 2)], 2, 8)
    # HostPlan(retire=[], start=[(2, "b"), (3, "b")])
    ```
    """
    slots = merge_slots(discovered)
    retire = []
    for host in sorted(set(placed.values())):
        tasks = sorted(
            t for t, h in placed.items() if h == host and t != leader
        )
        extra = sum(h == host for h in placed.values()) - slots.get(host, 0)
        if extra > 0:
            retire += tasks[len(tasks) - min(extra, len(tasks)) :]
    retire.sort()
    keep = len(placed) - len(retire)
    if keep < min_np:
        retire = retire[min_np - keep :]
    if retire:
        return HostPlan(retire, [])
    taken = set(placed) | set(busy)
    free = [t for t in range(max_np) if t not in taken]
    room = max_np - len(placed)
    start = []
    for host, count in slots.items():
        need = count - sum(h == host for h in placed.values())
        for _ in range(max(0, min(need, room - len(start)))):
            if not free:
                break
            start.append((free.pop(0), host))
    return HostPlan([], start)


def remote_hosts(discovered: list[tuple[str, int]]) -> list[str]:
    """The hosts of `discovered` that are not this machine."""
    return [h for h in merge_slots(discovered) if h != LOCAL]


def task_addresses(
    placed: dict[int, str],
    ports: list[int],
    local: str = LOOPBACK,
    resolve: Callable[[str], str] = str,
) -> list[str]:
    """Every task's `host:port` for the cluster of `len(ports)` tasks.

    A task runs on its host's address (`resolve(host)`: e.g. the address
    ssh reaches it on, `ssh.ssh_hostname`, since other hosts may not know
    the discovery script's names); this machine's tasks on `local`
    (loopback, or how other hosts reach this one in a multi-host job).
    Tasks not placed get a loopback placeholder: TF never contacts a task
    that does not run.
    """
    addresses = []
    for task, port in enumerate(ports):
        host = placed.get(task)
        if host is None or host == LOCAL:
            host = local if host else LOOPBACK
        else:
            host = resolve(host)
        addresses.append(f"{host}:{port}")
    return addresses


def hosts_of(cluster: list[str]) -> list[str]:
    """The host part of each `host:port` address."""
    return [address.rpartition(":")[0] for address in cluster]


def port_needs(placed: dict[int, str], max_np: int) -> dict[str, int]:
    """How many ports each host must give a cluster of `max_np` tasks:
    one per task placed there; this machine (`LOCAL`) also gives the
    loopback placeholders of the tasks not placed."""
    needs = {LOCAL: 0}
    for task in range(max_np):
        host = placed.get(task, LOCAL)
        needs[host] = needs.get(host, 0) + 1
    return needs


def task_ports(
    placed: dict[int, str], max_np: int, ports: dict[str, list[int]]
) -> list[int]:
    """Every task's port: the next of its host's `ports`, in task order
    (tasks not placed take this machine's).

    Args:
        placed: Dict of int to string. The tasks' hosts (`host_key`).
        max_np: Int. Tasks in the cluster.
        ports: Dict of string to list of ints. Ports free on each host
            (`LOCAL` for this machine), at least `port_needs` of each.

    Returns:
        List of `max_np` ints, distinct among the tasks of each host.

    Raises:
        ValueError: If a host's ports are too few or repeat a port.

    Example:

    ```python
    task_ports({0: "localhost", 1: "b", 2: "b"}, 4,
               {"localhost": [5, 6], "b": [5, 7]})
    # [5, 5, 7, 6]
    ```
    """
    needs = port_needs(placed, max_np)
    for host, count in needs.items():
        given = list(ports.get(host, []))
        if len(given) < count or len(set(given)) != len(given):
            raise ValueError(
                f"Host {host} must give {count} distinct ports to its "
                f"tasks. Received: {given}."
            )
    left = {host: iter(ports[host]) for host in needs}
    return [next(left[placed.get(task, LOCAL)]) for task in range(max_np)]
