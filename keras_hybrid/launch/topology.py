"""Pure placement of ranks onto hosts and ports."""

import socket

from keras_hybrid.contract.worker_spec import WorkerSpec

LOOPBACK = "127.0.0.1"


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Returns `count` distinct ports that were free a moment ago.

    All sockets stay bound until every port is chosen, so the kernel cannot
    hand out the same port twice. Another process may still grab a port
    between this call and the worker binding it.

    Args:
        count: Int. Number of ports.
        host: String. Address to bind. Defaults to `"127.0.0.1"`.

    Returns:
        List of port numbers.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def local_specs(ports: list[int]) -> list[WorkerSpec]:
    """Places one worker per port on the loopback address.

    Args:
        ports: List of ints. One distinct port per worker, in rank order.

    Returns:
        List of `WorkerSpec`, one per rank.
    """
    size = len(ports)
    return [
        WorkerSpec(rank, size, rank, size, LOOPBACK, port)
        for rank, port in enumerate(ports)
    ]


def host_specs(hosts: list[tuple[str, int]], port: int) -> list[WorkerSpec]:
    """Assigns ranks host by host; ports are `port + local_rank`.

    Args:
        hosts: List of `(host, slots)` pairs, as from `parse_hosts`.
        port: Int. First port on every host.

    Returns:
        List of `WorkerSpec`, one per rank.

    Example:

    ```python
    [s.rank for s in host_specs([("h1", 2), ("h2", 1)], 29400)]  # [0, 1, 2]
    ```
    """
    size = sum(slots for _, slots in hosts)
    specs = []
    for host, slots in hosts:
        for local_rank in range(slots):
            specs.append(
                WorkerSpec(
                    len(specs), size, local_rank, slots, host, port + local_rank
                )
            )
    return specs
