"""``python -m bench ab``: each arm runs the code it names, in ABBA order.

Guarded: an arm run from the repository root with the other code given through ``PYTHONPATH``
imports the repository's package (``python -m`` puts the working folder ahead of ``PYTHONPATH``),
and a "before / after" table then compares the same code with itself.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import ab

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def other_code(tmp_path_factory) -> Path:
    """A second copy of this package (with its compiled caches) in a folder of its own."""
    root = tmp_path_factory.mktemp("other_code")
    shutil.copytree(REPO / "vilib_ros", root / "vilib_ros", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copytree(REPO / "bench", root / "bench", ignore=shutil.ignore_patterns("*.pyc", "results", "out"))
    return root


class TestOrder:
    def test_abba(self):
        assert ab.order(1) == ["this", "other"]
        assert ab.order(2) == ["this", "other", "other", "this"]
        assert ab.order(3) == ["this", "other", "other", "this", "this", "other"]

    def test_default_is_four_rounds(self):
        import argparse

        p = argparse.ArgumentParser()
        ab.configure_parser(p)
        assert p.parse_args(["--against", "x", "--", "backend"]).rounds == 4


class TestLookup:
    def test_dotted_paths_and_list_indices(self):
        d = {"runs": [{"mode": "stereo", "keyframe_ms": {"median": 2.5}}], "x": 1}
        assert ab.lookup(d, "runs.0.keyframe_ms.median") == 2.5
        assert ab.lookup(d, "x") == 1
        assert ab.lookup(d, "runs.1.mode") is None
        assert ab.lookup(d, "runs.a") is None
        assert ab.lookup(d, "x.y") is None


class TestArmEnv:
    def test_root_first_and_no_other_vilib_ros_on_the_path(self, other_code, tmp_path):
        wheels = tmp_path / "wheels"
        wheels.mkdir()
        base = {"PYTHONPATH": os.pathsep.join([str(REPO), str(wheels)]), "HOME": "/x"}
        env = ab.arm_env(other_code, base)
        assert env["PYTHONPATH"].split(os.pathsep) == [str(other_code), str(wheels)]
        assert env["HOME"] == "/x"


class TestImportedBy:
    def test_python_m_from_the_repository_ignores_pythonpath(self, other_code):
        """The fault itself: a Python started in the repository root imports its package, not PYTHONPATH's."""
        p = subprocess.run([sys.executable, "-c", "import vilib_ros; print(vilib_ros.__file__)"], cwd=REPO,
                           env=dict(os.environ, PYTHONPATH=str(other_code)), capture_output=True, text=True,
                           timeout=60)
        assert Path(p.stdout.strip()).resolve().parent == (REPO / "vilib_ros").resolve()

    def test_each_arm_imports_its_own_package(self, other_code, tmp_path, monkeypatch):
        monkeypatch.setenv("PYTHONPATH", str(REPO))    # what the GPU machine's scripts export
        assert ab.imported_by(other_code, tmp_path) == (other_code / "vilib_ros").resolve()
        assert ab.imported_by(REPO, tmp_path) == (REPO / "vilib_ros").resolve()

    def test_a_folder_without_the_package_is_a_user_error(self, tmp_path):
        with pytest.raises(ValueError, match="no vilib_ros package"):
            ab.code_root(tmp_path)


class TestHostSpeed:
    def test_figures_are_positive_and_finite(self):
        h = ab.host_speed(copy_mb=4, loop=20_000)
        assert set(h) == {"copy_gbps", "python_ns"}
        assert 0 < h["copy_gbps"] < 1e4 and 0 < h["python_ns"] < 1e6


def _run(n, arm, copy, py):
    return {"n": n, "arm": arm, "host": {"before": {"copy_gbps": copy, "python_ns": py},
                                         "after": {"copy_gbps": copy, "python_ns": py}}}


