"""The compiled CPU LK tracker (numba: cpu_lk) against the NumPy reference track_cpu: every mode
on real EuRoC pairs and under a synthetic illumination change, every status the reference sets,
the oscillation stop, inputs and errors. Positions within 0.02 px, statuses identical."""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.frontend.pyramid import build_pyramid_cpu
from vilib_ros.frontend.tracker import MODES, CpuLKTracker, TrackerConfig, TrackStatus, track_cpu

pytest.importorskip("numba", reason="numba (the compiled CPU path, a third-party dependency) is not installed")

from vilib_ros.frontend.cpu_lk import NumbaLKTracker  # noqa: E402

TOL_PX = 0.02


def _detect(img):
    from vilib_ros.frontend.detector import CpuFastDetector

    return CpuFastDetector(img.shape[1], img.shape[0]).detect(img).points()


@pytest.fixture(scope="module")
def pairs(euroc_frames):
    """(template pyramid, image pyramid, features, perturbed prediction) on real and synthetic frames."""
    out = []
    for i, gap in ((0, 3), (40, 3), (80, 5)):
        a, b = euroc_frames[i], euroc_frames[i + gap]
        out.append((a, b, _detect(a)))
    syn = pytest.importorskip("vilib_ros.synthetic")
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.3, illumination=True, gain_amplitude=0.4,
                                                   offset_amplitude=25, illumination_period_s=0.6, stereo=False,
                                                   seed=3, preset="slow"))
    a, b = seq.render(4)[0], seq.render(5)[0]
    out.append((a, b, _detect(a)))
    res = []
    for k, (a, b, pts) in enumerate(out):
        pred = pts + np.random.default_rng(k).normal(0, 1.5, pts.shape).astype(np.float32)
        res.append((build_pyramid_cpu(a, 5), build_pyramid_cpu(b, 5), pts, pred))
    return res


def assert_matches_reference(got, ref, what=""):
    """Identical status; for tracked features positions within TOL_PX, gain, offset, residual
    to float rounding. (Features that diverge or bounce until the iteration cap follow a path
    that float rounding changes: only their status is compared.)"""
    np.testing.assert_array_equal(got.status, ref.status, err_msg=f"{what}: status")
    assert got.pos.dtype == np.float32 and got.status.dtype == np.int8 and got.iterations.dtype == np.int32
    kept = ref.status == TrackStatus.TRACKED
    assert np.isfinite(got.pos[kept]).all() and np.isfinite(got.residual[kept]).all()
    d = np.abs(got.pos[kept] - ref.pos[kept]).max(initial=0.0)
    assert d <= TOL_PX, f"{what}: max |compiled - reference| = {d:.4f} px"
    np.testing.assert_allclose(got.gain[kept], ref.gain[kept], atol=1e-4, err_msg=what)
    np.testing.assert_allclose(got.offset[kept], ref.offset[kept], atol=0.02, err_msg=what)
    np.testing.assert_allclose(got.residual[kept], ref.residual[kept], atol=0.01, err_msg=what)
    assert np.count_nonzero(got.iterations[kept] != ref.iterations[kept]) <= 0.01 * len(kept), what
    inactive = ref.status == TrackStatus.INACTIVE
    np.testing.assert_array_equal(got.pos[inactive], ref.pos[inactive])
    return d


class TestLkTrack:
    @pytest.mark.parametrize("mode", MODES)
    def test_every_mode_matches_reference(self, pairs, mode):
        cfg = TrackerConfig(mode=mode)
        trk = NumbaLKTracker(752, 480, cfg)
        n, worst, counts = 0, 0.0, np.zeros(5, int)
        for k, (tp, ip, pts, pred) in enumerate(pairs):
            ref = track_cpu(tp, ip, pts, pred, cfg)
            got = trk.track(tp, ip, pts, pred)
            worst = max(worst, assert_matches_reference(got, ref, f"{mode} pair {k}"))
            n += len(pts)
            counts += np.bincount(ref.status, minlength=5)
        print(f"\n{mode}: {n} features, status identical, max |compiled - reference| {worst:.2e} px, "
              f"statuses {counts.tolist()}")
        assert counts[TrackStatus.TRACKED] > 0.8 * n

    def test_illumination_is_estimated(self, pairs):
        tp, ip, pts, pred = pairs[-1]      # synthetic pair with a global gain / offset change
        got = NumbaLKTracker(752, 480, TrackerConfig(mode="gain_offset")).track(tp, ip, pts, pred)
        ok = got.status == TrackStatus.TRACKED
        assert np.std(got.gain[ok]) > 1e-3 or np.std(got.offset[ok]) > 0.1, "no illumination change estimated"

    @pytest.mark.parametrize("osc", [dict(osc_eps=0.0, osc_growth=0.0), dict(osc_eps=0.3, osc_growth=0.0),
                                     dict(osc_eps=0.0, osc_growth=0.25)])
    def test_oscillation_stop(self, pairs, osc):
        """Both oscillation tests, each alone and off, on a noisy start that makes them fire."""
        cfg = TrackerConfig(mode="gain_offset", max_iterations=30, **osc)
        base = TrackerConfig(mode="gain_offset", max_iterations=30, osc_eps=0.0, osc_growth=0.0)
        trk = NumbaLKTracker(752, 480, cfg)
        fired = 0
        for tp, ip, pts, pred in pairs[:2]:
            ref = track_cpu(tp, ip, pts, pred, cfg)
            assert_matches_reference(trk.track(tp, ip, pts, pred), ref, str(osc))
            fired += np.count_nonzero(ref.iterations != track_cpu(tp, ip, pts, pred, base).iterations)
        if osc["osc_eps"] or osc["osc_growth"]:
            assert fired > 0, "the oscillation stop never fired: the test shows nothing"


