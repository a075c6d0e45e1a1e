"""The package's shape holds: no import cycles (module level or inside functions), no import of the
repository's research/, benchmarks/ or docgen/ (not installed), no caller switches on a detector, Fisher,
aggregation or model-family class outside the module that defines it, and every detector implements the
fit hook its ``keeps_held_out`` flag names."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import roseood
from roseood.curvature.fisher import FISHERS
from roseood.detectors import DETECTORS, Detector
from roseood.detectors.aggregation import AGGREGATIONS
from roseood.models.families import FAMILIES

PACKAGE = Path(roseood.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a module's syntax tree, parsed once for all the tests of this file."""
    return tuple(ast.walk(ast.parse(path.read_text())))


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports (``from pkg import name`` counts as the submodule
    ``pkg.name`` where that is a module, else as ``pkg``); imports inside functions included."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _nodes(path):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for name in names:
                target = _resolve(name, modules)
                # a package importing its own submodules (re-exports) is not a dependency on itself
                if target and target != mod and not target.startswith(mod + "."):
                    graph[mod].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of modules, or None (depth-first search with colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and "roseood.detectors.base" in graph["roseood.detectors.rose"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_package_never_imports_the_repositorys_research_or_benchmarks():
    """research/, benchmarks/ and docgen/ are not installed: the package names them in no import (module
    level or inside a function), so the wheel runs without them."""
    offences = []
    for mod, path in _modules().items():
        for node in _nodes(path):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            outside = [n for n in names if n.split(".")[0] in ("research", "benchmarks", "docgen")]
            offences += [f"{mod}:{node.lineno} {n}" for n in outside]
    assert not offences, "\n".join(offences)


def test_no_isinstance_on_plug_in_classes_outside_their_own_module():
    classes = {
        cls.__name__: cls.__module__
        for cls in [*DETECTORS.values(), *FISHERS.values(), *AGGREGATIONS.values()]
        + [family.cls for family in FAMILIES.values()]
        if cls.__module__.startswith("roseood.")
    }
    offences = []
    for mod, path in _modules().items():
        for node in _nodes(path):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                continue
            second = node.args[1]
            named = second.elts if isinstance(second, ast.Tuple) else [second]
            for item in named:
                name = item.attr if isinstance(item, ast.Attribute) else getattr(item, "id", None)
                if name in classes and classes[name] != mod:
                    offences.append(f"{mod}:{node.lineno} {ast.unparse(node)}")
    assert not offences, "\n".join(offences)


def test_no_contract_of_a_model_or_detector_is_read_by_name():
    """What a model or detector may offer beyond its base contract is a protocol of roseood.contracts,
    checked with isinstance: getattr(model, "rows_per_input") would hide it from mypy and from readers."""
    offences = []
    for mod, path in _modules().items():
        for node in _nodes(path):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and re.fullmatch(r"(self\.)?(model|detector)\w*", ast.unparse(node.args[0]))
            ):
                offences.append(f"{mod}:{node.lineno} {ast.unparse(node)}")
    assert not offences, "\n".join(offences)


def test_every_detector_implements_the_fit_hook_its_keeps_held_out_flag_names():
    wrong = [
        cls.__name__
        for cls in DETECTORS.values()
        if (cls._fit_apart is Detector._fit_apart or cls.held_out_share is Detector.held_out_share)
        == cls.keeps_held_out
        or (cls._fit is Detector._fit) != cls.keeps_held_out
    ]
    assert not wrong
    assert {cls.__name__ for cls in DETECTORS.values() if cls.keeps_held_out} == {"ROSE", "Ensemble"}
