"""The architecture, checked on the source (AST): sizes, layers, no import cycles, flows that only sequence.

- files <= 400 lines and functions <= 60 lines (ruff checks complexity <= 10 and statements <= 60);
- ``tasks/core`` and ``gpu_kernels`` never import Prefect, the task wrappers or the flows;
- inside ``tasks/core``, the foundation (flat modules) imports no sub-package, and a sub-package imports only
  the foundation, ``gpu_kernels`` and the layers below it (training < stages; checklist; benchmarks on top);
- ``flows/`` defines no task; and no module imports itself back through any chain.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("flows", "tasks", "gpu_kernels", "deployments")
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 60
# which sub-packages of tasks/core each one may import (the foundation is open to all)
CORE_LAYERS = {
    "training": set(),
    "stages": {"training"},
    "checklist": set(),
    "benchmarks": {"stages", "training"},
    "report": {"checklist"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (imports inside functions count; relative ones resolved)."""
    package = list(path.relative_to(REPO).parent.parts) if path.is_relative_to(REPO) else []
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names |= {f"{module}.{a.name}" for a in node.names}
    return names


def _project_imports(path: Path) -> set[str]:
    return {n for n in _imports(path) if n in MODULES}


def _core_layer(module: str) -> str | None:
    """'foundation' for tasks.core.<module>, the sub-package name for tasks.core.<pkg>.<module>, else None."""
    parts = module.split(".")
    if parts[:2] != ["tasks", "core"] or len(parts) < 3:
        return None
    return parts[2] if len(parts) > 3 else ("foundation" if parts[2] not in CORE_LAYERS else parts[2])


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_sizes(module):
    path = MODULES[module]
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_FILE_LINES, f"{path} has {len(text.splitlines())} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            assert length <= MAX_FUNCTION_LINES, f"{path}:{node.lineno} {node.name} is {length} lines"


def test_core_and_kernels_never_import_the_orchestrator_or_wrappers():
    for module, path in MODULES.items():
        if module.startswith(("tasks.core", "gpu_kernels")):
            bad = {n for n in _imports(path) if n.split(".")[0] in ("prefect", "flows", "deployments")}
            bad |= {n for n in _project_imports(path) if n.startswith("tasks.") and not n.startswith("tasks.core")}
            assert not bad, f"{path} imports {sorted(bad)}"


def test_core_layers_import_only_downward():
    for module, path in MODULES.items():
        layer = _core_layer(module)
        if layer is None:
            continue
        for target in _project_imports(path):
            other = _core_layer(target)
            if other is None or other == "foundation" or other == layer:
                continue
            allowed = set() if layer == "foundation" else CORE_LAYERS[layer]
            assert other in allowed, f"{module} ({layer}) imports {target} ({other})"


def test_flows_define_no_tasks():
    for module, path in MODULES.items():
        if not module.startswith("flows"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
                assert "task" not in names, f"{path}:{node.lineno} defines the task {node.name}"


def test_no_import_cycles():
    graph = {m: {t for t in _project_imports(p) if t != m} for m, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(m: str, chain: list[str]) -> None:
        state[m] = 1
        for t in graph.get(m, ()):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*chain[chain.index(t) :], t]))
            if t not in state:
                visit(t, [*chain, t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_the_layering_test_itself_catches_a_violation(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from tasks.core.stages.features import build_features\n")
    assert "tasks.core.stages.features" in _project_imports(bad)
    assert _core_layer("tasks.core.config") == "foundation" and _core_layer("tasks.core.stages.raw") == "stages"
