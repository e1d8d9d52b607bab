"""The markers a test must carry, read from its module's source (used at collection by conftest.py).

A test *starts ROS* where its own code, a function or method of its module that it calls (directly
or through other functions of the module), a fixture of its module that it uses, or the module's
top level names one of :data:`STARTERS` (the project's node and graph helpers, rclpy's node
constructors), calls ``rclpy.init``, or passes ``vilib_ros.nodes.<name>_node`` as a command-line
argument (``python -m`` of a node). Such a test, and every test that uses the ``ros_graph``
fixture (:func:`needs_ros_marker`), must carry the ``ros`` marker, so that ``-m "not ros"`` leaves
no ROS process behind. The reading is static: a name in a comment or a docstring does not count, a
node started by a program written into a string (``python -c``) is not seen.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

#: names whose use starts ROS participants or node processes
STARTERS = frozenset({"GraphClient", "NodeProcess", "LaunchRun", "node_argv", "create_node", "ros_graph"})
#: a node module as ``python -m`` takes it
NODE_MODULE = re.compile(r"vilib_ros\.nodes\.\w+_node")


def _starters_in(node: ast.AST) -> set[str]:
    """The ROS starters named in ``node``'s subtree (see the module's docstring)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in STARTERS:
            found.add(n.id)
        elif isinstance(n, ast.Attribute):
            if n.attr in STARTERS:
                found.add(n.attr)
            elif n.attr == "init" and isinstance(n.value, ast.Name) and n.value.id == "rclpy":
                found.add("rclpy.init")
        elif isinstance(n, ast.arg) and n.arg in STARTERS:
            found.add(n.arg)
        elif isinstance(n, ast.alias) and n.name.rpartition(".")[2] in STARTERS:
            found.add(n.name.rpartition(".")[2])
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and NODE_MODULE.fullmatch(n.value):
            found.add(n.value)
    return found


def _referenced(node: ast.AST) -> set[str]:
    """Names and ``self.<method>`` attributes referenced in ``node``'s subtree."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
            out.add("." + n.attr)
    return out


class ModuleReading:
    """One test module's functions (``name`` or ``Class.name``), what each starts and calls."""

    def __init__(self, source: str):
        tree = ast.parse(source)
        self.defs: dict[str, ast.AST] = {}
        top_level = []
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                for sub in stmt.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.defs[f"{stmt.name}.{sub.name}"] = sub
                top_level.extend(s for s in stmt.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
                top_level.extend(stmt.decorator_list)
            else:
                top_level.append(stmt)
        #: starters at the module's (or a class's) top level: every test of the module starts ROS
        self.module_starters = set().union(*(_starters_in(s) for s in top_level)) if top_level else set()
        self._direct = {name: _starters_in(d) for name, d in self.defs.items()}
        self._calls = {name: self._callees(name, d) for name, d in self.defs.items()}

    def _callees(self, name: str, d: ast.AST) -> set[str]:
        cls = name.rpartition(".")[0]
        out = set()
        for ref in _referenced(d):
            if ref.startswith("."):
                if cls and f"{cls}{ref}" in self.defs:
                    out.add(f"{cls}{ref}")
            elif ref in self.defs:
                out.add(ref)
        return out

    def starters(self, names) -> set[str]:
        """What the functions ``names`` start, with everything of the module they call."""
        seen, todo, found = set(), [n for n in names if n in self.defs], set(self.module_starters)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            found |= self._direct[n]
            todo.extend(self._calls[n] - seen)
        return found


@lru_cache(maxsize=None)
def read_module(path: str) -> ModuleReading:
    return ModuleReading(Path(path).read_text())


def needs_ros_marker(item) -> set[str]:
    """What makes the collected test ``item`` start ROS (empty: nothing does)."""
    why = {"ros_graph"} if "ros_graph" in getattr(item, "fixturenames", ()) else set()
    fn = getattr(item, "function", None)
    path = getattr(item, "path", None)
    if fn is None or path is None or path.suffix != ".py":
        return why
    reading = read_module(str(path))
    name = fn.__name__ if item.cls is None else f"{item.cls.__name__}.{fn.__name__}"
    fixtures = [f for f in getattr(item, "fixturenames", ()) if f in reading.defs]
    return why | reading.starters([name, *fixtures])


def missing_ros_markers(items) -> list[str]:
    """``nodeid: what it starts`` for every item that starts ROS without the ``ros`` marker."""
    out = []
    for item in items:
        if item.get_closest_marker("ros") is not None:
            continue
        why = needs_ros_marker(item)
        if why:
            out.append(f"{item.nodeid}: {', '.join(sorted(why))}")
    return out


def check_markers(items) -> None:
    """A usage error (the whole run stops, naming the tests) where a test starts ROS without ``ros``."""
    import pytest

    missing = missing_ros_markers(items)
    if missing:
        raise pytest.UsageError("tests that start ROS nodes or participants without the `ros` marker (add "
                                "`pytestmark = pytest.mark.ros` or mark the test):\n  " + "\n  ".join(missing))
