"""tools/check_platform_wheels.py: the package's requirements resolve to wheels on a Jetson with JetPack 6
(CPython 3.10, aarch64, glibc 2.35) and on an x86_64 desktop.

The ``network`` tests ask the public index for real (pip's own resolver, dry run); they skip, with the
reason, where it cannot be reached, and ``-m 'not network'`` leaves them out. The rest checks the
script's reading of setup.py and its platform tags against independent references.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "check_platform_wheels.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("check_platform_wheels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _as_setuptools_sees_it(setup_py: Path) -> dict:
    """install_requires / extras_require as setuptools receives them: setup.py run with ``setup`` replaced."""
    code = ("import json, sys, setuptools\n"
            "setuptools.setup = lambda **kw: print(json.dumps({k: kw.get(k) for k in "
            "('install_requires', 'extras_require')}))\n"
            f"sys.argv = ['setup.py']\nexec(compile(open({str(setup_py)!r}).read(), 'setup.py', 'exec'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=setup_py.parent, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_reads_setup_py_as_setuptools_does(tool):
    install, extras = tool.read_requirements(REPO / "setup.py")
    ref = _as_setuptools_sees_it(REPO / "setup.py")
    assert install == ref["install_requires"] and extras == ref["extras_require"]
    assert {"backend", "gpu", "ros"} <= set(extras)


def test_platform_tags_of_glibc_2_35(tool):
    jetson = tool.TARGETS["jetson"].platforms()
    assert set(jetson) == {f"manylinux_2_{m}_aarch64" for m in range(17, 36)} | {"manylinux2014_aarch64"}
    desktop = tool.TARGETS["desktop"].platforms()
    assert set(desktop) == ({f"manylinux_2_{m}_x86_64" for m in range(5, 36)}
                            | {"manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"})


def test_markers_are_evaluated_for_the_target(tool):
    """gtsam: 4.3a1 admitted on CPython 3.10 alone (no gtsam 4.3 is built for it), finals elsewhere;
    the ros extra is not checked on the Jetson (its system ROS 2 provides rclpy)."""
    install, extras = tool.read_requirements(REPO / "setup.py")

    def gtsam(target, python):
        return [r for _, r in tool.requirements_for(tool.TARGETS[target], python, install, extras)
                if r.startswith("gtsam")]

    assert gtsam("jetson", "3.10") == ["gtsam>=4.3a1"]
    assert gtsam("desktop", "3.10") == ["gtsam>=4.3a1"]
    assert gtsam("desktop", "3.11") == gtsam("desktop", "3.13") == ["gtsam>=4.3"]
    jetson = tool.requirements_for(tool.TARGETS["jetson"], "3.10", install, extras)
    assert not any(r.startswith("ros-jazzy") for _, r in jetson)
    assert any(r.startswith("cupy-cuda12x") for _, r in jetson)


def _run(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=1800)
    if r.returncode == 3:
        pytest.skip(f"the package index cannot be reached: {r.stderr.strip()}")
    return r


@pytest.mark.slow
@pytest.mark.network
def test_jetpack6_resolves(tool):
    """Every requirement of install_requires, [backend] and [gpu] has a wheel for CPython 3.10 on aarch64
    (glibc 2.35), and they resolve together with their dependencies."""
    r = _run("--target", "jetson")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    install, extras = tool.read_requirements(REPO / "setup.py")
    for _, req in tool.requirements_for(tool.TARGETS["jetson"], "3.10", install, extras):
        assert any(ln.split()[:2] == ["ok", req] for ln in lines), (req, r.stdout)
    gtsam = next(ln for ln in lines if ln.split()[1:2] == ["gtsam>=4.3a1"])
    assert "gtsam-4.3a1-cp310-cp310-" in gtsam and "aarch64" in gtsam, gtsam
    assert any("not checked: [ros]" in ln and "x86_64 only" in ln for ln in lines), r.stdout
    assert any(ln.split()[:3] == ["ok", "with", "dependencies"] and "[backend], [gpu]" in ln for ln in lines), r.stdout


@pytest.mark.slow
@pytest.mark.network
def test_a_requirement_without_a_wheel_is_named(tmp_path):
    """gtsam>=4.3 (no 4.3 wheel for CPython 3.10 on aarch64) fails the Jetson target and is named."""
    text = (REPO / "setup.py").read_text()
    start = text.index('"backend": [')
    end = text.index("],", start) + 2
    (tmp_path / "setup.py").write_text(text[:start] + '"backend": ["gtsam>=4.3", "scipy>=1.8"],' + text[end:])
    r = _run("--target", "jetson", "--direct-only", "--setup", str(tmp_path / "setup.py"))
    assert r.returncode == 1, r.stdout + r.stderr
    miss = [ln for ln in r.stdout.splitlines() if ln.split()[:1] == ["MISS"]]
    assert len(miss) == 1 and miss[0].split()[1] == "gtsam>=4.3", r.stdout
    assert "jetson cp310: gtsam>=4.3 ([backend])" in r.stdout
