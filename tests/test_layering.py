"""The package's import graph: no circles, and every import goes to a layer below (or beside) its module.

Every ``import`` statement of every module is read from its source, function-level imports
included, so an import deferred into a function to hide a circle is caught like any other.
The layers are those of the architecture page (docs/architecture.rst); a module of a layer may
import modules of its own layer (as long as that makes no circle) and of the layers below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "convsuite"

#: Bottom up. A name matches a module or, ending in ".", every module of a package.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "leaves",
        (
            "_version",
            "_precision",
            "_interop",
            "_errors",
            "_environ",
            "_spec",
            "_arrays",
            "_epilogue",
            "_plan_cache",
            "_capture",
            "_buffers",
            "_instrument",
            "_blas_spin",
            "_tiling",
            "_validation",
            "_nonfinite",
            "_files",
            "_forksafe",
            "_precision",
        ),
    ),
    ("runtime", ("_threads", "_thread_pools", "_timing", "testing")),
    ("backends", ("backends.", "_cython.")),
    ("choice data", ("_registry", "_rule", "_plans", "_param_search", "_machine", "_grid")),
    ("measurement", ("_tuning", "_calibrate")),
    ("policy", ("_select",)),
    ("planner", ("_planner",)),
    ("scale-out", ("distributed.",)),
    ("public functions", ("_api",)),
    ("layers", ("nn.",)),
    ("networks", ("nets.",)),
    # The package's namespace (its __init__) re-exports everything above the backends; the
    # harness, the command line and the torch modules use it as users do.
    ("package", ("",)),
    ("torch interop", ("torch.",)),
    ("harness", ("bench.",)),
    ("command line", ("cli", "cli_train", "cli_calibrate", "__main__")),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path  # "" is the package itself
    return found


MODULES = _modules()


def _layer_of(name: str) -> int:
    best, best_len = None, -1
    for rank, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if pattern.endswith("."):
                hit = name == pattern[:-1] or name.startswith(pattern)
            else:
                hit = name == pattern
            if hit and len(pattern) > best_len:
                best, best_len = rank, len(pattern)
    if best is None:
        raise AssertionError(f"module convsuite.{name} is in no layer: add it to LAYERS and the architecture page")
    return best


def _imports(name: str, path: Path) -> set[str]:
    """The convsuite modules ``name`` imports (relative to the package; "" for the package itself)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join(base + ([node.module] if node.module else []))
                module = "convsuite" + ("." + module if module else "")
            else:
                module = node.module or ""
            subs = [f"{module}.{alias.name}" for alias in node.names]
            targets = [s for s in subs if s.removeprefix("convsuite.") in MODULES and s != "convsuite"]
            if len(targets) < len(subs):
                targets.append(module)  # a name defined in the module itself
        else:
            continue
        for target in targets:
            if target == "convsuite" or target.startswith("convsuite."):
                inner = target.removeprefix("convsuite").removeprefix(".")
                while inner not in MODULES and "." in inner:
                    inner = inner.rpartition(".")[0]
                if inner in MODULES and inner != name:
                    found.add(inner)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer_of(name)


@pytest.mark.parametrize("name", sorted(MODULES), ids=lambda n: n or "convsuite")
def test_imports_go_to_layers_below(name):
    own = _layer_of(name)
    upward = sorted(t for t in GRAPH[name] if _layer_of(t) > own)
    assert not upward, f"convsuite.{name} (layer {LAYERS[own][0]!r}) imports from layers above it: " + ", ".join(
        f"{t} ({LAYERS[_layer_of(t)][0]})" for t in upward
    )


def test_no_import_circles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_reader_sees_function_level_imports(tmp_path):
    """The walk must see an import hidden in a function body, the usual way to hide a circle."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from . import _api\n    from ._plans import Plan\n")
    assert _imports("probe", source) == {"_api", "_plans"}
