"""Ports free where an elastic job's tasks run.

This machine's come from `topology.free_ports`. Another host's come from
that host itself: one ssh round trip (`ssh.remote_command`, the client,
working directory, interpreter and forwarded variables of the workers)
runs

```
PYTHON -m keras_hybrid.launch.elastic.host_ports COUNT
```

there, which prints `COUNT` ports free on every address of that host (a
TensorFlow server listens on `0.0.0.0:port`; this machine's ports are
checked on every address too). Hosts are asked at the same time, so a
plan costs about one round trip whatever their number. A port is still
only free a moment ago: another process may take it before the worker
binds it.

Importing this module does not import TensorFlow (nor does running it).
"""

import argparse
import concurrent.futures
import logging
import os
import subprocess
import sys
import time

from keras_hybrid.launch.elastic import host_slots
from keras_hybrid.launch.ssh import failure_hint
from keras_hybrid.launch.ssh import forwarded_env
from keras_hybrid.launch.ssh import remote_command
from keras_hybrid.launch.topology import free_ports

logger = logging.getLogger(__name__)

# Every address: TensorFlow's gRPC server listens on `0.0.0.0:port`, so a
# port bound on any address of the host would fail it.
ANY_ADDRESS = "0.0.0.0"
# Starts the line with the ports, so that what a login script prints on
# stdout is skipped.
MARKER = "keras-hybrid-ports:"
# An unreachable host fails the query instead of hanging the launcher.
QUERY_TIMEOUT_SECONDS = 30.0


class HostPortsError(RuntimeError):
    """A host could not be asked for free ports (ssh failed, timed out or
    printed no ports).

    Args:
        host: String. The host.
        returncode: Int or `None`. The ssh client's exit code (`None`
            after a timeout).
        detail: String. What went wrong (ssh's last error line).
    """

    def __init__(self, host: str, returncode: int | None, detail: str):
        code = "timed out" if returncode is None else f"exit code {returncode}"
        super().__init__(
            f"could not choose free ports on host {host}: the query over "
            f"ssh ended with {code}{failure_hint(host, returncode)}: "
            f"{detail or 'no output'}"
        )
        self.host = host
        self.returncode = returncode


def query_ports(
    host: str, count: int, client: list[str] | None = None
) -> list[int]:
    """`count` ports free on `host`, from `host` itself (one ssh round
    trip).

    Args:
        host: String. A remote host as the discovery script names it.
        count: Int. Number of ports.
        client: List of strings or `None`. The ssh client. Defaults to
            `ssh.ssh_client()`.

    Returns:
        List of `count` distinct ints.

    Raises:
        HostPortsError: If ssh fails, times out or prints no ports.
    """
    argv = remote_command(
        host,
        os.getcwd(),
        forwarded_env(os.environ),
        [sys.executable, "-m", __name__, str(int(count))],
        client,
    )
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise HostPortsError(
            host, None, f"no answer in {QUERY_TIMEOUT_SECONDS:g} s"
        ) from None
    lines = [x for x in done.stdout.splitlines() if x.startswith(MARKER)]
    words = lines[-1][len(MARKER) :].split() if lines else []
    if done.returncode != 0 or len(words) != count:
        errors = done.stderr.strip().splitlines() or [""]
        raise HostPortsError(host, done.returncode, errors[-1])
    return [int(word) for word in words]


def ports_by_host(needs: dict[str, int]) -> dict[str, list[int]]:
    """Free ports on each host of `needs` (`host_slots.port_needs`): this
    machine's here, every other host's from that host, all at once.

    Raises:
        HostPortsError: For the first host (in `needs`' order) that could
            not be asked.
    """
    remote = [h for h in needs if h != host_slots.LOCAL]
    ports = {}
    if host_slots.LOCAL in needs:
        # Free on every address here too: a port that is free on loopback
        # may be the source port of a connection to another host.
        ports[host_slots.LOCAL] = free_ports(
            needs[host_slots.LOCAL], ANY_ADDRESS
        )
    if not remote:
        return ports
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(remote)) as pool:
        answers = {h: pool.submit(query_ports, h, needs[h]) for h in remote}
        for host, answer in answers.items():
            ports[host] = answer.result()
    logger.info(
        "free ports asked of hosts %s in %.2f s",
        remote,
        time.monotonic() - start,
    )
    return ports


def task_ports(placed: dict[int, str], max_np: int) -> list[int]:
    """Every task's port, free on the host of the task (`placed`; tasks
    not placed on this machine's loopback placeholders).

    Raises:
        HostPortsError: If another host could not be asked.
    """
    needs = host_slots.port_needs(placed, max_np)
    return host_slots.task_ports(placed, max_np, ports_by_host(needs))


def main(argv: list[str] | None = None) -> int:
    """Prints `MARKER` and COUNT ports free on every address here."""
    parser = argparse.ArgumentParser(
        prog="python -m keras_hybrid.launch.elastic.host_ports",
        description="Print COUNT distinct ports free on every address of "
        "this host, after `keras-hybrid-ports:`.",
    )
    parser.add_argument("count", type=int)
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"COUNT must be >= 1. Received: {args.count}.")
    ports = free_ports(args.count, ANY_ADDRESS)
    # The answer the launcher parses over ssh, not a log line.
    sys.stdout.write(" ".join([MARKER, *map(str, ports)]) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
