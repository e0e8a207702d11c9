"""The architecture as a test: the import graph of the project's own modules (core.*, workbench.*), read with `ast`.

How the graph is built (what counts as an edge):
- Every `import` and `from ... import` counts wherever it is: at module level, in a class body, or inside a
  function (a lazy import is still a dependency). A constant-string `importlib.import_module(...)` or
  `__import__(...)` counts too. Imports under `if TYPE_CHECKING:` do not count (they never run); its `else:` does.
- An imported name resolves to the longest prefix that is a project module: `from core.tree import DraftTree`
  -> core.tree; `from core import tree` -> core.tree (a submodule); `from core import name` -> core (the
  package's __init__). Relative imports resolve against the importing module's package.
- Packages: a package is the module of its __init__.py. An __init__ importing its own submodules (a re-export)
  is an edge like any other: importing the package runs them, so `pkg -> pkg.a -> x -> pkg` is a cycle. Python's
  implicit import of parent packages (`import core.tree` runs core/__init__) adds no edge. A submodule
  importing its package's __init__ is an edge.
- Entry points: a module that loads an entry-point group (importlib.metadata's `entry_points(group=...)` or
  `.select(group=...)`, pkg_resources' `iter_entry_points`) imports, at run time, every module pyproject.toml
  lists in that group: an edge to each (to every group's when the group is not a constant). A cycle through
  such an edge is a cycle like any other; and core loads no entry points at all (what it runs, it imports).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "workbench")
CORE_FORBIDDEN = ("gradio", "sqlalchemy", "pandas", "plotly")  # UI, SQL, tables and figures live in workbench


def module_name(path: Path, base: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(base).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class Import(NamedTuple):
    name: str  # absolute dotted name; `from a import b` gives a.b
    line: int
    lazy: bool  # inside a function
    module: str  # the part that must be a module: a for `from a import b`, a.b for `import a.b`


def raw_imports(tree: ast.AST, module: str, is_package: bool) -> list[Import]:
    """Every import that can run."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, lazy)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, lazy, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                head = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(head + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.extend(
                Import(f"{base}.{alias.name}" if alias.name != "*" else base, node.lineno, lazy, base)
                for alias in node.names
            )
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "__import__") or (
                isinstance(f, ast.Attribute) and f.attr == "import_module"
            ):
                found.append(Import(node.args[0].value, node.lineno, lazy, node.args[0].value))
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


ENTRY_POINT_CALLS = ("entry_points", "iter_entry_points", "load_entry_point")  # importlib.metadata, pkg_resources
ENTRY_POINT_MODULES = ("importlib.metadata.entry_points", "importlib_metadata.entry_points", "pkg_resources")


class EntryPointLoad(NamedTuple):
    group: str | None  # None: a group not given as a constant (any group)
    line: int


