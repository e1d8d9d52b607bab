"""The package's shape: no import circle (imports inside functions included), no class a reader
cannot hold, no laboratory installed, no history in the product's code, current results only.

Each check reads the source (``ast``), not the running program, so a circle hidden in a function
counts as one."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "vilib_ros"
#: the longest class body (``class`` line to its last line)
MAX_CLASS_LINES = 320


def _modules(root: Path) -> dict[str, Path]:
    mods = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source (a ``from . import x``
    counts as importing the package and ``x``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if path.name == "__init__.py" else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _circles(root: Path) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    mods = _modules(root)
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


class TestImportCircles:
    def test_none_in_the_package(self):
        assert _circles(PACKAGE) == []

    def test_none_in_the_laboratory(self):
        assert _circles(REPO / "bench") == []

    def test_the_checker_finds_one(self, tmp_path):
        """The check itself: a circle through an import inside a function is found."""
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "a.py").write_text("from .b import f\n")
        (pkg / "b.py").write_text("def f():\n    from . import a\n")
        assert _circles(pkg) == [["pkg.a", "pkg.b"]]


class TestSizes:
    def test_no_class_longer_than_a_reader_holds(self):
        long = []
        for f in PACKAGE.rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                    long.append(f"{f.relative_to(REPO)}:{node.lineno} {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines)")
        assert not long, long


class TestProductIsNotALaboratory:
    def test_no_benchmark_module_in_the_package(self):
        assert not (PACKAGE / "bench").exists()
        assert not list((PACKAGE / "kernels").glob("bench*"))

    def test_no_dates_or_result_files_named_in_the_package(self):
        """Results are current and history is git: no date and no result file named in the product's
        code or comments (a measurement belongs in bench/results and docs/)."""
        hits = []
        for f in list(PACKAGE.rglob("*.py")) + list((PACKAGE / "kernels").glob("*.cu*")):
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if "2026-" in line or "bench/results" in line or "results/" in line:
                    hits.append(f"{f.relative_to(REPO)}:{i}: {line.strip()}")
        assert not hits, "\n".join(hits)

    def test_current_results_only(self):
        results = [p.name for p in (REPO / "bench" / "results").iterdir()]
        assert len(results) <= 30, sorted(results)
        assert not [r for r in results if "_run_" in r], sorted(results)


@pytest.mark.parametrize("extra", ["gpu", "backend", "ros"])
def test_setup_installs_only_the_package(extra):
    """setup.py installs vilib_ros and its subpackages, never the checkout's bench/ or tools/."""
    text = (REPO / "setup.py").read_text()
    assert 'find_packages(include=["vilib_ros", "vilib_ros.*"])' in text
    assert f'"{extra}":' in text
