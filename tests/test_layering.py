"""How the package is put together, read from its source: private
TensorFlow/Keras API only in `_compat`, and no import cycles."""

import ast
import pathlib
import re

import keras_hybrid

PACKAGE = pathlib.Path(keras_hybrid.__file__).parent
PRIVATE_MODULES = re.compile(r"^(tensorflow\.(python|core)|keras\.src)(\.|$)")
COMPAT = PACKAGE / "_compat"


def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(path: pathlib.Path) -> list[str]:
    """Every module `path` imports, at top level or inside functions."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_private_api_is_imported_only_in_compat():
    offenders = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in PACKAGE.rglob("*.py")
        if COMPAT not in path.parents
        for name in _imports(path)
        if PRIVATE_MODULES.match(name)
    )
    assert offenders == []


def test_the_check_sees_a_private_import():
    # The check above must be able to fail.
    assert PRIVATE_MODULES.match("tensorflow.python.ops.collective_ops")
    assert PRIVATE_MODULES.match("keras.src")
    assert not PRIVATE_MODULES.match("tensorflow.keras")
    compat_imports = [
        name for path in COMPAT.rglob("*.py") for name in _imports(path)
    ]
    assert any(PRIVATE_MODULES.match(name) for name in compat_imports)


def _graph() -> dict[str, set[str]]:
    """Module -> package modules it imports (package `__init__`s left out:
    they only re-export)."""
    modules = _modules()
    inits = {m for m, p in modules.items() if p.name == "__init__.py"}
    graph = {}
    for module, path in modules.items():
        if module in inits:
            continue
        graph[module] = {
            name
            for name in _imports(path)
            if name in modules and name not in inits and name != module
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
