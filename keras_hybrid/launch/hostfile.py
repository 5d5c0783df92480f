"""`--hostfile`: hosts and slots from a file, as `horovodrun` and
`mpirun` read it."""

import re

_LINE = re.compile(r"^(\S+?)(?::(\d+)|\s+slots\s*=\s*(\d+))?$")


def read_hostfile(path: str) -> str:
    """Reads `path` into the `--hosts` form `"h1:2,h2:2"`.

    Each line is `host slots=N`, `host:N` or `host` (one slot); blank
    lines and text after `#` are ignored.

    Raises:
        ValueError: If the file cannot be read, a line is malformed, or no
            host is listed.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ValueError(
            f"`--hostfile` must be a readable file. Received: --hostfile "
            f"{path!r} ({error.strerror})."
        ) from None
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(
                f"Line {number} of --hostfile {path!r} must be `host "
                f"slots=N` or `host:N`. Received: {raw.strip()!r}."
            )
        host, colon, slots = match.groups()
        entries.append(f"{host}:{colon or slots or 1}")
    if not entries:
        raise ValueError(
            f"`--hostfile` lists no host. Received: --hostfile {path!r}."
        )
    return ",".join(entries)
