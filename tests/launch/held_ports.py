"""An emulated host that holds every port the launcher's own host could
pick (`keras_hybrid.testing.emulated_hosts`)."""

import subprocess
import sys

# Binds every port of a range on all addresses, until stdin closes.
_HOLD = """
import resource, socket, sys
low, high = int(sys.argv[1]), int(sys.argv[2])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for port in range(low, high + 1):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", port))
    held.append(sock)
print("holding", len(held), flush=True)
sys.stdin.read()
"""
RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
# Ports per holding process: under a usual limit of open files.
_PER_PROCESS = 15000


class HeldPorts:
    """Host `name` holds every port of this namespace's ephemeral range
    (where `topology.free_ports` picks) and picks its own below it, so a
    worker there can serve only on a port that host chose. Its range is
    restored and the holders stopped by `release`, or on exit.

    Args:
        hosts: An entered `EmulatedHosts`.
        name: String. One of its hosts.
    """

    def __init__(self, hosts, name: str) -> None:
        self.hosts, self.name = hosts, name
        with open(RANGE) as f:
            self.launcher_range = tuple(map(int, f.read().split()))
        low = self.launcher_range[0]
        if low <= 12000:
            raise ValueError(
                "HeldPorts needs room below this host's ephemeral ports. "
                f"Received: {RANGE} = {self.launcher_range}."
            )
        self.host_range = (low - 10000, low - 1)
        self.holders: list[subprocess.Popen] = []
        self._saved = None

    def _on_host(self, script: str) -> str:
        return subprocess.run(
            self.hosts.wrap(self.name, ["sh", "-c", script]),
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def __enter__(self) -> "HeldPorts":
        self._saved = self._on_host(f"cat {RANGE}").split()
        low, high = self.host_range
        self._on_host(f"echo {low} {high} > {RANGE}")
        try:
            first, last = self.launcher_range
            for start in range(first, last + 1, _PER_PROCESS):
                end = min(last, start + _PER_PROCESS - 1)
                self._hold(start, end)
        except BaseException:
            self.release()
            raise
        return self

    def _hold(self, first: int, last: int) -> None:
        holder = subprocess.Popen(
            self.hosts.wrap(
                self.name, [sys.executable, "-c", _HOLD, str(first), str(last)]
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.holders.append(holder)
        line = holder.stdout.readline()
        if not line.startswith("holding"):
            raise RuntimeError(
                f"could not hold ports {first}-{last} on {self.name}."
            )

    def release(self) -> None:
        """Frees the ports and restores the host's range (once)."""
        for holder in self.holders:
            holder.stdin.close()
            holder.wait(30)
        self.holders = []
        if self._saved is not None:
            self._on_host(f"echo {' '.join(self._saved)} > {RANGE}")
            self._saved = None

    def __exit__(self, *exc) -> None:
        self.release()
