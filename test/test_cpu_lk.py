"""The compiled CPU LK tracker (numba: compiled.lk, compiled.tracker) against the NumPy reference track_cpu: every mode
on EuRoC pairs (the generated sequence's where the real frames are absent) and under a synthetic
illumination change, every status the reference sets, the oscillation stop (on the real pairs),
inputs and errors. Positions within 0.02 px, statuses identical."""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.frontend.config import MODES, TrackerConfig
from vilib_ros.frontend.reference.lk import track_cpu
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
from vilib_ros.frontend.reference.tracker import CpuLKTracker
from vilib_ros.types import TrackStatus

pytest.importorskip("numba", reason="numba (the compiled CPU path, a third-party dependency) is not installed")

from vilib_ros.frontend.compiled.tracker import NumbaLKTracker  # noqa: E402

TOL_PX = 0.02


def _detect(img):
    from vilib_ros.frontend.reference.detector import CpuFastDetector

    return CpuFastDetector(img.shape[1], img.shape[0]).detect(img).points()


def _syn_pair_config():
    try:
        from vilib_ros.synthetic import SequenceConfig
    except ImportError:
        return None
    return SequenceConfig(duration_s=0.3, illumination=True, gain_amplitude=0.4, offset_amplitude=25,
                          illumination_period_s=0.6, stereo=False, seed=3, preset="slow")


SYN_PAIR = _syn_pair_config()     # the synthetic pair's generator (a global gain / offset change)


@pytest.fixture(scope="module")
def pairs(frames):
    """(template pyramid, image pyramid, features, perturbed prediction) on three pairs of the frames
    (real ones where present, else the generated sequence's) and a synthetic pair with a global
    illumination change."""
    return _pairs(frames)


@pytest.fixture(scope="module")
def real_pairs(euroc_frames):
    """:func:`pairs` on the real frames."""
    return _pairs(euroc_frames)


def _pairs(frames):
    out = []
    for i, gap in ((0, 3), (40, 3), (80, 5)):
        a, b = frames[i], frames[i + gap]
        out.append((a, b, _detect(a)))
    syn = pytest.importorskip("vilib_ros.synthetic")
    seq = syn.SyntheticSequence(SYN_PAIR)
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
        """The pair's global change against the generator's own (gain, offset) of frames 4 and 5:
        ``I5 = (g5 / g4) T + o5 - (g5 / g4) o4`` = 0.891 T - 11.9; a tracker that never moves its gain
        (mode 'offset') fails it. The tolerances allow for the generator's clipping and noise, which bias
        both estimates a little."""
        tp, ip, pts, pred = pairs[-1]      # synthetic pair with a global gain / offset change
        got = NumbaLKTracker(752, 480, TrackerConfig(mode="gain_offset")).track(tp, ip, pts, pred)
        ok = got.status == TrackStatus.TRACKED
        assert ok.sum() > 200
        syn = pytest.importorskip("vilib_ros.synthetic")
        seq = syn.SyntheticSequence(SYN_PAIR)                 # the fixture's generator: its truth, not the tracker's
        (g4, o4), (g5, o5) = seq.photometric(4), seq.photometric(5)
        ratio, offset = g5 / g4, o5 - g5 / g4 * o4
        gain = got.gain[ok]
        assert abs(np.median(gain) - ratio) < 0.06, np.median(gain)
        q25, q75 = np.percentile(gain, [25, 75])
        assert q75 - q25 < 0.1, (q25, q75)                  # one global change: about one gain for all
        assert abs(np.median(got.offset[ok]) - offset) < 8.0, np.median(got.offset[ok])

    @pytest.mark.parametrize("osc", [dict(osc_eps=0.0, osc_growth=0.0), dict(osc_eps=0.3, osc_growth=0.0),
                                     dict(osc_eps=0.0, osc_growth=0.25)])
    def test_oscillation_stop(self, real_pairs, osc):
        """Both oscillation tests, each alone and off, on a noisy start that makes them fire, on the
        real frames: with both off, a feature that bounces until the iteration cap ends on a status
        that float rounding can change (a few do on the generated sequence's frames)."""
        pairs = real_pairs
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
    def test_every_status_the_reference_sets(self, frames):
        a, b = frames[20], frames[22]
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

    def test_noise_image_is_lost(self, frames):
        a = frames[0]
        noise = np.random.default_rng(0).integers(0, 256, a.shape, dtype=np.uint8)
        pts = _detect(a)[:60]
        cfg = TrackerConfig(mode="translation", max_residual=20.0)
        got = NumbaLKTracker(752, 480, cfg).track(a, noise, pts)
        assert_matches_reference(got, track_cpu(a, noise, pts, None, cfg), "noise")
        assert np.all(got.status != TrackStatus.TRACKED)