class TestStatuses:
    def test_every_status_the_reference_sets(self, euroc_frames):
        a, b = euroc_frames[20], euroc_frames[22]
        flat = a.copy()
        flat[190:230, 280:320] = 128
        pts = np.array([[100, 100], [744, 240], [300, 210], [400, 300], [200, 200], [5, 5], [np.inf, 3],
                        [600, 400]], np.float32)
        pred = pts.copy()
        pred[1] = [760, 240]          # prediction outside the image
        pred[3] = [np.nan, 3]         # NaN prediction
        pred[7] = [600.3, 401.2]
        act = np.array([1, 1, 1, 1, 0, 1, 1, 1], bool)
        for cfg in (TrackerConfig(), TrackerConfig(mode="translation", max_iterations=1),
                    TrackerConfig(max_residual=1.0)):
            ref = track_cpu(flat, b, pts, pred, cfg, active=act)
            got = NumbaLKTracker(752, 480, cfg).track(flat, b, pts, pred, active=act)
            assert_matches_reference(got, ref, repr(cfg))
            np.testing.assert_array_equal(got.pos[4], pred[4])          # inactive: the prediction, unchanged
        seen = set()
        for cfg in (TrackerConfig(), TrackerConfig(mode="translation", max_iterations=1), TrackerConfig(max_residual=1.0)):
            seen |= set(track_cpu(flat, b, pts, pred, cfg, active=act).status.tolist())
        assert seen == set(TrackStatus), f"the cases cover only {sorted(seen)}"

    def test_noise_image_is_lost(self, euroc_frames):
        a = euroc_frames[0]
        noise = np.random.default_rng(0).integers(0, 256, a.shape, dtype=np.uint8)
        pts = _detect(a)[:60]
        cfg = TrackerConfig(mode="translation", max_residual=20.0)
        got = NumbaLKTracker(752, 480, cfg).track(a, noise, pts)
        assert_matches_reference(got, track_cpu(a, noise, pts, None, cfg), "noise")
        assert np.all(got.status != TrackStatus.TRACKED)


class TestNumbaLKTracker:
    def test_images_or_pyramids_and_defaults(self, euroc_frames):
        a, b = euroc_frames[30], euroc_frames[31]
        pts = _detect(a)[:50]
        trk = NumbaLKTracker(752, 480, TrackerConfig(levels=3, patch_sizes=(16, 8, 8)))
        r1 = trk.track(a, b, pts)                              # images, pred = tmpl_pos
        r2 = trk.track(build_pyramid_cpu(a, 6), build_pyramid_cpu(b, 6), pts, pts)   # longer pyramids
        ref = track_cpu(a, b, pts, None, trk.config)
        assert_matches_reference(r1, ref)
        for f in ("pos", "status", "gain", "offset", "iterations"):
            np.testing.assert_array_equal(getattr(r1, f), getattr(r2, f))

    def test_empty_and_interface(self, euroc_frames):
        trk = NumbaLKTracker(752, 480, TrackerConfig())
        r = trk.track(euroc_frames[0], euroc_frames[1], np.zeros((0, 2), np.float32))
        assert r.pos.shape == (0, 2) and r.status.shape == (0,)
        assert isinstance(trk, CpuLKTracker) and trk.device == "cpu"

    def test_opencv_backend_passes_through(self, euroc_frames):
        a, b = euroc_frames[20], euroc_frames[21]
        pts = _detect(a)[:40]
        cfg = TrackerConfig(mode="translation", cpu_backend="opencv")
        got = NumbaLKTracker(752, 480, cfg).track(a, b, pts)
        want = CpuLKTracker(752, 480, cfg).track(a, b, pts)
        np.testing.assert_array_equal(got.pos, want.pos)

    @pytest.mark.parametrize("kw,match", [
        (dict(tmpl=np.zeros((480, 752), np.float32)), "uint8"),
        (dict(img=np.zeros((240, 376), np.uint8)), "uint8"),
        (dict(tmpl=[np.zeros((480, 752), np.uint8)] * 2), "levels"),
        (dict(pred=np.zeros((3, 2), np.float32)), "pred"),
        (dict(tmpl_pos=np.zeros((2000, 2), np.float32)), "max_features"),
    ])
    def test_errors_read_as_messages(self, kw, match):
        args = dict(tmpl=np.zeros((480, 752), np.uint8), img=np.zeros((480, 752), np.uint8),
                    tmpl_pos=np.full((4, 2), 100, np.float32), pred=None)
        args.update(kw)
        with pytest.raises(ValueError, match=match):
            NumbaLKTracker(752, 480, TrackerConfig()).track(**args)
