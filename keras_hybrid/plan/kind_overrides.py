"""User overrides of a variable's kind, matched like Keras' `LayoutMap`."""

import re

KINDS = ("dense", "sparse")


def check_overrides(overrides: dict | None) -> dict[str, str]:
    """Validates a `{name or regex: kind}` map and returns a copy."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise TypeError(
            "`overrides` must be a dict mapping variable paths or regexes "
            f"to a kind. Received: overrides={overrides!r}"
        )
    for key, kind in overrides.items():
        if kind not in KINDS:
            raise ValueError(
                f"Override kinds must be one of {KINDS}. Received: "
                f"{key!r}: {kind!r}"
            )
        try:
            re.compile(key)
        except re.error as e:
            raise ValueError(
                f"Override key {key!r} is neither a variable path nor a "
                f"valid regex: {e}"
            ) from e
    return dict(overrides)


def override_for(path: str, overrides: dict[str, str]) -> str | None:
    """The kind `overrides` sets for `path`, or None.

    An exact key wins; otherwise the single regex that full-matches `path`.

    Raises:
        ValueError: If more than one regex full-matches `path`.
    """
    if path in overrides:
        return overrides[path]
    matches = [k for k in overrides if re.fullmatch(k, path)]
    if len(matches) > 1:
        raise ValueError(
            f"Variable {path!r} matches more than one override pattern: "
            f"{matches}. Make the patterns disjoint or add the exact path."
        )
    return overrides[matches[0]] if matches else None
