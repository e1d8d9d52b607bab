"""The environment of the backend's processes: one OpenBLAS thread (``vilib_ros.nodes._single_blas``, the
offline runner's backend child) and jemalloc where installed (:mod:`vilib_ros.allocator`).

Guarded: on a many-core host the backend node's idle OpenBLAS threads spin for as much CPU per frame as
the work itself; the setting only takes effect if it is made before NumPy loads its OpenBLAS. jemalloc must be preloaded when the
process starts, by whoever starts it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: records the order in which modules are imported (``order``)
_SPY = r"""
import sys
order = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        order.append(name)
        return None
sys.meta_path.insert(0, Spy())
"""

_ORDER = _SPY + r"""
import vilib_ros.nodes.backend_node
import os
print(order.index("vilib_ros.nodes._single_blas"), order.index("numpy"), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


class TestBackendNodeBlas:
    def test_set_before_numpy_loads(self):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        out = subprocess.run([sys.executable, "-c", _ORDER], env=_env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        blas, numpy, value = out.stdout.split()
        assert int(blas) < int(numpy) and value == "1"

    def test_the_users_value_wins(self):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        out = subprocess.run([sys.executable, "-c", _ORDER], env=_env(OPENBLAS_NUM_THREADS="3"), capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split()[2] == "3"


_LATE = r"""
import os
import numpy
import vilib_ros.nodes.backend_node
print(os.environ.get("OPENBLAS_NUM_THREADS"))
"""


class TestImportedLate:
    def test_environment_untouched_once_numpy_runs(self):
        """Imported into a process that already runs NumPy (a test, a tool), the node module leaves the
        environment alone: the setting would not reach this process's OpenBLAS, only the processes it starts
        afterwards (guards: a test process that imported backend_node and then compared an estimator in a
        child, one OpenBLAS thread, with one of its own, its thread pool, bit for bit)."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        out = subprocess.run([sys.executable, "-c", _LATE], env=_env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split()[-1] == "None"


_CLI_ORDER = _SPY + r"""
import os
from vilib_ros import cli
try:
    if sys.argv[1] == "lab":       # the laboratory's commands: python -m bench COMMAND
        import bench.__main__ as lab
        lab.main([sys.argv[2], "--help"])
    else:
        cli.main([sys.argv[1], "--help"])
except SystemExit:
    pass
blas = order.index("vilib_ros.nodes._single_blas") if "vilib_ros.nodes._single_blas" in order else -1
print("ORDER", blas, order.index("numpy"), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def _order(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("ORDER ")][-1].split()[1:]


class TestBenchBackendBlas:
    """The benchmarks that time the backend in their own process do it with one OpenBLAS thread, as the
    backend's processes run; NumPy's default pool (two threads on a 2-core machine) timed a configuration
    the backend never runs with."""

    @pytest.mark.parametrize("command", [["bench"], ["lab", "backend"], ["lab", "accuracy"]])
    def test_set_before_numpy_loads(self, command):
        out = subprocess.run([sys.executable, "-c", _CLI_ORDER, *command], env=_env(), capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        blas, numpy, value = _order(out.stdout)
        assert 0 <= int(blas) < int(numpy) and value == "1"

    def test_other_commands_untouched(self):
        out = subprocess.run([sys.executable, "-c", _CLI_ORDER, "eval"], env=_env(), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        blas, _, value = _order(out.stdout)
        assert blas == "-1" and value == "None"


class TestOfflineBackendChild:
    def test_child_environment(self):
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.allocator import jemalloc_path
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.offline import _Backend

        os.environ.pop("OPENBLAS_NUM_THREADS", None)
        before = os.environ.get("LD_PRELOAD")
        be = _Backend(euroc_cam0(), None, None, {"mode": "mono"})
        try:
            env = Path(f"/proc/{be.proc.pid}/environ").read_bytes().split(b"\0")
            assert b"OPENBLAS_NUM_THREADS=1" in env
            assert "OPENBLAS_NUM_THREADS" not in os.environ      # the parent's environment left as it was
            assert os.environ.get("LD_PRELOAD") == before
            lib = jemalloc_path()
            if lib:
                assert lib in Path(f"/proc/{be.proc.pid}/maps").read_text()     # loaded in the child
        finally:
            be.kill()


class TestJemallocEnv:
    def test_found_library_preloaded_once_and_first(self, tmp_path):
        from vilib_ros.allocator import with_jemalloc

        lib = tmp_path / "libjemalloc.so.2"
        lib.write_bytes(b"")
        env = with_jemalloc({"VILIB_ROS_JEMALLOC": str(lib), "LD_PRELOAD": "/x/libother.so"})
        assert env["LD_PRELOAD"] == f"{lib} /x/libother.so"
        assert with_jemalloc(env)["LD_PRELOAD"] == f"{lib} /x/libother.so"

    def test_off_and_missing(self, tmp_path):
        from vilib_ros.allocator import jemalloc_path, with_jemalloc

        assert jemalloc_path({"VILIB_ROS_JEMALLOC": "0"}) is None
        assert jemalloc_path({"VILIB_ROS_JEMALLOC": str(tmp_path / "missing.so")}) is None
        assert "LD_PRELOAD" not in with_jemalloc({"VILIB_ROS_JEMALLOC": "off"})

    def test_vilib_ros_run_gives_it_to_the_backend_only(self, monkeypatch, tmp_path):
        """The run's backend node process gets the preload, the other nodes do not."""
        from vilib_ros import pipeline

        lib = tmp_path / "libjemalloc.so.2"
        lib.write_bytes(b"")
        seen = {}

        class Fake:
            def __init__(self, name, argv, env, log, **kw):
                seen[name] = env

        monkeypatch.setattr(pipeline, "NodeProcess", Fake)
        run = pipeline._Run.__new__(pipeline._Run)
        run.env = {"VILIB_ROS_JEMALLOC": str(lib)}
        run.out, run.prefix, run.children = tmp_path, "", {}
        run.args = type("A", (), {"namespace": ""})()
        for node in ("frontend_node", "backend_node"):
            run.start(node)
        assert seen["backend_node"]["LD_PRELOAD"] == str(lib)
        assert "LD_PRELOAD" not in seen["frontend_node"] and "LD_PRELOAD" not in run.env
