"""The house is one-way (DESIGN "The shape of the house"): every import inside ``libreyolo/``
points down the documented floors, and no two packages import each other.

Every ``import`` / ``from ... import`` is read from the source with ``ast``: at module level,
inside functions and under ``if TYPE_CHECKING:`` alike (a deferred import is still a
dependency). An import of a module of the same package is free; an import of another package
must go to a lower floor, or to a package of the same floor listed below it in ``ORDER``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "libreyolo"

# Floors from the top down; a package may import any package of a floor below its own, and a
# package of its own floor that comes after it in the same tuple (one-way within the floor).
ORDER: tuple[tuple[str, ...], ...] = (
    ("__init__", "__main__"),  # the public API (lazy) and ``python -m libreyolo``
    ("cli", "bench"),
    ("model",),
    ("export", "convert", "training", "trackers", "engine"),
    ("backends", "graphs", "io", "tasks"),
    ("registry", "models"),
    ("layers", "kernels", "quant", "data", "ops", "graphs.seam"),
    ("assets", "_cv", "device", "config", "env", "errors", "_version"),
)
RANK: dict[str, tuple[int, int]] = {pkg: (f, i) for f, floor in enumerate(ORDER) for i, pkg in enumerate(floor)}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


# Modules that sit on a floor of their own, below their package: the seam vocabulary (``Stage``,
# ``run_eager``) is what a family's ``forward_stages`` is written in, so the families import it;
# it imports nothing of libreyolo.
OWN_FLOOR = ("graphs.seam",)


def _package(module: str) -> str:
    """``libreyolo.engine.predictor`` -> ``engine``; ``libreyolo`` itself -> ``__init__``."""
    parts = module.split(".")
    for own in OWN_FLOOR:
        if module == f"libreyolo.{own}" or module.startswith(f"libreyolo.{own}."):
            return own
    return parts[1] if len(parts) > 1 else "__init__"


def _targets(module: str, is_pkg: bool, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" for a in node.names] + [prefix]


def _imports() -> dict[str, set[tuple[str, int]]]:
    """module -> {(imported libreyolo module or package, line)}."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    out: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mod, path.name == "__init__.py", node):
                    if t == "libreyolo" or t.startswith("libreyolo."):
                        out[mod].add((t, node.lineno))
    return out


def _violations() -> list[str]:
    bad = []
    for mod, targets in sorted(_imports().items()):
        src = _package(mod)
        for target, line in sorted(targets):
            dst = _package(target)
            if dst == src or target == "libreyolo":  # own package; ``from .. import x`` is judged by x
                continue
            if src not in RANK or dst not in RANK:
                bad.append(f"{mod}:{line} imports {target}: package {src if src not in RANK else dst!r} "
                           "has no floor in ORDER (add it, and to DESIGN's drawing)")
            elif RANK[dst] <= RANK[src]:
                bad.append(f"{mod}:{line} imports {target} ({src} -> {dst} points up or sideways)")
    return bad


def test_every_import_points_down_the_floors() -> None:
    bad = _violations()
    assert not bad, "imports against the house order:\n  " + "\n  ".join(bad)


def test_every_package_has_a_floor() -> None:
    on_disk = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    on_disk |= {p.stem for p in ROOT.glob("*.py")}
    assert set(OWN_FLOOR) <= set(RANK)
    assert on_disk <= set(RANK), f"packages without a floor: {sorted(on_disk - set(RANK))}"


def test_no_cycle_between_packages() -> None:
    """Implied by the floors, checked on its own: a failure names the circle."""
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, targets in _imports().items():
        for target, _ in targets:
            a, b = _package(mod), _package(target)
            if a != b and target != "libreyolo":
                edges[a].add(b)
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(edges[node]):
            if seen.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(nxt):], nxt]))
            if nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[node] = 2

    for start in sorted(edges):
        if start not in seen:
            visit(start, [start])


def test_the_checker_catches_an_upward_import(tmp_path: Path) -> None:
    """The parser resolves relative imports inside functions and classifies them by floor."""
    tree = ast.parse("def f():\n    from ...engine.predictor import predict\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    targets = _targets("libreyolo.models._base.family", False, node)
    assert "libreyolo.engine.predictor.predict" in targets
    assert RANK[_package(targets[0])] < RANK["models"]  # engine is above models: a violation
