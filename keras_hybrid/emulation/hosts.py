"""Hosts emulated on this machine: network namespaces, each running sshd.

```
 root ns: launcher, ssh -F <tmp>/ssh_config hostA ...
    | bridge kh<tag>br (10.77.0.254)
    +--veth-- ns kh<tag>n0 "hostA" 10.77.0.1, sshd on 10.77.0.1:22
    +--veth-- ns kh<tag>n1 "hostB" 10.77.0.2, sshd on 10.77.0.2:22
```

Each namespace acts as one host: its own loopback (workers on the same
host talk over it, unlimited), its own address and port space, and an
`sshd` with its own configuration, host key and authorized key, all in a
temporary directory. Names resolve inside the namespaces through
`/etc/netns/<namespace>/hosts`, which `ip netns exec` mounts over
`/etc/hosts` for the processes it starts (sshd and so every worker);
`/etc/hosts` itself is never touched. Outside, the ssh client finds the
hosts through the generated `ssh_config` (`HostName`, key, no host key
checks): pass `ssh_command` as `KERAS_HYBRID_SSH_COMMAND` to
`keras-hybrid-run`. An optional rate limit applies to every host's link,
that is, to inter-host traffic only.

Needs root, `ip`, `tc` and OpenSSH's server (Debian's `openssh-server`).
Everything is removed on exit, also after an exception: processes left in
the namespaces, sshd, namespaces, links, files.

Example:

```python
with EmulatedHosts(["hostA", "hostB"]) as hosts:
    env = {**os.environ, "KERAS_HYBRID_SSH_COMMAND": hosts.ssh_command}
    subprocess.run(
        ["keras-hybrid-run", "--hosts", "hostA:2,hostB:2", "python", "t.py"],
        env=env,
    )
```
"""

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from keras_hybrid.emulation import network as netem

SUBNET = "10.77.0"
NETNS_ETC = "/etc/netns"
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
# sshd refuses to start without its privilege separation directory, which
# the Debian package leaves to systemd to create.
PRIVSEP_DIR = "/run/sshd"
_READY_SECONDS = 20.0


def find_sshd() -> str | None:
    """Returns the absolute path of `sshd`, or `None` if not installed."""
    for path in SSHD_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("sshd")
    return os.path.abspath(found) if found else None


def install_problem() -> str | None:
    """Gets what `EmulatedHosts` needs, or says why it cannot run here.

    Installs Debian's `openssh-server` with apt when sshd is missing and
    this process is root (tests call this, then skip with the reason).

    Returns:
        String or `None`. `None` when everything is there; else why not.
    """
    if sys.platform != "linux":
        return f"emulated hosts need Linux network namespaces ({sys.platform})"
    if os.geteuid() != 0:
        return (
            "emulated hosts need root (network namespaces, sshd); running "
            f"as uid {os.geteuid()}"
        )
    if shutil.which("ip") is None:
        return "emulated hosts need iproute2's `ip`, which is missing"
    if find_sshd() and shutil.which("ssh"):
        return None
    if shutil.which("apt-get") is None:
        return "sshd is not installed and there is no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "openssh-server"]
    done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode:
        subprocess.run(
            ["apt-get", "update", "-q"], capture_output=True, env=env
        )
        done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode or not find_sshd():
        return (
            "`apt-get install openssh-server` failed, so sshd is missing: "
            f"{done.stderr.strip()[-500:]}"
        )
    return None


