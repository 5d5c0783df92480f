"""An emulated host whose free ports come from its own range
(`keras_hybrid.emulation.hosts`)."""

import subprocess

RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


class HostPortRange:
    """Host `name` picks its ephemeral ports (where a free port comes
    from) below this namespace's range, so a port that host chose is told
    apart from one `topology.free_ports` picks here. `release`, or the end
    of the `with` block, restores its range.

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
                "HostPortRange needs room below this host's ephemeral "
                f"ports. Received: {RANGE} = {self.launcher_range}."
            )
        self.host_range = (low - 10000, low - 1)
        self._saved = None

    def _on_host(self, script: str) -> str:
        return subprocess.run(
            self.hosts.wrap(self.name, ["sh", "-c", script]),
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def __enter__(self) -> "HostPortRange":
        self._saved = self._on_host(f"cat {RANGE}").split()
        low, high = self.host_range
        self._on_host(f"echo {low} {high} > {RANGE}")
        return self

    def release(self) -> None:
        """Restores the host's range (once)."""
        if self._saved is not None:
            self._on_host(f"echo {' '.join(self._saved)} > {RANGE}")
            self._saved = None

    def __exit__(self, *exc) -> None:
        self.release()