class TestNumbaLKTracker:
    def test_images_or_pyramids_and_defaults(self, frames):
        a, b = frames[30], frames[31]
        pts = _detect(a)[:50]
        trk = NumbaLKTracker(752, 480, TrackerConfig(levels=3, patch_sizes=(16, 8, 8)))
        r1 = trk.track(a, b, pts)                              # images, pred = tmpl_pos
        r2 = trk.track(build_pyramid_cpu(a, 6), build_pyramid_cpu(b, 6), pts, pts)   # longer pyramids
        ref = track_cpu(a, b, pts, None, trk.config)
        assert_matches_reference(r1, ref)
        for f in ("pos", "status", "gain", "offset", "iterations"):
            np.testing.assert_array_equal(getattr(r1, f), getattr(r2, f))

    def test_empty_and_interface(self, frames):
        trk = NumbaLKTracker(752, 480, TrackerConfig())
        r = trk.track(frames[0], frames[1], np.zeros((0, 2), np.float32))
        assert r.pos.shape == (0, 2) and r.status.shape == (0,)
        assert isinstance(trk, CpuLKTracker) and trk.device == "cpu"

    def test_opencv_backend_passes_through(self, frames):
        a, b = frames[20], frames[21]
        pts = _detect(a)[:40]
        cfg = TrackerConfig(mode="translation", cpu_backend="opencv", template="previous", warp="translation")
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


class TestFinestLevels:
    """``track(..., levels=k)``: the forward-backward check's backward track on the k finest levels
    (FrontendConfig.fb_levels), compiled against the NumPy reference run with ``levels=k``."""

    @pytest.mark.parametrize("levels", [1, 2, 3])
    def test_matches_reference_on_fewer_levels(self, pairs, levels):
        import dataclasses

        cfg = TrackerConfig()
        trk = NumbaLKTracker(752, 480, cfg)
        for k, (tp, ip, pts, pred) in enumerate(pairs):
            ref = track_cpu(tp, ip, pts, pred, dataclasses.replace(cfg, levels=levels))
            got = trk.track(tp, ip, pts, pred, levels=levels)
            assert_matches_reference(got, ref, f"levels {levels} pair {k}")

    def test_fewer_levels_search_less(self, frames):
        """The level count reaches the kernel: a 24 px shift is found from the shifted start on one
        level and on five, but from the unshifted start only with the coarse levels (one level's
        16x16 patch cannot see 24 px away)."""
        a = frames[10]
        b = np.zeros_like(a)
        b[:, 24:] = a[:, :-24]
        pts = _detect(a)
        pts = pts[(pts[:, 0] > 60) & (pts[:, 0] < 680) & (pts[:, 1] > 40) & (pts[:, 1] < 440)][:80]
        trk = NumbaLKTracker(752, 480, TrackerConfig())
        true = pts + np.array([24, 0], np.float32)

        def found(r):
            return (r.status == TrackStatus.TRACKED) & (np.abs(r.pos - true).max(1) < 0.5)

        for lv in (1, 5):
            assert found(trk.track(a, b, pts, true, levels=lv)).mean() > 0.9
        assert found(trk.track(a, b, pts, pts, levels=5)).mean() > 0.8
        assert found(trk.track(a, b, pts, pts, levels=1)).mean() < 0.2

    def test_levels_out_of_range_read_as_messages(self, frames):
        a = frames[0]
        with pytest.raises(ValueError, match="levels must be in 1..5"):
            NumbaLKTracker(752, 480, TrackerConfig()).track(a, a, np.full((2, 2), 100, np.float32), levels=6)


def _bank(pairs_entry, cfg, rng, capacity=400):
    """A template bank holding the templates of a pair's features in shuffled rows."""
    from vilib_ros.frontend.track_table import TemplateBank

    tp, ip, pts, pred = pairs_entry
    bank = TemplateBank(capacity, cfg.levels)
    slots = rng.permutation(capacity)[: len(pts)]
    NumbaLKTracker(752, 480, cfg).extract_templates(tp, pts, bank.patch, bank.valid, slots)
    return bank, slots