class EmulatedHosts:
    """Network namespaces acting as ssh-reachable hosts; see module.

    Args:
        names: List of strings. Host names, e.g. `["hostA", "hostB"]`.
        rate: String or `None`. `tc` rate of every host's link (e.g.
            `"1gbit"`), inter-host traffic only; `None` for no limit.
        tag: String or `None`. Short unique tag in the names of the
            namespaces and links. Defaults to this process id.
        subnet: String. First three octets; host `i` gets `subnet.(i+1)`
            and the root namespace `subnet.254`. Defaults to `"10.77.0"`.
        tbf_queue_ms: Float. With a `rate` on a kernel without netem: the
            longest a packet may wait in a link's token bucket before it
            is dropped (see `netem.EmulatedNetwork`). Defaults to 50.

    Raises:
        PermissionError: Without root.
        FileNotFoundError: Without `sshd` or `ssh-keygen`.
        ValueError: For an empty, repeated or malformed host name.
        RuntimeError: If a set-up command fails or an sshd does not answer.
    """

    def __init__(
        self,
        names: list[str],
        rate: str | None = None,
        tag: str | None = None,
        *,
        subnet: str = SUBNET,
        tbf_queue_ms: float = 50.0,
    ) -> None:
        names = list(names)
        bad = [n for n in names if not n or not n.replace("-", "").isalnum()]
        if not names or bad or len(set(names)) != len(names):
            raise ValueError(
                "`names` must be distinct non-empty host names of letters, "
                f"digits and '-'. Received: {names!r}"
            )
        self.names = names
        spec = None if rate is None else netem.parse(f"{rate}:0")
        self.network = netem.EmulatedNetwork(
            len(names),
            spec,
            tag,
            subnet=subnet,
            reach_from_host=True,
            tbf_queue_ms=tbf_queue_ms,
        )
        self.addresses = dict(zip(names, self.network.addresses, strict=True))
        self.namespaces = dict(zip(names, self.network.namespaces, strict=True))
        self.links = dict(zip(names, self.network.host_links, strict=True))
        self._dir: str | None = None
        self._sshd: dict[str, subprocess.Popen] = {}
        self._made_netns_etc = False
        self._entered = False

    @property
    def ssh_config(self) -> str:
        """String. Path of the generated client configuration."""
        return os.path.join(self._dir, "ssh_config")

    @property
    def ssh_command(self) -> str:
        """String. `ssh -F <ssh_config>`, for `KERAS_HYBRID_SSH_COMMAND`."""
        return f"ssh -F {shlex.quote(self.ssh_config)}"

    def wrap(self, name: str, argv: list[str]) -> list[str]:
        """`argv` run inside host `name`'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[name], *argv]

    def pids(self, name: str) -> list[int]:
        """Process ids running in host `name`'s namespace (sshd included)."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.namespaces[name]],
            capture_output=True,
            text=True,
        ).stdout
        return [int(pid) for pid in out.split()]

    def worker_pids(self, name: str) -> list[int]:
        """Process ids in host `name`'s namespace other than its sshd."""
        sshd = self._sshd.get(name)
        return [p for p in self.pids(name) if sshd is None or p != sshd.pid]

    def set_link(self, name: str, up: bool) -> None:
        """Takes host `name`'s link down (a failed host) or up again."""
        state = "up" if up else "down"
        subprocess.run(
            ["ip", "link", "set", self.links[name], state], check=True
        )

    def __enter__(self) -> "EmulatedHosts":
        sshd = find_sshd()
        if sshd is None or shutil.which("ssh-keygen") is None:
            raise FileNotFoundError(
                "EmulatedHosts needs OpenSSH's sshd and ssh-keygen, which are "
                "not installed. Install them as root with `apt-get install "
                "openssh-server` (Debian) or your system's package."
            )
        netem.check_root()
        self._entered = True
        try:
            self.network.__enter__()
            self._dir = tempfile.mkdtemp(prefix="kh_hosts_")
            self._write_keys_and_configs()
            self._write_hosts_files()
            os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
            for name in self.names:
                self._start_sshd(sshd, name)
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if not self._entered:
            return
        self._entered = False
        for name in self.names:
            # Whatever runs in the namespace (workers, their guards,
            # session processes) goes first, then sshd.
            for pid in self.worker_pids(name):
                _kill(pid)
            proc = self._sshd.pop(name, None)
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for pid in self.pids(name):
                _kill(pid)
        for ns in self.namespaces.values():
            shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)
        if self._made_netns_etc:
            try:
                os.rmdir(NETNS_ETC)
            except OSError:
                pass  # Someone else's files are there now.
        self.network.__exit__(None, None, None)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- set-up

    def _path(self, name: str) -> str:
        return os.path.join(self._dir, name)

    def _write_keys_and_configs(self) -> None:
        for key in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key]
                + ["-f", self._path(key)],
                check=True,
                capture_output=True,
            )
        shutil.copy(self._path("client_key.pub"), self._path("authorized_keys"))
        blocks = []
        for name, address in self.addresses.items():
            blocks.append(
                f"Host {name}\n"
                f"  HostName {address}\n"
                "  User root\n"
                f"  IdentityFile {self._path('client_key')}\n"
                "  IdentitiesOnly yes\n"
                "  StrictHostKeyChecking no\n"
                "  UserKnownHostsFile /dev/null\n"
                "  GlobalKnownHostsFile /dev/null\n"
                "  LogLevel ERROR\n"
                "  BatchMode yes\n"
                # A dead host or link shows within about 3 s.
                "  ServerAliveInterval 1\n"
                "  ServerAliveCountMax 3\n"
                "  ConnectTimeout 10\n"
            )
        with open(self.ssh_config, "w") as f:
            f.write("\n".join(blocks))
        for name, address in self.addresses.items():
            with open(self._path(f"sshd_config_{name}"), "w") as f:
                f.write(
                    f"ListenAddress {address}\n"
                    "Port 22\n"
                    f"HostKey {self._path('host_key')}\n"
                    f"AuthorizedKeysFile {self._path('authorized_keys')}\n"
                    f"PidFile {self._path(f'sshd_{name}.pid')}\n"
                    "PermitRootLogin prohibit-password\n"
                    "PubkeyAuthentication yes\n"
                    "PasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\n"
                    "UsePAM no\n"
                    # The keys sit under /tmp, which is world-writable.
                    "StrictModes no\n"
                    "PrintMotd no\n"
                    "PrintLastLog no\n"
                    # A client gone silent (its host's link down) ends its
                    # session, and so its worker, within about 3 s.
                    "ClientAliveInterval 1\n"
                    "ClientAliveCountMax 3\n"
                    "MaxStartups 100\n"
                    "MaxSessions 100\n"
                    "LogLevel ERROR\n"
                )

    def _write_hosts_files(self) -> None:
        if not os.path.isdir(NETNS_ETC):
            os.makedirs(NETNS_ETC)
            self._made_netns_etc = True
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost"]
        lines += [f"{a}\t{n}" for n, a in self.addresses.items()]
        for ns in self.namespaces.values():
            os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
            with open(os.path.join(NETNS_ETC, ns, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")

    def _start_sshd(self, sshd: str, name: str) -> None:
        config = self._path(f"sshd_config_{name}")
        log = open(self._path(f"sshd_{name}.log"), "w")
        with log:
            self._sshd[name] = subprocess.Popen(
                self.wrap(name, [sshd, "-D", "-e", "-f", config]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_SECONDS
        for name, address in self.addresses.items():
            while not _accepts(address, 22):
                proc = self._sshd[name]
                if proc.poll() is not None or time.monotonic() > deadline:
                    with open(self._path(f"sshd_{name}.log")) as f:
                        log = f.read().strip()
                    raise RuntimeError(
                        f"sshd of emulated host {name} ({address}) did not "
                        f"start (exit code {proc.poll()}); its log: {log}"
                    )
                time.sleep(0.05)


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
