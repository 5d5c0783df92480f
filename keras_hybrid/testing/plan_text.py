"""Reading a printed routing plan (`str(strategy.plan)`) in tests."""

from __future__ import annotations


def entry(plan_text: str, path: str) -> str:
    """The lines of `path`'s entry in a printed plan: its row (kind, shape,
    MB/worker, path), its reason and, for a table, its rows per worker.
    Raises KeyError naming the plan when `path` has no row."""
    lines = plan_text.splitlines()
    for i, line in enumerate(lines):
        fields = line.split()
        if len(fields) == 4 and fields[-1] == path:
            block = [line]
            for follow in lines[i + 1 :]:
                if not follow.startswith("    "):
                    break
                block.append(follow)
            return "\n".join(block)
    raise KeyError(f"{path!r} has no row in the plan:\n{plan_text}")


def kind(plan_text: str, path: str) -> str:
    """`sparse` or `dense`: the kind the printed plan gives `path`."""
    return entry(plan_text, path).split()[0]


def partitioned(plan_text: str, path: str) -> bool:
    """Whether the printed plan partitions `path` by rows."""
    block = entry(plan_text, path)
    return block.startswith("sparse") and "rows per worker" in block
