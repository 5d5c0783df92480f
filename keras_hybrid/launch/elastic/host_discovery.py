"""`HostDiscovery`: runs `--host-discovery-script` and reads its slots."""

import logging
import subprocess
import time

logger = logging.getLogger(__name__)


class HostDiscovery:
    """Asks a script which hosts and slots are available now.

    The script prints one `host:slots` line per host (`host` alone means
    one slot), as for `horovodrun --host-discovery-script`. Blank lines and
    lines starting with `#` are ignored. A failing script or a malformed
    line keeps the previous answer and is logged once per message.

    Args:
        script: String. Path of an executable script.
        timeout_seconds: Float. How long one run may take. Defaults to `10`.

    Example:

    ```python
    slots = HostDiscovery("./hosts.sh").slots()  # [("localhost", 4)]
    ```
    """

    def __init__(self, script: str, timeout_seconds: float = 10.0) -> None:
        self.script = script
        self.timeout_seconds = timeout_seconds
        self._last: list[tuple[str, int]] = []
        self._logged: set[str] = set()

    def slots(self) -> list[tuple[str, int]]:
        """Runs the script; returns `[(host, slots), ...]` in its order."""
        try:
            out = subprocess.run(
                [self.script],
                capture_output=True,
                text=True,
                timeout=self.timeout_seconds,
                check=True,
            ).stdout
            hosts = parse_slots(out)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            self.log_once(
                f"host discovery script {self.script!r} failed ({error}); "
                "keeping the previous answer"
            )
            return list(self._last)
        self._last = hosts
        return list(hosts)

    def wait_for(
        self, needed: int, timeout_seconds: float, poll_seconds: float
    ) -> list[tuple[str, int]] | None:
        """Runs the script until it reports `needed` slots; returns its
        answer, or None (logged) after `timeout_seconds`."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            hosts = self.slots()
            slots = sum(n for _, n in hosts)
            if slots >= needed:
                return hosts
            if time.monotonic() >= deadline:
                logger.error(
                    "host discovery reported %d slots, fewer than --min-np "
                    "%d, for %g s (--elastic-timeout); giving up.",
                    slots,
                    needed,
                    timeout_seconds,
                )
                return None
            time.sleep(poll_seconds)

    def total(self) -> int:
        """Int. The number of slots the script reports now."""
        return sum(slots for _, slots in self.slots())

    def log_once(self, message: str) -> None:
        """Logs `message` as a warning the first time only."""
        if message not in self._logged:
            self._logged.add(message)
            logger.warning("%s", message)


def parse_slots(text: str) -> list[tuple[str, int]]:
    """Parses `host:slots` lines.

    Raises:
        ValueError: On a line that is not `host` or `host:slots` with
            slots >= 0.
    """
    hosts = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        host, _, slots = line.partition(":")
        if not slots:
            slots = "1"
        if not host or not slots.isdigit():
            raise ValueError(
                "Each line of the discovery script's output must be "
                f"`host:slots`. Received: {line!r}"
            )
        hosts.append((host, int(slots)))
    return hosts
