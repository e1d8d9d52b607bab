"""Choosing the implementation (vilib_ros.frontend.factory): ``make_detector`` picks by device and
checks the configuration before any device is asked; on the CPU the factories build the compiled
twins, VILIB_ROS_CPU_IMPL forces either one, a missing numba falls back to NumPy with one warning;
and the whole CPU FeatureTracker gives the same tracks with either implementation over the real
frames (the generated sequence's where they are absent)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vilib_ros.frontend.compiled.threads import THREADS_ENV, cpu_threads
from vilib_ros.frontend.config import DetectorConfig, TrackerConfig
from vilib_ros.frontend.factory import (ENV, CompiledUnavailable, build_pyramid_host, cpu_implementation,
                                        make_detector, make_tracker)
from vilib_ros.frontend.reference.detector import CpuFastDetector
from vilib_ros.frontend.reference.tracker import CpuLKTracker

REPO = Path(__file__).resolve().parents[1]
STAMP0 = 1_000_000_000_000
DT = 50_000_000


def _numba():
    return pytest.importorskip("numba", reason="numba (the compiled CPU path, a third-party dependency) is not installed")


class TestMakeDetector:
    """make_detector: the device's choice, and configuration errors before any device is asked."""

    def test_cpu(self):
        assert isinstance(make_detector(752, 480, DetectorConfig(), device="cpu"), CpuFastDetector)

    def test_auto_and_cuda_without_cuda(self, caplog, monkeypatch):
        from vilib_ros import _cuda
        from vilib_ros._cuda import CudaUnavailable, cuda_available

        if cuda_available():
            pytest.skip("this machine has CUDA: the fallback is not exercised")
        monkeypatch.setattr(_cuda, "_said_cpu_fallback", [])     # said once per process: as a fresh one
        with caplog.at_level(logging.WARNING):
            det = make_detector(752, 480, DetectorConfig(), device="auto")
        assert isinstance(det, CpuFastDetector)
        assert "CPU" in caplog.text
        with pytest.raises(CudaUnavailable):
            make_detector(752, 480, DetectorConfig(), device="cuda")

    def test_bad_device(self):
        with pytest.raises(ValueError, match="device"):
            make_detector(752, 480, DetectorConfig(), device="tpu")

    @pytest.mark.parametrize("device", ["auto", "cuda"])
    @pytest.mark.parametrize("field,value", [("arc_length", 13), ("nms_radius", 5), ("cell_width", 40),
                                             ("levels", 5), ("border", 2)])
    def test_bad_config_before_device(self, device, field, value):
        """Configuration errors are reported before any device is touched, so they read the same
        with and without CUDA (and run where there is none)."""
        with pytest.raises(ValueError, match=field):
            make_detector(752, 480, DetectorConfig(**{field: value}), device=device)

    @pytest.mark.parametrize("device", ["auto", "cuda"])
    def test_too_small_image_before_device(self, device):
        with pytest.raises(ValueError, match="smaller"):
            make_detector(40, 40, DetectorConfig(), device=device)


class TestCpuImplementation:
    def test_choices(self, monkeypatch):
        _numba()
        monkeypatch.delenv(ENV, raising=False)
        assert cpu_implementation() == "numba"
        for value, want in (("numpy", "numpy"), ("NumPy ", "numpy"), ("numba", "numba"), ("auto", "numba")):
            monkeypatch.setenv(ENV, value)
            assert cpu_implementation() == want

    def test_bad_value_reads_as_message(self, monkeypatch):
        monkeypatch.setenv(ENV, "fortran")
        with pytest.raises(ValueError, match=ENV):
            cpu_implementation()


class TestCpuThreads:
    def test_default_one_zero_all_bad_named(self, monkeypatch):
        numba = _numba()
        monkeypatch.delenv(THREADS_ENV, raising=False)
        assert cpu_threads() == 1
        monkeypatch.setenv(THREADS_ENV, "0")
        assert cpu_threads() == numba.config.NUMBA_NUM_THREADS
        for bad in ("two", "-1", str(numba.config.NUMBA_NUM_THREADS + 1)):
            monkeypatch.setenv(THREADS_ENV, bad)
            with pytest.raises(ValueError, match=THREADS_ENV):
                cpu_threads()

    def test_all_threads_give_the_same_results(self, frames, monkeypatch):
        """The parallel loops (rows, cells, features) split work, never change a result."""
        _numba()
        from vilib_ros.frontend.compiled.detector import NumbaFastDetector
        from vilib_ros.frontend.compiled.tracker import NumbaLKTracker

        out = {}
        for n in ("1", "0"):
            monkeypatch.setenv(THREADS_ENV, n)
            det, trk = NumbaFastDetector(752, 480), NumbaLKTracker(752, 480)
            cells = [det.detect(frames[k]) for k in (5, 50)]
            pts = cells[0].points()
            tr = trk.track(frames[5], frames[7], pts)
            out[n] = (cells, tr)
        for a, b in zip(out["1"][0], out["0"][0]):
            for f in ("x", "y", "score", "level"):
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        for f in ("pos", "status", "residual", "gain", "offset", "iterations"):
            np.testing.assert_array_equal(getattr(out["1"][1], f), getattr(out["0"][1], f))


