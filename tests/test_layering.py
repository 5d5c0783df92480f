"""How the package is put together, read from its source.

- Private TensorFlow/Keras API is imported only in `_compat`.
- Folders are layers, in the order `docs/architecture.md` opens with:
  a module imports only from its own folder or from folders below it,
  function-level imports included.
- The runtime never imports the tools (`emulation`, `testing`,
  `benchmark`, `simulate`).
- No import cycles between modules, lazy ones included.

Each check has a companion test that shows it can fail.
"""

import ast
import pathlib
import re

import keras_hybrid

PACKAGE = pathlib.Path(keras_hybrid.__file__).parent
PRIVATE_MODULES = re.compile(r"^(tensorflow\.(python|core)|keras\.src)(\.|$)")
COMPAT = PACKAGE / "_compat"

# Bottom to top. A module belongs to the deepest folder listed here that
# holds it; "" is the package's own modules (the facade).
LAYERS = (
    "utils",
    "_compat",
    "contract",
    "launch",
    "launch/elastic",
    "sharding",
    "comm",
    "costs",
    "plan",
    "sparse",
    "optimizers",
    "strategy",
    "dynamic",
    "checkpoint",
    "elastic",
    "callbacks",
    "layers",
    "patches",
    "",
    "emulation",
    "testing",
    "testing/soak",
    "benchmark",
    "simulate",
)
TOOLS = ("emulation", "testing", "testing/soak", "benchmark", "simulate")
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


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


def _package_imports() -> dict[str, set[str]]:
    """Module -> package modules it imports. A package's `__init__` counts
    for the package's folder; `from package import name` counts as
    importing the module `package.name` if there is one, else the
    package."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        names = set(_imports(path)) & set(modules)
        graph[module] = {
            name
            for name in names
            if name != module
            and not any(
                other.rpartition(".")[0] == name and other != module
                for other in names
            )
        }
    return graph


def _folder(module: str, is_package: bool) -> str:
    parts = module.split(".")[1:]
    return "/".join(parts if is_package else parts[:-1])


def layer_of(folder: str, layers=LAYERS) -> str:
    """The deepest layer of `layers` that holds `folder`."""
    best = None
    for layer in layers:
        inside = folder == layer or (layer and folder.startswith(layer + "/"))
        if (inside or layer == "") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def against_order(graph, is_package, layers=LAYERS) -> list[str]:
    """Imports that go up the declared order of `layers`."""
    rank = {layer: i for i, layer in enumerate(layers)}
    found = []
    for module, imported in sorted(graph.items()):
        here = layer_of(_folder(module, is_package(module)), layers)
        for name in sorted(imported):
            there = layer_of(_folder(name, is_package(name)), layers)
            if rank[there] > rank[here]:
                found.append(
                    f"{module} ({here or 'facade'}) -> {name} "
                    f"({there or 'facade'})"
                )
    return found


def _is_package(module: str) -> bool:
    return _modules()[module].name == "__init__.py"


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


def test_every_folder_is_a_declared_layer():
    folders = {
        str(path.parent.relative_to(PACKAGE))
        for path in PACKAGE.rglob("__init__.py")
    }
    folders = {"" if f == "." else f for f in folders}
    assert sorted(folders - set(LAYERS)) == []
    assert sorted(set(LAYERS) - folders) == []


def test_imports_follow_the_layers():
    assert against_order(_package_imports(), _is_package) == []


def test_the_layer_check_finds_an_upward_import():
    # `sparse` importing `strategy` (above it), lazily or not, is caught;
    # the reverse, and imports within a layer, are not.
    graph = {
        "keras_hybrid.sparse.lookup": {"keras_hybrid.strategy.cluster"},
        "keras_hybrid.strategy.cluster": {"keras_hybrid.sparse.lookup"},
        "keras_hybrid.launch.elastic.driver": {"keras_hybrid.launch.ssh"},
        "keras_hybrid.launch.ssh": {"keras_hybrid.launch.elastic.driver"},
        "keras_hybrid.strategy.cluster_x": {"keras_hybrid.strategy.cluster"},
    }
    found = against_order(graph, lambda module: False)
    assert found == [
        "keras_hybrid.launch.ssh (launch) -> "
        "keras_hybrid.launch.elastic.driver (launch/elastic)",
        "keras_hybrid.sparse.lookup (sparse) -> "
        "keras_hybrid.strategy.cluster (strategy)",
    ]


def test_the_runtime_never_imports_the_tools():
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    lowest_tool = min(rank[t] for t in TOOLS)
    # Every tool sits above every runtime folder, so the order check above
    # covers this; this pins the order itself.
    runtime = [layer for layer in LAYERS if layer not in TOOLS]
    assert all(rank[layer] < lowest_tool for layer in runtime)
    offenders = sorted(
        f"{module} -> {name}"
        for module, imported in _package_imports().items()
        if layer_of(_folder(module, _is_package(module))) not in TOOLS
        for name in imported
        if layer_of(_folder(name, _is_package(name))) in TOOLS
    )
    assert offenders == []


def folder_map(text: str) -> list[str]:
    """The folders of the first fenced block of `text`, in order."""
    block = text.split("```", 2)[1]
    return re.findall(r"^keras_hybrid/([\w/]*?)/?(?:\s|$)", block, re.M)


def test_architecture_doc_opens_with_these_layers():
    # The folder map that opens docs/architecture.md lists the layers in
    # this order, drawn top to bottom.
    assert folder_map(ARCHITECTURE.read_text()) == list(reversed(LAYERS))


def test_the_doc_check_reads_the_map():
    text = (
        "# A\n\n```text\nkeras_hybrid/simulate/  tools\n"
        "keras_hybrid/   facade\n```\n"
    )
    assert folder_map(text) == ["simulate", ""]


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


def test_folder_graph_has_no_cycles():
    folders = {}
    for module, imported in _package_imports().items():
        here = layer_of(_folder(module, _is_package(module)))
        for name in imported:
            there = layer_of(_folder(name, _is_package(name)))
            if there != here:
                folders.setdefault(here, set()).add(there)
    assert _cycles(folders) == []
