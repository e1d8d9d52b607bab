"""Where an optional dependency is missing, the command or node that needs it says which, and the
extra that installs it, in one line, and exits 2 (vilib_ros.dependencies).

Each check runs in a fresh interpreter whose ``sitecustomize`` (a temporary folder first on
``PYTHONPATH``) has the finders of ``sys.meta_path`` find nothing of the packages named in
``VILIB_ROS_ABSENT``: their import fails as it does where they are not installed (the import
system's own ``No module named ...``), while the rest of the environment (rclpy, the messages) stays.
So these run in CI, where gtsam, scipy and evo are installed.

Guards: ``backend_node`` without gtsam and scipy (a Jetson installed without the ``backend`` extra)
ending in ``KeyError: 'mode'`` with a traceback, or, with scipy there, recording only with a warning
in its log; ``vilib-ros eval`` without evo ending in an internal error (exit 1).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ros_domain

REPO = Path(__file__).resolve().parents[1]
DOMAIN = ros_domain("missing_dependencies")       # the refusals start no participant; the record-only node a quiet one
GTSAM_LINE = 'the backend needs gtsam: pip install "vilib_ros[backend]" (or gtsam>=4.3a1)'

SITECUSTOMIZE = '''
import os, sys

_ABSENT = set(filter(None, os.environ.get("VILIB_ROS_ABSENT", "").split(",")))


class _Hide:
    """A finder of ``sys.meta_path`` that finds nothing of the absent packages (the import system
    then raises its own ``No module named ...``; ``importlib.util.find_spec`` returns None)."""

    def __init__(self, finder):
        self._finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _ABSENT:
            return None
        find = getattr(self._finder, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def __getattr__(self, attr):
        return getattr(self._finder, attr)


if _ABSENT:
    sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
'''


@pytest.fixture(scope="module")
def absent_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("absent")
    (d / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return d


def _env(absent_dir: Path, absent: str) -> dict:
    env = dict(os.environ)
    parts = [str(absent_dir), str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update(PYTHONPATH=os.pathsep.join(parts), VILIB_ROS_ABSENT=absent, ROS_DOMAIN_ID=str(DOMAIN),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    return env


def _run(absent_dir: Path, absent: str, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=_env(absent_dir, absent), capture_output=True, text=True,
                          timeout=timeout)


def _one_line(r: subprocess.CompletedProcess, line: str) -> None:
    """Exit 2, ``line`` alone on a line of stderr, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert line in r.stderr.splitlines(), r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "KeyError" not in r.stderr, r.stderr[-3000:]