def entry_point_loads(tree: ast.AST) -> list[EntryPointLoad]:
    """Every call that loads entry points: entry_points(group=G) / entry_points().select(group=G) /
    iter_entry_points(G) / load_entry_point(dist, G, name), with its group when a constant names it."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    name = {
        id(c): c.func.id if isinstance(c.func, ast.Name) else c.func.attr if isinstance(c.func, ast.Attribute) else None
        for c in calls
    }

    def group_of(call: ast.Call, position: int) -> str | None:
        for k in call.keywords:
            if k.arg == "group":
                return k.value.value if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) else None
        arg = call.args[position] if len(call.args) > position else None
        return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None

    selected = {
        id(c.func.value)
        for c in calls
        if name[id(c)] == "select"
        and isinstance(c.func, ast.Attribute)
        and isinstance(c.func.value, ast.Call)
        and name[id(c.func.value)] == "entry_points"
    }
    found = []
    for c in calls:
        n = name[id(c)]
        if n == "select" and id(getattr(c.func, "value", None)) in selected:
            found.append(EntryPointLoad(group_of(c, 99), c.lineno))
        elif n in ENTRY_POINT_CALLS and id(c) not in selected:
            found.append(
                EntryPointLoad(
                    group_of(c, 1 if n == "load_entry_point" else 0 if n == "iter_entry_points" else 99), c.lineno
                )
            )
    return found


def pyproject_entry_points(pyproject: Path) -> dict[str, list[str]]:
    """Entry-point group -> the modules its entry points name (`module:attr`), from [project.entry-points.*]."""
    import tomllib  # Python 3.11+; the project test skips without it

    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    return {
        group: [value.partition(":")[0].strip() for value in points.values()]
        for group, points in project.get("entry-points", {}).items()
    }


def add_entry_point_edges(
    graph: dict[str, dict[str, tuple[int, bool]]], base: Path, entry_points: dict[str, list[str]]
) -> dict[tuple[str, str], str]:
    """Add an edge from each module that loads a group to each project module the group's entry points name;
    returns {(loader, module): group} for those edges (an edge that is also an import stays the import)."""
    via: dict[tuple[str, str], str] = {}
    for loader in sorted(graph):
        path = _module_path(base, loader)
        if path is None:
            continue
        for group, line in entry_point_loads(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for g in [group] if group is not None else sorted(entry_points):
                for target in entry_points.get(g, []):
                    parts = target.split(".")
                    hit = next(
                        (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in graph), None
                    )
                    if hit is not None and hit != loader and hit not in graph[loader]:
                        graph[loader][hit] = (line, True)
                        via[(loader, hit)] = g
    return via


def _module_path(base: Path, module: str) -> Path | None:
    parts = module.split(".")
    for path in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


def build_graph(
    base: Path, packages: tuple[str, ...]
) -> tuple[dict[str, dict[str, tuple[int, bool]]], dict[str, list[Import]]]:
    """(edges: module -> {imported project module: (first line, lazy)}, every import per module). A folder
    without __init__.py (a namespace package) is a module with no imports."""
    files: dict[str, tuple[Path | None, bool]] = {}
    for pkg in packages:
        for path in sorted((base / pkg).rglob("*.py")):
            name, is_package = module_name(path, base)
            files[name] = (path, is_package)
            parts = name.split(".")
            for n in range(1, len(parts)):
                files.setdefault(".".join(parts[:n]), (None, True))
    graph: dict[str, dict[str, tuple[int, bool]]] = {name: {} for name in files}
    raw: dict[str, list[Import]] = {}
    for name, (path, is_package) in files.items():
        raw[name] = (
            raw_imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), name, is_package) if path else []
        )
        for target, line, lazy, _ in raw[name]:
            parts = target.split(".")
            hit = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in files), None)
            if hit is None or hit == name:
                continue  # not ours, or itself
            graph[name].setdefault(hit, (line, lazy))
    return graph, raw


def find_cycles(graph: dict[str, dict]) -> list[list[str]]:
    """Import cycles as [a, ..., a]: in each strongly connected component, a shortest cycle through each module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan; the graph has tens of modules, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1 or v in graph[v]:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    cycles: list[list[str]] = []
    for comp in sorted(components):
        members = set(comp)
        for start in comp:  # a shortest cycle through each member, so every loop to break is named
            paths, queue = {start: [start]}, [start]
            while queue:  # breadth first, inside the component, back to start
                v = queue.pop(0)
                if start in graph[v]:
                    ring = paths[v]
                    i = ring.index(min(ring))
                    ring = ring[i:] + ring[:i]  # one rotation per cycle: from its smallest name
                    if ring + [ring[0]] not in cycles:
                        cycles.append(ring + [ring[0]])
                    break
                for w in sorted(graph[v]):
                    if w in members and w not in paths:
                        paths[w] = paths[v] + [w]
                        queue.append(w)
    return cycles


