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


def check_ports_free(ports: list[int], hosts: list[str]) -> None:
    """Checks that this machine can listen on every port, before any
    worker starts.

    A worker's TensorFlow server listens on all interfaces, so a port
    counts as in use when binding it on all interfaces fails (a port only
    in TIME_WAIT does not count).

    Args:
        ports: List of ints. The local workers' ports, in rank order.
        hosts: List of strings. The host of each, for the message.

    Raises:
        ValueError: Naming the first port in use and `--port`.
    """
    for rank, (port, host) in enumerate(zip(ports, hosts, strict=True)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("", port))
            except OSError as error:
                raise ValueError(
                    f"Port {port} (rank {rank} on {host}) is in use "
                    f"({error.strerror}). Received: --port {ports[0]}, which "
                    f"gives local rank r port {ports[0]} + r. Pick another "
                    "first port with `--port`, or leave `--port` out with "
                    "-np to use free ports."
                ) from None