class TestFactories:
    def test_cpu_device_builds_the_compiled_twins(self, monkeypatch):
        _numba()
        from vilib_ros.frontend.compiled.detector import NumbaFastDetector
        from vilib_ros.frontend.compiled.tracker import NumbaLKTracker

        monkeypatch.delenv(ENV, raising=False)
        assert type(make_detector(752, 480, DetectorConfig(), device="cpu")) is NumbaFastDetector
        assert type(make_tracker(752, 480, TrackerConfig(), device="cpu")) is NumbaLKTracker

    def test_auto_without_cuda_builds_the_compiled_twins(self, monkeypatch):
        _numba()
        from vilib_ros._cuda import cuda_available
        from vilib_ros.frontend.compiled.detector import NumbaFastDetector
        from vilib_ros.frontend.compiled.tracker import NumbaLKTracker

        if cuda_available():
            pytest.skip("this machine has CUDA: auto picks the GPU")
        monkeypatch.delenv(ENV, raising=False)
        assert type(make_detector(752, 480, DetectorConfig(), device="auto")) is NumbaFastDetector
        assert type(make_tracker(752, 480, TrackerConfig(), device="auto")) is NumbaLKTracker

    def test_numpy_forced(self, monkeypatch):
        monkeypatch.setenv(ENV, "numpy")
        assert type(make_detector(752, 480, DetectorConfig(), device="cpu")) is CpuFastDetector
        assert type(make_tracker(752, 480, TrackerConfig(), device="cpu")) is CpuLKTracker


class TestBuildPyramidHost:
    """build_pyramid_host: the compiled twin (compiled.pyramid.build_pyramid_compiled) where numba is
    selected, against the NumPy reference (reference.pyramid.build_pyramid_cpu): the compiled path is
    taken (counted), so a wrong compiled halving (rounding, odd last row / column, a level missing)
    fails, and the level counts are compared (``zip`` alone stops at the shorter list)."""

    # the full frame, an odd width and height at several levels (the last row / column dropped),
    # a non-contiguous view (the compiled halve takes C arrays) and the most levels the frame allows
    @pytest.mark.parametrize("crop, levels", [((480, 752), 5), ((479, 751), 5), ((301, 433), 4),
                                              ((480, 752), 8), ("strided", 4)])
    def test_compiled_equals_the_numpy_reference(self, frames, monkeypatch, crop, levels):
        _numba()
        from vilib_ros.frontend.compiled import pyramid as cpu_pyramid
        from vilib_ros.frontend.compiled.pyramid import build_pyramid_compiled
        from vilib_ros.frontend.config import level_shapes
        from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

        frame = frames[7]
        img = frame[::2, 1::2] if crop == "strided" else frame[:crop[0], :crop[1]]
        ref = build_pyramid_cpu(img, levels)
        assert [r.shape for r in ref] == level_shapes(img.shape[1], img.shape[0], levels)
        monkeypatch.setenv(ENV, "numba")
        calls = []

        def counted(*a):          # the real compiled function, its calls counted: build_pyramid_host used it
            calls.append(1)
            return build_pyramid_compiled(*a)

        monkeypatch.setattr(cpu_pyramid, "build_pyramid_compiled", counted)
        host = build_pyramid_host(img, levels)
        assert calls == [1], "build_pyramid_host did not take the compiled path with numba selected"
        for name, got in (("build_pyramid_compiled", build_pyramid_compiled(img, levels)),
                          ("build_pyramid_host", host)):
            assert len(got) == len(ref) == levels, name
            for k, (a, b) in enumerate(zip(got, ref)):
                assert a.dtype == np.uint8 and a.shape == b.shape, (name, k, a.dtype, a.shape, b.shape)
                np.testing.assert_array_equal(a, b, err_msg=f"{name} level {k}")   # bit-identical: integer mean
        # levels past 0 are not trivial (the frame is not flat): a wrong halving would show
        assert ref[-1].std() > 5

    def test_numpy_selected_is_the_reference(self, frames, monkeypatch):
        """VILIB_ROS_CPU_IMPL=numpy: the NumPy path's levels are the rounded 2x2 means."""
        monkeypatch.setenv(ENV, "numpy")
        got = build_pyramid_host(frames[7], 5)
        assert len(got) == 5
        np.testing.assert_array_equal(got[0], frames[7])
        for k in range(1, 5):
            # the rounded 2x2 mean written out here, independently of halve_cpu's slicing
            prev = got[k - 1].astype(np.int32)
            h, w = prev.shape[0] // 2, prev.shape[1] // 2
            blocks = prev[:2 * h, :2 * w].reshape(h, 2, w, 2).sum(axis=(1, 3))
            np.testing.assert_array_equal(got[k], ((blocks + 2) >> 2).astype(np.uint8), err_msg=f"level {k}")