def describe(
    cycle: list[str], graph: dict[str, dict[str, tuple[int, bool]]], via: dict[tuple[str, str], str] | None = None
) -> str:
    def how(a: str, b: str) -> str:
        if via and (a, b) in via:
            return f"line {graph[a][b][0]}, loading entry-point group {via[(a, b)]!r}"
        return f"line {graph[a][b][0]}{', inside a function' if graph[a][b][1] else ''}"

    hops = [f"{a} -> {b} ({how(a, b)})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(cycle) + "\n      " + "\n      ".join(hops)


def missing_modules(graph: dict[str, dict], raw: dict[str, list[Import]], packages: tuple[str, ...]) -> list[str]:
    """Imports naming a module of the packages that does not exist (left behind by a move)."""
    return [
        f"{m} line {imp.line}: {imp.module}"
        for m, imports in sorted(raw.items())
        for imp in imports
        if any(_in(p, imp.module) for p in packages) and imp.module not in graph
    ]


def _in(pkg: str, name: str) -> bool:
    return name == pkg or name.startswith(pkg + ".")


# ---- the checker on a small synthetic package ------------------------------------------------------


def write(base: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)


def test_the_graph_builder_on_a_synthetic_package_with_a_cycle(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": "from . import a\nfrom pkg.b import helper\n",  # re-exports: edges too
            "pkg/a.py": "import os\nimport pkg.b\nfrom pkg import c\n",
            "pkg/b.py": "def helper():\n    from .a import thing  # lazy\n    return thing\n",
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\nimport typing\n"
                "if TYPE_CHECKING:\n    from pkg.a import thing\nelse:\n    import pkg.sub.d\n"
                "if typing.TYPE_CHECKING:\n    import pkg.b\n"
            ),
            "pkg/sub/__init__.py": "from pkg import name_in_init\n",
            "pkg/sub/d.py": "import importlib\nfrom .. import c\nlib = importlib.import_module('sqlalchemy.orm')\n",
            "pkg/ns/e.py": "import pkg.gone\nfrom pkg.a import thing\n",  # in a folder without __init__.py
            "other/e.py": "import pkg.a\n",  # outside the packages scanned
        },
    )
    graph, raw = build_graph(tmp_path, ("pkg",))
    assert sorted(graph) == ["pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.ns", "pkg.ns.e", "pkg.sub", "pkg.sub.d"]
    assert missing_modules(graph, raw, ("pkg",)) == ["pkg.ns.e line 1: pkg.gone"]
    assert {m: sorted(e) for m, e in graph.items()} == {
        "pkg": ["pkg.a", "pkg.b"],
        "pkg.a": ["pkg.b", "pkg.c"],
        "pkg.b": ["pkg.a"],
        "pkg.c": ["pkg.sub.d"],  # the TYPE_CHECKING imports are not edges, its else branch is
        "pkg.ns": [],  # a namespace package: a module without imports
        "pkg.ns.e": ["pkg", "pkg.a"],  # a missing module falls back to the package (and is reported above)
        "pkg.sub": ["pkg"],  # a name from the package's __init__ is an edge to the package
        "pkg.sub.d": ["pkg.c"],  # relative import of a sibling package's module
    }
    assert graph["pkg.b"]["pkg.a"] == (2, True) and graph["pkg.a"]["pkg.b"] == (2, False)
    assert ("sqlalchemy.orm", 3, False, "sqlalchemy.orm") in raw["pkg.sub.d"] and ("os", 1, False, "os") in raw["pkg.a"]
    assert raw["pkg.b"] == [("pkg.a.thing", 2, True, "pkg.a")]
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.c", "pkg.sub.d", "pkg.c"]]
    text = describe(cycles[0], graph)
    assert text.startswith("pkg.a -> pkg.b -> pkg.a") and "pkg.b -> pkg.a (line 2, inside a function)" in text


def test_entry_points_are_edges_from_the_module_that_loads_their_group(tmp_path):
    pytest.importorskip("tomllib")
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core.py": (
                "from importlib.metadata import entry_points\n"
                "def load():\n    for ep in entry_points(group='pkg.plugins'):\n        ep.load()\n"
            ),
            "pkg/plugin.py": "import pkg.core\n",  # the plugin uses the loader: a cycle only through the entry point
            "pkg/other.py": "import importlib.metadata as md\nmd.entry_points().select(group='other.group')\n",
            "pkg/any.py": "import pkg_resources\nG = 'x'\nfor ep in pkg_resources.iter_entry_points(G):\n    pass\n",
            "pyproject.toml": (
                '[project]\nname = "pkg"\n[project.entry-points."pkg.plugins"]\nmine = "pkg.plugin:register"\n'
                '[project.entry-points."other.group"]\nx = "pkg.core:nothing"\n'
            ),
        },
    )
    graph, _ = build_graph(tmp_path, ("pkg",))
    assert find_cycles(graph) == []  # the imports alone have no cycle
    assert entry_point_loads(ast.parse((tmp_path / "pkg/other.py").read_text())) == [("other.group", 2)]
    assert entry_point_loads(ast.parse((tmp_path / "pkg/any.py").read_text())) == [
        (None, 3)
    ]  # not a constant: any group
    via = add_entry_point_edges(graph, tmp_path, pyproject_entry_points(tmp_path / "pyproject.toml"))
    assert via == {
        ("pkg.core", "pkg.plugin"): "pkg.plugins",
        ("pkg.other", "pkg.core"): "other.group",
        ("pkg.any", "pkg.core"): "other.group",
        ("pkg.any", "pkg.plugin"): "pkg.plugins",
    }
    cycles = find_cycles(graph)
    assert cycles == [["pkg.core", "pkg.plugin", "pkg.core"]]
    assert "pkg.core -> pkg.plugin (line 3, loading entry-point group 'pkg.plugins')" in describe(cycles[0], graph, via)


