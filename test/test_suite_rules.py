"""The test suite's own rules (suite_rules.py): a test that starts ROS must carry the ``ros`` marker.
The reading of a module's source against hand-written cases, and the check at collection in a pytest
run of its own on a module that breaks the rule (the run stops, naming the test) and on the same
module marked (it collects)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suite_rules import ModuleReading

HERE = Path(__file__).resolve().parent
#: a node module as ``python -m`` takes it (built here: the literal would mark this module as one that starts it)
PLAYER = "vilib_ros.nodes." + "player_node"

SOURCE = '''
import pytest
from vilib_ros.nodes.processes import node_argv


def _start(env):
    return NodeProcess("x", node_argv("frontend_node"), env, "log")


def _indirect(env):
    return _start(env)


def _import_only(name):
    import importlib
    return importlib.import_module(f"vilib_ros.nodes.{name}")


def _argv():
    return [sys.executable, "-m", "vilib_ros.nodes.player_node", "--ros-args"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return _indirect({})


def test_plain():
    """GraphClient and NodeProcess named in a docstring start nothing."""
    assert _import_only("frontend_node")


def test_through_a_fixture(session):
    pass


def test_rclpy_init():
    import rclpy
    rclpy.init()


def test_node_argv_string():
    _argv()


class TestGraph:
    def _client(self):
        return GraphClient(1)

    def test_method_helper(self):
        self._client()

    def test_graph_fixture(self, ros_graph):
        pass

    def test_nothing(self):
        pass
'''


@pytest.fixture(scope="module")
def reading():
    # the module-level import of node_argv would count for every test: read the module without it
    return ModuleReading(SOURCE.replace("from vilib_ros.nodes.processes import node_argv\n", ""))


class TestModuleReading:
    @pytest.mark.parametrize("names,expected", [
        (["test_plain"], set()),
        (["test_through_a_fixture", "session"], {"NodeProcess", "node_argv"}),
        (["test_rclpy_init"], {"rclpy.init"}),
        (["test_node_argv_string"], {PLAYER}),
        (["TestGraph.test_method_helper"], {"GraphClient"}),
        (["TestGraph.test_graph_fixture"], {"ros_graph"}),
        (["TestGraph.test_nothing"], set()),
    ])
    def test_what_each_test_starts(self, reading, names, expected):
        assert reading.starters(names) == expected

    def test_a_module_level_import_counts_for_every_test(self):
        reading = ModuleReading(SOURCE)
        assert reading.module_starters == {"node_argv"}
        assert reading.starters(["TestGraph.test_nothing"]) == {"node_argv"}


def _collect(tmp_path, module_source: str) -> subprocess.CompletedProcess:
    """``pytest --collect-only`` of one module under a conftest that applies the suite's check."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import pytest
        from suite_rules import check_markers

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(config, items):
            check_markers(items)
        '''))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    ros: starts ROS\n")
    (tmp_path / "test_nodes.py").write_text(textwrap.dedent(module_source))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


UNMARKED = '''
    def _start():
        from vilib_ros.nodes.processes import NodeProcess
        return NodeProcess

    def test_starts_a_node():
        _start()

    def test_pure():
        pass
    '''


class TestCheckAtCollection:
    def test_an_unmarked_test_that_starts_nodes_stops_the_run(self, tmp_path):
        r = _collect(tmp_path, UNMARKED)
        out = r.stdout + r.stderr
        assert r.returncode == 4, out                     # pytest's usage error
        assert "without the `ros` marker" in out and "test_nodes.py::test_starts_a_node: NodeProcess" in out, out
        assert "test_pure" not in out.split("without the `ros` marker")[-1]

    def test_the_same_module_marked_collects(self, tmp_path):
        r = _collect(tmp_path, "import pytest\npytestmark = pytest.mark.ros\n" + textwrap.dedent(UNMARKED))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "2 tests collected" in r.stdout, r.stdout