_NO_NUMBA = """
import json, logging, os, sys
sys.modules["numba"] = None          # numba present on disk but not importable, as where it is not installed
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
from vilib_ros.frontend.factory import make_detector, make_tracker
out = {}
try:
    out["types"] = [type(make_detector(752, 480, device="cpu")).__name__,
                    type(make_tracker(752, 480, device="cpu")).__name__,
                    type(make_detector(752, 480, device="cpu")).__name__]
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def _run_without_numba(env_value):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop(ENV, None)
    if env_value is not None:
        env[ENV] = env_value
    r = subprocess.run([sys.executable, "-c", _NO_NUMBA], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


class TestFallbackWithoutNumba:
    def test_auto_falls_back_with_one_warning(self):
        out, log = _run_without_numba(None)
        assert out["types"] == ["CpuFastDetector", "CpuLKTracker", "CpuFastDetector"]
        warnings = [ln for ln in log.splitlines() if ln.startswith("WARNING vilib_ros.frontend.cpu")]
        assert len(warnings) == 1, log
        assert "numba" in warnings[0] and "NumPy" in warnings[0]

    def test_numba_forced_fails_loudly(self):
        out, _ = _run_without_numba("numba")
        assert out["error"].startswith(CompiledUnavailable.__name__) and "pip install numba" in out["error"]


@pytest.mark.slow
class TestFeatureTrackerCompiled:
    def test_same_tracks_as_numpy_over_the_real_frames(self, frames, monkeypatch):
        """Same ids, ages, scores and levels every frame, positions within 0.02 px."""
        _numba()
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.frontend import FeatureTracker
        from vilib_ros.frontend.compiled.detector import NumbaFastDetector
        from vilib_ros.frontend.compiled.tracker import NumbaLKTracker

        runs = {}
        for impl in ("numba", "numpy"):
            monkeypatch.setenv(ENV, impl)
            ft = FeatureTracker(euroc_cam0(), device="cpu")
            compiled = (isinstance(ft.pipeline.detector, NumbaFastDetector)
                        and isinstance(ft.pipeline.tracker, NumbaLKTracker))
            assert compiled == (impl == "numba")
            runs[impl] = ([ft.process(img, STAMP0 + k * DT) for k, img in enumerate(frames)], dict(ft.stats))
        (fa, sa), (fb, sb) = runs["numba"], runs["numpy"]
        worst = 0.0
        for k, (a, b) in enumerate(zip(fa, fb)):
            np.testing.assert_array_equal(a.ids, b.ids, err_msg=f"frame {k}")
            for f in ("age", "score", "level"):
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"frame {k} {f}")
            if len(a.ids):
                worst = max(worst, float(np.abs(a.uv - b.uv).max()))
        assert worst <= 0.02, f"max |compiled - numpy| = {worst} px"
        for key in ("tracks_new", "tracks_lost", "detection_runs", "tracked_total"):
            assert sa[key] == sb[key], key
        assert np.mean([len(f.ids) for f in fa]) > 150 and sa["detection_runs"] >= 1


class TestReadOnlyFrames:
    def test_read_only_frames_track_like_writable_ones(self, generated_frames):
        """Regression: a read-only frame (the frontend node views a ROS message's bytes without a
        copy) made the compiled LK fail with a numba typing error on every frame after the first
        (a tuple of read-only and writable levels cannot be indexed in nopython mode)."""
        _numba()
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.frontend import FeatureTracker

        runs = []
        for read_only in (False, True):
            ft = FeatureTracker(euroc_cam0(), device="cpu")
            out = []
            for k, img in enumerate(generated_frames):
                img = img.copy()
                img.flags.writeable = not read_only
                out.append(ft.process(img, STAMP0 + k * DT))
            runs.append(out)
        for a, b in zip(*runs):
            np.testing.assert_array_equal(a.ids, b.ids)
            np.testing.assert_array_equal(a.uv, b.uv)
        assert len(runs[1][-1].ids) > 50 and runs[1][-1].age.max() == len(generated_frames) - 1