def test_the_blocker_reproduces_absence(absent_dir):
    """The test's own premise: a blocked package does not import, an unblocked one does."""
    r = _run(absent_dir, "gtsam,evo", "-c", "import importlib.util as u, numpy\n"
             "try:\n    import gtsam\nexcept ModuleNotFoundError as e:\n    print('absent', e.name)\n"
             "print(u.find_spec('evo'))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["absent", "gtsam", "None"], r.stdout


class TestBackendNode:
    pytestmark = pytest.mark.ros

    @pytest.mark.parametrize("absent", ["gtsam", "gtsam,scipy"])
    def test_refuses_without_gtsam(self, absent_dir, absent):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        r = _run(absent_dir, absent, "-m", "vilib_ros.nodes.backend_node")
        _one_line(r, f"BackendNode: cannot start: {GTSAM_LINE}")

    def test_records_without_gtsam_when_asked_to(self, absent_dir, tmp_path):
        """``estimator:=none`` (``vilib-ros run --no-backend``) needs neither gtsam nor scipy: the node starts,
        records, and is still running seconds later (its stop is test_process_lifetime's)."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        log = tmp_path / "backend.log"
        with open(log, "w") as f:
            proc = subprocess.Popen([sys.executable, "-m", "vilib_ros.nodes.backend_node", "--ros-args", "-p",
                                     "estimator:=none"], env=_env(absent_dir, "gtsam,scipy,evo"), stdout=f,
                                    stderr=subprocess.STDOUT)
        try:
            end = time.monotonic() + 120
            while time.monotonic() < end and proc.poll() is None and "backend: record-only" not in log.read_text():
                time.sleep(0.2)
            time.sleep(2.0)
            text = log.read_text()
            assert proc.poll() is None, text[-3000:]
            assert "backend: record-only" in text and "Traceback" not in text, text[-3000:]
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def test_parameter_table_without_the_backend_dependencies(self, absent_dir):
        """The node lists the estimator's parameters (``mode`` among them) without gtsam, scipy or numba:
        the configuration imports with NumPy alone."""
        r = _run(absent_dir, "gtsam,scipy,numba", "-m", "vilib_ros.nodes.backend_node", "--print-parameters")
        assert r.returncode == 0, r.stderr[-3000:]
        names = {ln.split()[0] for ln in r.stdout.splitlines() if ln[:2] == "  " and ln.strip()}
        assert {"estimator", "mode", "window_s", "solver"} <= names, r.stdout


class TestCommands:
    @pytest.mark.parametrize("offline", [False, True], ids=["ros", "offline"])
    def test_run_refuses_before_anything_starts(self, absent_dir, generated_sequence, tmp_path, offline):
        out = tmp_path / "out"
        r = _run(absent_dir, "gtsam", "-m", "vilib_ros", "run", str(generated_sequence), "--out", str(out),
                 *(["--offline"] if offline else []))
        _one_line(r, f"vilib-ros run: error: {GTSAM_LINE}; --no-backend runs without the backend")
        assert not out.exists()             # no dataset read, no output folder, no node started

    def test_eval_without_evo(self, absent_dir, generated_sequence):
        gt = generated_sequence / "mav0" / "state_groundtruth_estimate0" / "data.csv"
        assert gt.is_file()
        r = _run(absent_dir, "evo", "-m", "vilib_ros", "eval", str(gt), str(gt), "--no-plot")
        _one_line(r, 'vilib-ros eval: error: trajectory evaluation needs evo: pip install "vilib_ros[backend]" '
                     "(or evo>=1.20)")

    def test_run_on_cuda_without_cupy(self, absent_dir, generated_sequence, tmp_path):
        r = _run(absent_dir, "cupy", "-m", "vilib_ros", "run", str(generated_sequence), "--out",
                 str(tmp_path / "out"), "--device", "cuda")
        assert r.returncode == 2, r.stderr[-3000:]
        assert "CuPy is not importable (ModuleNotFoundError: No module named 'cupy'): " \
               'pip install "vilib_ros[gpu]"' in r.stderr, r.stderr[-3000:]
        assert "Traceback" not in r.stderr


class TestFrontendNode:
    pytestmark = pytest.mark.ros

    def test_cuda_without_cupy(self, absent_dir, generated_sequence):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        r = _run(absent_dir, "cupy", "-m", "vilib_ros.nodes.frontend_node", "--ros-args", "-p",
                 f"camera_yaml:={generated_sequence / 'mav0' / 'cam0' / 'sensor.yaml'}", "-p", "device:=cuda",
                 "-p", "stereo:=false")
        _one_line(r, "FrontendNode: cannot start: device='cuda' requested but CuPy is not importable "
                     "(ModuleNotFoundError: No module named 'cupy'): pip install \"vilib_ros[gpu]\" (CUDA 12; for "
                     "another CUDA version its cupy-cudaNNx wheel)")


def test_installed_but_broken(tmp_path, monkeypatch):
    """A package that is there but does not import (a wheel for another platform, a missing shared
    library) is named with its own import error, not as absent."""
    from vilib_ros.dependencies import MissingDependency, require

    pkg = tmp_path / "vilib_ros_broken_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('libfoo.so.1: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingDependency) as e:
        require("vilib_ros_broken_probe", "the probe")
    assert str(e.value) == ("the probe needs vilib_ros_broken_probe: pip install vilib_ros_broken_probe (it is "
                            "installed but does not import: ImportError: libfoo.so.1: cannot open shared object file)")
    assert isinstance(e.value, ValueError) and isinstance(e.value, ImportError)
    with pytest.raises(MissingDependency, match=r"^the probe needs vilib_ros_no_such_module: pip install"):
        require("vilib_ros_no_such_module", "the probe", load=False)
