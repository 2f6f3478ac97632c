"""The import graph of a package tree, read statically, and the layer rules the course holds it to.

A *unit* is a folder or a single module given in a layer list; each import statement in a module gives
an edge from its unit to the unit of the module it names. A package's ``__init__.py`` may re-export
from inside its own package (a facade); every other edge must point to the same layer or one below.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    source: Path        # the importing file
    line: int
    target: str         # the dotted module (or module.attribute) it names


def _resolve(path: Path, root: Path, node: ast.ImportFrom) -> str:
    package = list(path.relative_to(root.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package[:-1]
    elif package[-1] == "__init__":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, root: Path) -> list[Edge]:
    """Every import in ``path`` of a module under the package ``root`` (a folder such as course_lib/)."""
    tree = ast.parse(path.read_text(), str(path))
    edges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(path, root, node) if node.level else node.module or ""
            names = [f"{module}.{alias.name}" for alias in node.names] or [module]
        else:
            continue
        edges += [Edge(path, node.lineno, name) for name in names if name.split(".")[0] == root.name]
    return edges


def module_file(dotted: str, root: Path) -> Path | None:
    """The file a dotted name (module, or module.attribute) lives in, under root's parent."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = root.parent.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def unit_of(path: Path, root: Path, units: list[tuple[str, ...]]) -> tuple[int, str] | None:
    """(layer index, unit) of a file: the longest unit path (relative to root) that holds it."""
    relative = path.relative_to(root).as_posix()
    best = None
    for index, layer in enumerate(units):
        for unit in layer:
            if relative == unit or relative.startswith(unit.rstrip("/") + "/"):
                if best is None or len(unit) > len(best[1]):
                    best = (index, unit)
    return best


def _is_facade(edge: Edge, target: Path) -> bool:
    return edge.source.name == "__init__.py" and target.is_relative_to(edge.source.parent)


def back_imports(root: Path, units: list[tuple[str, ...]], within: str = "") -> list[str]:
    """Imports from a unit to a higher one, as 'file:line imports target (layer a -> layer b)'.

    ``within`` limits the check to files and targets under that folder of root (sim's own layers)."""
    scope = root / within if within else root
    problems = []
    for path in sorted(scope.rglob("*.py")):
        source = unit_of(path, root, units)
        for edge in imports(path, root):
            target = module_file(edge.target, root)
            if target is None or not target.is_relative_to(scope) or _is_facade(edge, target):
                continue
            goal = unit_of(target, root, units)
            if source and goal and goal[0] > source[0]:
                problems.append(f"{path.relative_to(root.parent)}:{edge.line} imports {edge.target} "
                                f"({source[1]} -> {goal[1]}, a higher layer)")
    return problems


def _room(path: Path, root: Path, units) -> str:
    """The folder a file is in, or the unit it is listed as (a module alone in a layer is a room of its own:
    grading's settings.py at the bottom and cli.py at the top share a folder, not a layer)."""
    unit = unit_of(path, root, units) if units else None
    if unit and unit[1].endswith(".py"):
        return unit[1]
    return path.parent.relative_to(root).as_posix()


def folder_cycles(root: Path, units=None) -> list[list[str]]:
    """Import circles between folders (facade edges of __init__.py left out), each as the rooms it passes."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for edge in imports(path, root):
            target = module_file(edge.target, root)
            if target is None or _is_facade(edge, target):
                continue
            a, b = _room(path, root, units), _room(target, root, units)
            if a != b:
                graph.setdefault(a, set()).add(b)
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return cycles


def names_in_imports(root: Path, forbidden: tuple[str, ...]) -> list[str]:
    """Imports, or string constants, in root's files that name a forbidden top-level folder."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]
            for name in names:
                hit = [word for word in forbidden if name == word or name.startswith((f"{word}.", f"{word}/"))
                       or f"/{word}/" in name or f"{word}/" == name[:len(word) + 1]]
                found += [f"{path.relative_to(root.parent)}:{node.lineno} names {word!r}" for word in hit]
    return found
