"""One OpenBLAS thread in the backend's processes (``vilib_ros.nodes._single_blas``, the offline runner's
backend child). Regression guard: on a 16-core host the backend node's idle OpenBLAS threads spun for
2.8 ms of CPU per frame beside 2.4-2.9 ms of work (2026-11-25, bench/results/backend_node_profile.md);
the setting only takes effect if it is made before NumPy loads its OpenBLAS.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_ORDER = r"""
import sys
order = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        order.append(name)
        return None
sys.meta_path.insert(0, Spy())
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


class TestOfflineBackendChildBlas:
    def test_child_environment(self):
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.offline import _Backend

        os.environ.pop("OPENBLAS_NUM_THREADS", None)
        be = _Backend(euroc_cam0(), None, None, {"mode": "mono"})
        try:
            env = Path(f"/proc/{be.proc.pid}/environ").read_bytes().split(b"\0")
            assert b"OPENBLAS_NUM_THREADS=1" in env
            assert "OPENBLAS_NUM_THREADS" not in os.environ      # the parent's environment left as it was
        finally:
            be.kill()