def test_find_cycles_reports_self_imports_and_nothing_for_a_dag():
    assert find_cycles({"a": {"b": (1, False)}, "b": {"c": (1, False)}, "c": {}}) == []
    assert find_cycles({"a": {"a": (3, False)}}) == [["a", "a"]]
    three = {"x": {"y": (1, False)}, "y": {"z": (1, False)}, "z": {"x": (1, True), "w": (1, False)}, "w": {}}
    assert find_cycles(three) == [["x", "y", "z", "x"]]
    # Two loops through one module (like cli <-> calibrate_cmd and cli <-> report_cmd): both are named.
    hub = {"cli": {"cal": (1, True), "rep": (2, True)}, "cal": {"cli": (3, True)}, "rep": {"cli": (4, True)}}
    assert find_cycles(hub) == [["cal", "cli", "cal"], ["cli", "rep", "cli"]]


# ---- the project ---------------------------------------------------------------------------------


class Project:
    """The project's graph and imports (a class, so a failing test does not print them all)."""

    def __init__(self) -> None:
        self.graph, self.raw = build_graph(ROOT, PACKAGES)
        self.via = add_entry_point_edges(self.graph, ROOT, pyproject_entry_points(ROOT / "pyproject.toml"))

    def imports(self, package: str):
        return [(m, imp) for m, imports in sorted(self.raw.items()) if _in(package, m) for imp in imports]

    def __repr__(self) -> str:
        return f"<import graph of {len(self.graph)} modules>"


@pytest.fixture(scope="module")
def project() -> Project:
    pytest.importorskip("tomllib")  # pyproject's entry points are edges too
    project = Project()
    # Not vacuous: the scan found the project and its edges (workbench uses core; core's modules use each other).
    assert {"core", "core.engine", "core.tree", "workbench"} <= set(project.graph)
    assert any(_in("core", t) for m, e in project.graph.items() if _in("workbench", m) for t in e)
    assert any(_in("core", t) for m, e in project.graph.items() if m.startswith("core.") for t in e)
    return project


def test_core_never_imports_workbench(project):
    found = [
        f"{m} line {imp.line}: {imp.name}{' (inside a function)' if imp.lazy else ''}"
        for m, imp in project.imports("core")
        if _in("workbench", imp.name)
    ]
    found += [
        f"{a} line {project.graph[a][b][0]}: {b} (entry-point group {group!r})"
        for (a, b), group in project.via.items()
        if _in("core", a) and _in("workbench", b)
    ]
    assert not found, "core must not reach workbench (workbench -> core only):\n  " + "\n  ".join(found)


def test_core_imports_no_ui_sql_tables_or_figures(project):
    found = [
        f"{m} line {imp.line}: {imp.name}"
        for m, imp in project.imports("core")
        if any(_in(lib, imp.name) for lib in CORE_FORBIDDEN)
    ]
    assert not found, f"core imports {', '.join(CORE_FORBIDDEN)} (they belong in workbench):\n  " + "\n  ".join(found)


def test_no_import_cycles(project):
    cycles = find_cycles(project.graph)
    assert not cycles, "import cycles (lazy imports and entry points count):\n  " + "\n  ".join(
        describe(c, project.graph, project.via) for c in cycles
    )


def test_core_loads_no_entry_points(project):
    """What core runs, it imports: a plugin loaded by core could import core back (the cycle core -> workbench ->
    core that transformers' baselines once made); the workbench registers what it adds explicitly."""
    found = [
        f"{m} line {load.line}: loads entry-point group {load.group or '(any)'}"
        for m in sorted(project.graph)
        if _in("core", m) and (path := _module_path(ROOT, m)) is not None
        for load in entry_point_loads(ast.parse(path.read_text(encoding="utf-8")))
    ]
    found += [
        f"{m} line {imp.line}: imports {imp.name}"
        for m, imp in project.imports("core")
        if any(_in(e, imp.name) for e in ENTRY_POINT_MODULES)
    ]
    assert not found, "core loads entry points:\n  " + "\n  ".join(found)


def test_every_project_import_names_a_module_that_exists(project):
    missing = missing_modules(project.graph, project.raw, PACKAGES)
    assert not missing, "imports of modules that do not exist (moved or renamed?):\n  " + "\n  ".join(missing)


if __name__ == "__main__":  # python tests/test_architecture.py prints the graph
    g, _ = build_graph(ROOT, PACKAGES)
    for m in sorted(g):
        print(m, "->", ", ".join(sorted(g[m])) or "-")
    for c in find_cycles(g):
        print("CYCLE", describe(c, g))
    sys.exit(1 if find_cycles(g) else 0)