class TestHostControl:
    """Guarded: a 2-round A/B credits the code with the host's slow middle runs unless they are flagged."""

    def test_slow_middle_runs_are_flagged_and_charged_to_their_arm(self):
        runs = [_run(1, "this", 10.0, 40.0), _run(2, "other", 6.0, 40.0), _run(3, "other", 10.0, 60.0),
                _run(4, "this", 10.0, 40.0)]
        hc = ab.host_control(runs)
        assert hc["flagged"] == [2, 3]
        assert hc["runs"][0] == pytest.approx(1.0) and hc["runs"][3] == pytest.approx(1.0)
        assert hc["runs"][1] == pytest.approx(10.0 / 6.0) and hc["runs"][2] == pytest.approx(60.0 / 40.0)
        assert hc["arms"]["other"] > 1.5 * hc["arms"]["this"]
        md = ab.markdown({"command": ["vilib-ros", "x"], "date": "d", "machine": {"cpu": "c", "cores": 2,
                          "python": "3", "gtsam": "-", "platform": "p"},
                          "arms": {a: {"revision": a, "root": a, "imports": a} for a in ("this", "other")},
                          "runs": runs, "rows": [], "host_control": hc})
        assert "**The host was slower around the other arm's runs" in md
        assert md.count("**slow host**") == 2

    def test_a_steady_host_flags_nothing(self):
        runs = [_run(n, arm, 10.0, 40.0) for n, arm in enumerate(ab.order(2), start=1)]
        hc = ab.host_control(runs)
        assert hc["flagged"] == [] and hc["arms"] == {"this": 1.0, "other": 1.0}

    def test_runs_without_figures(self):
        assert ab.host_control([{"n": 1, "arm": "this"}])["runs"] == []


def _cli(args, cwd, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
class TestBenchAb:
    def test_two_arms_of_one_benchmark(self, other_code, tmp_path):
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        out = tmp_path / "ab"
        p = _cli(["ab", "--against", str(other_code), "--rounds", "1", "--out", str(out),
                  "--keys", "runs.0.keyframe_ms.median,runs.0.ate_m,runs.0.keyframes", "--",
                  "backend", "--duration", "3", "--no-sweep", "--no-profile"], cwd=tmp_path)
        assert p.returncode == 0, p.stderr[-3000:]
        res = json.loads((out / "ab.json").read_text())
        assert [r["arm"] for r in res["runs"]] == ["this", "other"]
        roots = {"this": REPO, "other": other_code}
        for r in res["runs"]:
            # the run's own result says which package wrote it
            written = json.loads((Path(r["out"]) / "backend_cpu.json").read_text())["code"]["package"]
            assert Path(written).resolve() == (roots[r["arm"]] / "vilib_ros").resolve()
        rows = {row["key"]: row for row in res["rows"]}
        # the same code in both arms: the same estimate (the timings may differ)
        assert rows["runs.0.ate_m"]["this"] == rows["runs.0.ate_m"]["other"]
        assert rows["runs.0.keyframes"]["this_median"] == rows["runs.0.keyframes"]["other_median"] > 0
        assert rows["runs.0.keyframe_ms.median"]["other_over_this"] > 0
        assert "| `runs.0.ate_m` |" in (out / "ab.md").read_text()
        # the host control: timed around every run
        assert all(r["host"]["before"]["copy_gbps"] > 0 and r["host"]["after"]["python_ns"] > 0 for r in res["runs"])
        assert "Host control" in (out / "ab.md").read_text()

    def test_out_in_the_command_is_refused(self, other_code, tmp_path):
        p = _cli(["ab", "--against", str(other_code), "--out", str(tmp_path / "ab"), "--",
                  "backend", "--out", "x"], cwd=tmp_path, timeout=120)
        assert p.returncode == 2 and "leave --out to bench-ab" in p.stderr

    def test_against_a_folder_without_the_package(self, tmp_path):
        p = _cli(["ab", "--against", str(tmp_path), "--out", str(tmp_path / "ab"), "--", "backend"],
                 cwd=tmp_path, timeout=120)
        assert p.returncode == 2 and "no vilib_ros package" in p.stderr
