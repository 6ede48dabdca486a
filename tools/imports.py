#!/usr/bin/env python3
"""How bench's modules import each other: import loops and function-local imports, read from the source.

    python -m tools.imports [--json] [PACKAGE_DIR]

A module is *heavy* when importing it imports a heavy third-party library (HEAVY) at module level (an
import, or a call of one of bench's loaders, HEAVY_LOADERS), itself or through a bench module it imports at
module level. A function-local import of a bench module is *kept* when the imported module is heavy (the
import keeps that library off the start-up path of every command that does not need it); any other
function-local import of a bench module is *needless*.

A loop is a strongly connected component of the graph of every import of a bench module by another:
function-local ones included, and a module named in a string (the registries load their modules through
importlib). A package's ``__init__``, which Python runs before any of its modules, is not counted as their
import. tests/unit/test_layout.py holds the package to no loops and no needless local imports.
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HEAVY = ("torch", "tensorflow", "tf_keras", "keras", "horovod", "pynvml", "matplotlib", "docker", "torchrec",
         "fbgemm_gpu", "mlflow")
# bench's own loaders of a heavy library: a module-level call of one imports that library (bench.tfutil).
HEAVY_LOADERS = ("import_tf",)
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Module:
    name: str
    top: set[str] = field(default_factory=set)  # bench modules imported at module level
    local: list[tuple[str, int]] = field(default_factory=list)  # (bench module, line) imported in a function
    dynamic: set[str] = field(default_factory=set)  # bench modules named in a string (importlib, registries)
    heavy_direct: bool = False


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.ImportFrom | ast.Import, here: str, is_package: bool, names: set[str]) -> list[str]:
    """The bench modules an import statement loads (a name imported from a package may be its submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "bench"]
    base = node.module or ""
    if node.level:
        parent = here.split(".") if is_package else here.split(".")[:-1]
        parent = parent[:len(parent) - (node.level - 1)]
        base = ".".join(parent + ([base] if base else []))
    if base.split(".")[0] != "bench":
        return []
    modules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in names]
    # ``from package import module`` depends on that module; any other name, on the package itself
    return modules + ([base] if base in names and len(modules) < len(node.names) else [])


def _third_party(node: ast.ImportFrom | ast.Import) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    return [node.module.split(".")[0]] if node.module and not node.level else []


def scan(package: Path = ROOT / "bench") -> dict[str, Module]:
    paths = sorted(package.rglob("*.py"))
    names = {module_name(p, package) for p in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        mod = modules[module_name(path, package)] = Module(module_name(path, package))
        _visit(ast.parse(path.read_text(), str(path)), False, mod, path.name == "__init__.py", names)
    return modules


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _visit(node: ast.AST, in_function: bool, mod: Module, is_package: bool, names: set[str]) -> None:
    for child in ast.iter_child_nodes(node):
        nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            for target in _targets(child, mod.name, is_package, names):
                if target in (mod.name, "bench"):  # the root package is always loaded first
                    continue
                if in_function:
                    mod.local.append((target, child.lineno))
                else:
                    mod.top.add(target)
            if not in_function and any(t in HEAVY for t in _third_party(child)):
                mod.heavy_direct = True
        elif not in_function and isinstance(child, ast.Call) and _called(child) in HEAVY_LOADERS:
            mod.heavy_direct = True
        elif isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value in names:
            mod.dynamic.add(child.value)
        _visit(child, nested, mod, is_package, names)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _parents(name: str) -> set[str]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(2, len(parts))}


def heavy(modules: dict[str, Module]) -> set[str]:
    """Modules whose import (module level, followed through bench, parent packages included) imports a HEAVY
    library."""
    found = {n for n, m in modules.items() if m.heavy_direct}
    changed = True
    while changed:
        changed = False
        for n, m in modules.items():
            loads = m.top | {p for t in m.top | {n} for p in _parents(t) if p in modules}
            if n not in found and loads & found:
                found.add(n)
                changed = True
    return found


def loops(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), every import counted: module level,
    function-local, and a module named in a string (loaded by importlib, as the registries load modes)."""
    edges = {n: m.top | m.dynamic | {t for t, _ in m.local} for n, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in modules:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(modules):
        if v not in index:
            strong(v)
    return out


def report(package: Path = ROOT / "bench") -> dict:
    modules = scan(package)
    heavy_set = heavy(modules)
    local = [(n, t, line) for n, m in sorted(modules.items()) for t, line in m.local]
    return {
        "modules": len(modules),
        "loops": loops(modules),
        "local_imports": len(local),
        "kept": [f"{n}:{line} -> {t}" for n, t, line in local if t in heavy_set],
        "needless": [f"{n}:{line} -> {t}" for n, t, line in local if t not in heavy_set],
        "heavy_modules": sorted(heavy_set),
    }


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--json"]
    data = report(Path(args[0]).resolve() if args else ROOT / "bench")
    if "--json" in sys.argv[1:]:
        print(json.dumps(data, indent=1))
        return 0
    print(f"modules: {data['modules']}")
    print(f"import loops: {len(data['loops'])}")
    for loop in data["loops"]:
        print("  " + " <-> ".join(loop))
    print(f"function-local imports of bench modules: {data['local_imports']} "
          f"(kept, to a heavy module: {len(data['kept'])}; needless: {len(data['needless'])})")
    for line in data["needless"]:
        print("  needless " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
