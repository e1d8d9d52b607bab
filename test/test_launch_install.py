"""Where ``launch_ros`` finds the nodes: ``<prefix>/lib/vilib_ros/<executable>`` under a colcon
install and under a pip install (whose console scripts go to ``<prefix>/bin``; setup.py installs
launchers into ``lib/vilib_ros``), and the installer of the vendored launch tooling.

Guards: under a pip install launch_ros stopping with "libexec directory '<prefix>/lib/vilib_ros'
does not exist".
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launch_support import VENDOR, colcon_install

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = sorted((REPO / "resource" / "lib").iterdir())
#: the nodes (all of them) whose ``--print-parameters`` prints their parameter table without starting ROS
PRINTS_TABLE = ("frontend_node", "backend_node", "player_node", "recorder_node")


def node_scripts() -> set[str]:
    """The console scripts of setup.py that start a node (read with ast, independent of setuptools)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "console_scripts":
                    entries = [ast.literal_eval(e) for e in v.elts]
                    return {e.split("=")[0].strip() for e in entries if ":main" in e and ".nodes." in e}
    raise AssertionError("setup.py has no console_scripts")


def parameter_table_text(node: str) -> str:
    import importlib

    from vilib_ros.nodes.params import format_table

    return format_table(importlib.import_module(f"vilib_ros.nodes.{node}").parameter_table())


