"""The import graph between pdeladder's packages, read from the source with ``ast``: no cycles,
and the layering of DESIGN.md's flow of work (issue 33, item 3).

Every ``import``/``from ... import`` of a ``pdeladder`` module counts, wherever it stands: at
module level, inside a function, or under ``TYPE_CHECKING``. An import moved into a function still
runs when the function does, and the dependency is the same; counting only module-level imports
would let a cycle be hidden instead of removed.

Two views of the graph:

- packages: ``pdeladder.solvers``, ``.curriculum``, ``.dataset``, ``.trainer``, ``.flows``,
  ``.examples``, each with its subpackages, and each module of ``core/`` (``pdeladder.cli``,
  ``pdeladder.errors``, ...) as its own node, since ``core/`` is a set of modules, not a package;
- subpackages: each subpackage (``pdeladder.trainer.distributed``, ``pdeladder.dataset.export``,
  ...) is one node and each module directly in a top-level package its own node; a cycle fails
  when it passes through a subpackage (cycles between two modules are not package cycles).
"""

import ast
import itertools
import tomllib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).parent.parent

#: DESIGN.md's flow of work, bottom to top: the core helpers, the families (a family returns
#: arrays and metadata, the caller decides where they go), the store, the curriculum (plans
#: and materializes samples into a store), the trainer (trains along a curriculum from a store),
#: the flows (wrap these steps), and the CLI over all of them. A package imports only from its
#: own layer or those below it.
LAYERS = [
    {
        "pdeladder",
        "pdeladder.errors",
        "pdeladder.lazy",
        "pdeladder.network",
        "pdeladder.outputs",
        "pdeladder.processes",
        "pdeladder.ray_runtime",
        "pdeladder.slabs",
    },
    {"pdeladder.solvers"},
    {"pdeladder.dataset"},
    {"pdeladder.curriculum", "pdeladder.examples"},
    {"pdeladder.trainer"},
    {"pdeladder.flows"},
    {"pdeladder.cli"},
]

#: Subpackages that import nothing from the named ones: the model and its layers know nothing
#: of ranks (STYLE.md, trainer's distributed parts): parallelism is applied to them from outside.
FORBIDDEN = {
    "pdeladder.trainer.models": {"pdeladder.trainer.distributed", "pdeladder.trainer.training"},
    "pdeladder.trainer.layers": {"pdeladder.trainer.distributed", "pdeladder.trainer.training"},
}


def modules() -> dict[str, tuple[Path, bool]]:
    """Every pdeladder module: name -> (file, is a package's ``__init__``)."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {}
    for package, folder in setup["package-dir"].items():
        if package != "pdeladder" and "." in package.removeprefix("pdeladder."):
            continue
        for file in (ROOT / folder).rglob("*.py"):
            parts = file.relative_to(ROOT / folder).with_suffix("").parts
            init = parts[-1] == "__init__"
            if init:
                parts = parts[:-1]
            if package == "pdeladder" and parts and (ROOT / folder / parts[0]).is_dir():
                continue  # a subpackage folder under core/ would have its own mapping
            found[".".join((package, *parts))] = (file, init)
    return found


def imported(name: str, file: Path, init: bool, known: Iterable[str]) -> set[tuple[str, int]]:
    """The pdeladder modules that module ``name`` imports anywhere, with their line numbers."""
    known = set(known)
    base = name if init else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            out |= {(alias.name, node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                module = f"{parent}.{node.module}" if node.module else parent
            else:
                module = node.module or ""
            out.add((module, node.lineno))
            # ``from pkg import submodule`` imports the submodule
            out |= {(f"{module}.{a.name}", node.lineno) for a in node.names}
    return {(m, line) for m, line in out if m in known}


def owner(module: str, mods: dict[str, tuple[Path, bool]], depth: int) -> str:
    """The node ``module`` belongs to: its top-level package (``depth`` 1) or subpackage
    (``depth`` 2; a module directly in a top-level package is its own node); a core module is
    always its own node."""
    parts = module.split(".")
    if len(parts) < 2 or not mods.get(".".join(parts[:2]), (None, False))[1]:
        return ".".join(parts[:2])  # the root, or a core module
    if depth == 2 and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def graph(depth: int) -> dict[tuple[str, str], list[str]]:
    """Edges between nodes -> where they are made (``file:line``)."""
    mods = modules()
    edges = defaultdict(list)
    for name, (file, init) in mods.items():
        for module, line in imported(name, file, init, mods):
            a, b = owner(name, mods, depth), owner(module, mods, depth)
            if a != b:
                edges[a, b].append(f"{file.relative_to(ROOT)}:{line}")
    return dict(edges)


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each as a cycle
    through them found by a walk."""
    succ = defaultdict(set)
    for a, b in edges:
        succ[a].add(b)
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                visit(w)
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
                comps.append(sorted(comp))

    for v in sorted({n for e in edges for n in e}):
        if v not in index:
            visit(v)
    return comps


def explain(comp: list[str], edges: dict[tuple[str, str], list[str]]) -> str:
    """One cycle through ``comp``, each edge with where it is made."""
    members = set(comp)
    path, seen = [comp[0]], {comp[0]}
    while True:  # walk inside the component until a node repeats
        nxt = sorted(b for (a, b) in edges if a == path[-1] and b in members)
        step = next((b for b in nxt if b == comp[0]), None) or next(
            (b for b in nxt if b not in seen), nxt[0]
        )
        path.append(step)
        if step in seen:
            break
        seen.add(step)
    path = path[path.index(path[-1]) :]
    return "\n".join(
        f"  {a} -> {b}  ({', '.join(edges[a, b][:3])})" for a, b in itertools.pairwise(path)
    )


def test_the_graph_sees_the_imports():
    """A sanity check of the reader: known edges of each kind are found."""
    top, sub = graph(1), graph(2)
    assert ("pdeladder.trainer", "pdeladder.dataset") in top
    assert ("pdeladder.cli", "pdeladder.flows") in top  # function-level imports
    assert ("pdeladder.curriculum", "pdeladder.errors") in top
    assert ("pdeladder.trainer.training", "pdeladder.trainer.models") in sub


def test_no_cycle_between_packages():
    edges = graph(1)
    found = cycles(edges)
    assert not found, "import cycles between packages:\n" + "\n\n".join(
        explain(c, edges) for c in found
    )


def test_no_cycle_between_subpackages():
    edges = graph(2)
    mods = modules()
    found = [c for c in cycles(edges) if any(mods.get(n, (None, False))[1] for n in c)]
    assert not found, "import cycles through subpackages:\n" + "\n\n".join(
        explain(c, edges) for c in found
    )


def test_packages_import_only_from_below():
    layer = {node: i for i, nodes in enumerate(LAYERS) for node in nodes}
    edges = graph(1)
    assert set(layer) >= {n for e in edges for n in e}, "a package missing from LAYERS"
    upward = [
        f"  {a} -> {b}  ({', '.join(where[:3])})"
        for (a, b), where in sorted(edges.items())
        if layer[b] > layer[a]
    ]
    assert not upward, "imports from a higher layer (DESIGN.md's flow of work):\n" + "\n".join(
        upward
    )


def test_model_and_layers_know_nothing_of_ranks():
    edges = graph(2)
    found = [
        f"  {a} -> {b}  ({', '.join(where[:3])})"
        for (a, b), where in sorted(edges.items())
        if b in FORBIDDEN.get(a, ())
    ]
    assert not found, "the model imports distribution or training:\n" + "\n".join(found)