class TestStoredTemplates:
    """``template='reference'``: the compiled extraction and tracking against stored templates
    (translation and affine warps, every photometric mode) against the NumPy reference, from
    perturbed starts, illumination and warps."""

    def test_extraction_equals_reference(self, pairs):
        from vilib_ros.frontend.reference.templates import extract_templates_cpu

        cfg = TrackerConfig(template="reference")
        rng = np.random.default_rng(0)
        for tp, ip, pts, pred in pairs:
            pos = np.concatenate([pts + rng.uniform(-0.5, 0.5, pts.shape).astype(np.float32),
                                  np.array([[2, 2], [751, 100], [np.nan, 5]], np.float32)])
            patch, valid = extract_templates_cpu(tp, pos, cfg)
            bank, slots = _bank((tp, ip, pos, pred), cfg, rng, capacity=len(pos) + 7)
            np.testing.assert_array_equal(bank.valid[slots], valid)
            np.testing.assert_allclose(bank.patch[slots], patch, atol=1e-4)
            assert valid[-3:].sum() == 0 and valid[:-3, 0].mean() > 0.9 and valid[:-3].any(0).all()

    @pytest.mark.parametrize("warp", ["translation", "affine"])
    @pytest.mark.parametrize("mode", MODES)
    def test_tracking_equals_reference(self, pairs, mode, warp):
        from vilib_ros.frontend.reference.templates import track_templates_cpu

        cfg = TrackerConfig(mode=mode, template="reference", warp=warp)
        trk = NumbaLKTracker(752, 480, cfg)
        rng = np.random.default_rng(1)
        counts = np.zeros(5, int)
        for k, entry in enumerate(pairs):
            bank, slots = _bank(entry, cfg, rng)
            tp, ip, pts, pred = entry
            n = len(pts)
            gain = rng.uniform(0.9, 1.1, n).astype(np.float32)
            offset = rng.uniform(-5, 5, n).astype(np.float32)
            affine = (np.array([1, 0, 0, 1]) + rng.normal(0, 0.02, (n, 4))).astype(np.float32)
            act = rng.random(n) > 0.05
            ref = track_templates_cpu(bank.patch, bank.valid, slots, ip, pred, cfg, gain, offset, affine, act)
            got = trk.track_templates(bank.patch, bank.valid, slots, ip, pred, gain, offset, affine, act)
            assert_matches_reference(got, ref, f"{mode} {warp} pair {k}")
            if warp == "affine":
                kept = ref.status == TrackStatus.TRACKED
                np.testing.assert_allclose(got.affine[kept], ref.affine[kept], atol=1e-4)
                np.testing.assert_array_equal(got.affine[~act], affine[~act])
            else:
                assert got.affine is None and ref.affine is None
            counts += np.bincount(ref.status, minlength=5)
        assert counts[TrackStatus.TRACKED] > 0.8 * counts.sum() and counts[TrackStatus.INACTIVE] > 0

    def test_previous_frame_template_is_track_cpu(self, pairs):
        """Tracking against templates stored from the previous frame is frame-to-frame tracking:
        the stored (P + 2)^2 samples give the same template values and gradients as the pyramid."""
        cfg = TrackerConfig(template="reference", warp="translation")
        trk = NumbaLKTracker(752, 480, cfg)
        rng = np.random.default_rng(2)
        for entry in pairs:
            tp, ip, pts, pred = entry
            bank, slots = _bank(entry, cfg, rng)
            got = trk.track_templates(bank.patch, bank.valid, slots, ip, pred)
            assert_matches_reference(got, track_cpu(tp, ip, pts, pred, cfg), "stored vs pyramid")

    @pytest.mark.parametrize("kw,match", [
        (dict(patch=np.zeros((10, 5, 100), np.float32)), "template bank"),
        (dict(patch=np.zeros((10, 5, 324), np.float64)), "template bank"),
        (dict(valid=np.zeros((10, 4), np.uint8)), "validity"),
        (dict(slots=np.array([0, 1, 2, 10])), "slots outside"),
        (dict(pred=np.zeros((3, 2), np.float32)), "pred"),
    ])
    def test_errors_read_as_messages(self, kw, match):
        args = dict(patch=np.zeros((10, 5, 324), np.float32), valid=np.zeros((10, 5), np.uint8),
                    slots=np.arange(4), img=np.zeros((480, 752), np.uint8), pred=np.full((4, 2), 100, np.float32))
        args.update(kw)
        with pytest.raises(ValueError, match=match):
            NumbaLKTracker(752, 480, TrackerConfig(template="reference")).track_templates(**args)