def _stub(path: Path, tag: str) -> None:
    """An executable that prints ``tag`` and its arguments."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{tag} $*"\n')
    path.chmod(0o755)


class TestLaunchers:
    def test_one_per_node(self):
        assert {p.name for p in LAUNCHERS} == node_scripts()
        texts = {p.read_text() for p in LAUNCHERS}
        assert len(texts) == 1, "the launchers differ (each one reads its node from its own name)"
        assert all(os.access(p, os.X_OK) for p in LAUNCHERS)

    @pytest.mark.parametrize("layout", ["console_script", "prefix_python", "path_python"])
    def test_dispatch(self, layout, tmp_path):
        """Each launcher runs its prefix's console script (pip), else the node module with the
        prefix's Python (a virtual environment), else with python3 from PATH (colcon)."""
        prefix = tmp_path / "prefix"
        exe = prefix / "lib" / "vilib_ros" / "player_node"
        exe.parent.mkdir(parents=True)
        shutil.copy(REPO / "resource" / "lib" / "player_node", exe)
        exe.chmod(0o755)
        if layout == "console_script":
            _stub(prefix / "bin" / "player_node", "console-script")
            _stub(prefix / "bin" / "python3", "prefix-python")
            want = "console-script --ros-args -p a:=1"
        elif layout == "prefix_python":
            _stub(prefix / "bin" / "python3", "prefix-python")
            want = "prefix-python -m vilib_ros.nodes.player_node --ros-args -p a:=1"
        else:
            want = "path-python -m vilib_ros.nodes.player_node --ros-args -p a:=1"
        _stub(tmp_path / "path" / "python3", "path-python")
        env = dict(os.environ, PATH=f"{tmp_path / 'path'}{os.pathsep}/usr/bin{os.pathsep}/bin")
        r = subprocess.run([str(exe), "--ros-args", "-p", "a:=1"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == want, r


class TestColconLayout:
    @pytest.mark.parametrize("rebuild", [False, True], ids=["first_build", "rebuild"])
    def test_executables_and_share(self, rebuild, tmp_path):
        """setup.py installed with colcon's command line: share/ and the ament index entry where
        ament_index finds them, and lib/vilib_ros/<node> runs the node. colcon's first build keeps
        its console scripts there (install_data does not replace the newer files), a rebuild
        (``install_data --force``) puts the launchers in their place: both must run."""
        from ament_index_python.packages import get_package_prefix, get_package_share_directory

        prefix = tmp_path / "install" / "vilib_ros"
        colcon_install(prefix, tmp_path / "build")
        if rebuild:
            colcon_install(prefix, tmp_path / "build", rebuild=True)
        for f in ("launch/vio.launch.py", "launch/euroc.launch.py", "launch/frontend.launch.py",
                  "config/euroc.yaml", "config/vio.rviz", "package.xml"):
            assert (prefix / "share" / "vilib_ros" / f).is_file(), f
        old = os.environ.get("AMENT_PREFIX_PATH")
        os.environ["AMENT_PREFIX_PATH"] = str(prefix)
        try:
            assert Path(get_package_prefix("vilib_ros")) == prefix
            assert Path(get_package_share_directory("vilib_ros")) == prefix / "share" / "vilib_ros"
        finally:
            os.environ["AMENT_PREFIX_PATH"] = old if old is not None else ""
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   PYTHONPATH=str(REPO))
        _check_nodes(prefix, env, tmp_path)


def _check_nodes(prefix: Path, env: dict, cwd: Path) -> None:
    """Every node executable is in <prefix>/lib/vilib_ros; those that print their parameter table
    (``--print-parameters``, no ROS started) print the package's."""
    for node in sorted(node_scripts()):
        exe = prefix / "lib" / "vilib_ros" / node
        assert os.access(exe, os.X_OK), exe
        if node not in PRINTS_TABLE:
            continue
        r = subprocess.run([str(exe), "--print-parameters"], env=env, capture_output=True, text=True, cwd=cwd,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == parameter_table_text(node).strip(), node


@pytest.mark.slow
class TestPipLayout:
    def test_pip_install_leaves_runnable_nodes_in_lib(self, tmp_path):
        """``pip install`` (not editable) into a new virtual environment: lib/vilib_ros/<node> exists
        for every node and runs the node installed there (the environment's console script)."""
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        r = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                            "--no-deps", "--quiet", str(REPO)], capture_output=True, text=True, timeout=600)
        if r.returncode and any(s in r.stderr for s in ("Could not find a version", "NewConnectionError",
                                                         "Temporary failure in name resolution")):
            pytest.skip("pip could not fetch the build backend (setuptools) here: " + r.stderr.strip().splitlines()[-1])
        assert r.returncode == 0, r.stderr[-3000:]
        # the environment sees this one's dependencies (rclpy, numpy, ...) after its own packages
        site = next((venv / "lib").glob("python3*/site-packages"))
        deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "rclpy").is_dir())
        (site / "zz_test_deps.pth").write_text(str(deps) + "\n")
        assert (venv / "share" / "vilib_ros" / "launch" / "euroc.launch.py").is_file()
        assert (venv / "share" / "ament_index" / "resource_index" / "packages" / "vilib_ros").is_file()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = "/usr/bin:/bin"
        _check_nodes(venv, env, tmp_path)
        # it ran the copy installed in the environment, not this checkout
        r = subprocess.run([str(venv / "bin" / "python"), "-c", "import vilib_ros; print(vilib_ros.__file__)"],
                           env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert r.stdout.strip().startswith(str(venv)), r


class TestInstaller:
    def test_vendored_versions_installed_and_working(self):
        """tools/install_launch.py --check: launch and launch_ros import, and a
        composition_interfaces/srv/LoadNode request survives rclpy's serializer."""
        import re
        from importlib.metadata import PackageNotFoundError, version

        if not VENDOR.is_dir():
            pytest.skip(f"{VENDOR} is absent: the launch tooling is not installed from it")
        try:
            installed = {p: version(p) for p in ("launch", "launch_ros", "composition_interfaces")}
        except PackageNotFoundError as exc:
            pytest.skip(f"the launch tooling is not installed ({exc}): run python tools/install_launch.py")
        for p, v in installed.items():
            want = re.search(r"<version>([^<]+)</version>", (VENDOR / p / "package.xml").read_text()).group(1)
            assert v == want, p
        r = subprocess.run([sys.executable, str(REPO / "tools" / "install_launch.py"), "--check"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "works: launch 3.4.3" in r.stdout, r

    def test_missing_vendor_folder(self, tmp_path):
        r = subprocess.run([sys.executable, str(REPO / "tools" / "install_launch.py"), "--vendor", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.strip().startswith("install_launch: error: ") \
            and len(r.stderr.strip().splitlines()) == 1, r
