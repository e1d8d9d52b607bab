"""The CUDA LK kernels (kernels/lk.cu) against the NumPy references, all modes, on real EuRoC
frames and on synthetic frames under illumination change; poisoned outputs: frame to frame
(lk_track_*, against track_cpu), and against stored templates (lk_extract against
extract_templates_cpu, lk_template_<warp>_<mode> against track_templates_cpu)."""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros import synthetic as syn
from vilib_ros.frontend.config import MODES, PATCH_AREA, WARPS, TrackerConfig
from vilib_ros.frontend.reference.lk import track_cpu
from vilib_ros.types import TrackStatus

pytestmark = pytest.mark.gpu


def _pairs(frames):
    from vilib_ros.frontend.factory import make_detector

    det = make_detector(752, 480, device="cpu")
    out = []
    for i in (0, 40, 80):
        a, b = frames[i], frames[i + 3]
        out.append((a, b, det.detect(a).points()))
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.3, illumination=True, gain_amplitude=0.4,
                                                   offset_amplitude=25, illumination_period_s=0.6, stereo=False,
                                                   seed=3, preset="slow"))
    a, b = seq.render(4)[0], seq.render(5)[0]
    out.append((a, b, det.detect(a).points()))
    return out


@pytest.fixture(scope="module")
def pairs(frames):
    return _pairs(frames)


class TestGpuMatchesReference:
    @pytest.mark.parametrize("mode", MODES)
    def test_positions_status_illumination(self, pairs, mode):
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker

        cfg = TrackerConfig(mode=mode)
        gpu = GpuLKTracker(752, 480, cfg, max_features=512)
        n_all, n_close, n_status, diffs = 0, 0, 0, []
        for a, b, pts in pairs:
            rng = np.random.default_rng(len(pts))
            pred = pts + rng.normal(0, 1.0, pts.shape).astype(np.float32)   # a non-trivial initial guess
            ref = track_cpu(a, b, pts, pred, cfg)
            for k, v in gpu.d_out.items():          # poison every output
                v.fill(-7 if v.dtype.kind in "iu" else np.nan)
            res = gpu.track(a, b, pts, pred)
            assert np.all(np.isin(res.status, list(TrackStatus)))
            tr = res.status == TrackStatus.TRACKED
            assert np.isfinite(res.pos[tr]).all() and np.isfinite(res.residual[tr]).all()
            both = (ref.status == TrackStatus.TRACKED) & (res.status == TrackStatus.TRACKED)
            d = np.linalg.norm(ref.pos - res.pos, axis=1)[both]
            diffs.append(d)
            n_all += len(pts)
            n_status += np.count_nonzero(ref.status == res.status)
            n_close += np.count_nonzero(d < 0.02)
            assert np.median(np.abs(ref.gain[both] - res.gain[both])) < 0.002
            assert np.median(np.abs(ref.offset[both] - res.offset[both])) < 0.2
            assert np.median(np.abs(ref.residual[both] - res.residual[both])) < 0.05
            assert np.abs(ref.iterations[both] - res.iterations[both]).mean() < 1.0
            # slots beyond n keep their poison
            assert np.isnan(gpu.d_out["pos"][len(pts):].get()).all()
        d = np.concatenate(diffs)
        print(f"\n{mode}: {n_all} features, status agrees {n_status / n_all:.1%}, "
              f"|gpu - cpu| median {np.median(d):.5f} max {d.max():.4f} px, within 0.02 px {n_close / len(d):.1%}")
        assert n_status >= 0.97 * n_all
        assert n_close >= 0.98 * len(d)
        assert np.median(d) < 0.002

    def test_inactive_and_left_image(self, pairs):
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker

        a, b, _ = pairs[0]
        pts = np.array([[100, 100], [745, 240], [300, 200], [400, 300]], np.float32)
        pred = pts.copy()
        pred[1] = [760, 240]
        pred[3] = [np.nan, 3]
        gpu = GpuLKTracker(752, 480, TrackerConfig(), max_features=8)
        r = gpu.track(a, b, pts, pred, active=np.array([1, 1, 0, 1], np.int8))
        ref = track_cpu(a, b, pts, pred, TrackerConfig(), active=np.array([1, 1, 0, 1], bool))
        assert list(r.status) == list(ref.status)
        assert r.status[2] == TrackStatus.INACTIVE and r.status[3] == TrackStatus.DIVERGED

    def test_make_tracker_picks_gpu(self):
        from vilib_ros.frontend.factory import make_tracker
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker

        assert isinstance(make_tracker(752, 480, TrackerConfig(), device="auto"), GpuLKTracker)


def _device_templates(gpu, cfg, img, pts, rows, capacity):
    """lk_extract of ``pts`` in ``img`` (device pyramid) into bank rows ``rows`` of a poisoned
    bank; returns (bank, valid) on the device and the pyramid."""
    import cupy as cp

    from vilib_ros._cuda import launch
    from vilib_ros.frontend.config import BANK_STRIDE
    from vilib_ros.frontend.gpu.pyramid import GpuPyramid

    pyr = GpuPyramid(752, 480, cfg.levels)
    pyr.upload(img)
    pyr.build()
    n = len(pts)
    bank = cp.full((capacity, cfg.levels, BANK_STRIDE), cp.nan, cp.float32)
    valid = cp.full((capacity, cfg.levels), 7, cp.uint8)
    count = cp.array([n], cp.int64)
    launch(gpu.extract_kernel, ((n + gpu.warps - 1) // gpu.warps, 1, 1), (32, gpu.warps, 1),
           (gpu.level_table(pyr), np.int32(752), np.int32(480), np.int32(cfg.levels), np.int32(cfg.patch16_mask),
            count, cp.asarray(pts, cp.float32), cp.asarray(rows, cp.int32), np.uint64(0), bank, valid))
    return bank, valid, pyr


class TestTemplateKernels:
    """lk_extract and lk_template_<warp>_<mode> against the NumPy oracle of
    vilib_ros.frontend.reference.templates, with poisoned buffers."""

    def test_extract_matches_reference(self, pairs):
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker
        from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
        from vilib_ros.frontend.reference.templates import extract_templates_cpu

        cfg = TrackerConfig(template="reference", warp="affine")
        gpu = GpuLKTracker(752, 480, cfg, max_features=512)
        for a, _, pts in pairs:
            pts = np.vstack([pts + np.float32(0.37), [[3.0, 3.0], [748.0, 200.0], [np.nan, 5.0]]]).astype(np.float32)
            n = len(pts)
            rows = np.random.default_rng(n).permutation(n + 5)[:n]     # another order, 5 rows left unused
            bank, valid, _ = _device_templates(gpu, cfg, a, pts, rows, n + 5)
            ref_p, ref_v = extract_templates_cpu(build_pyramid_cpu(a, cfg.levels), pts, cfg)
            b, v = bank.get(), valid.get()
            np.testing.assert_array_equal(v[rows], ref_v)
            for lvl, P in enumerate(cfg.patch_sizes):
                ok = ref_v[:, lvl] == 1
                A = (P + 2) ** 2
                np.testing.assert_allclose(b[rows][ok, lvl, :A], ref_p[ok, lvl, :A], atol=2e-3)
            unused = np.setdiff1d(np.arange(n + 5), rows)
            assert (v[unused] == 7).all() and np.isnan(b[unused]).all()

    @pytest.mark.parametrize("feature_warps", [2, 1], ids=["two_warps", "one_warp"])   # 4: host emulation
    @pytest.mark.parametrize("warp", WARPS)
    @pytest.mark.parametrize("mode", MODES)
    def test_tracking_matches_reference(self, pairs, mode, warp, feature_warps):
        """The thread mappings of lk_template_* (LK_FEATURE_WARPS: two warps per feature exchanging
        their sums through shared memory, the default; one warp) against the NumPy oracle (four
        warps: test_tracker_cpu's host emulation)."""
        import cupy as cp

        from vilib_ros._cuda import launch
        from vilib_ros.frontend.gpu.pyramid import GpuPyramid
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker
        from vilib_ros.frontend.reference.templates import track_templates_cpu

        cfg = TrackerConfig(mode=mode, template="reference", warp=warp)
        gpu = GpuLKTracker(752, 480, cfg, max_features=512, feature_warps=feature_warps)
        assert gpu.feature_warps == feature_warps
        n_all, n_status, diffs, aff_d = 0, 0, [], []
        for a, b, pts in pairs:
            n = len(pts)
            rng = np.random.default_rng(n)
            rows = rng.permutation(n).astype(np.int32)
            bank, valid, _ = _device_templates(gpu, cfg, a, pts, rows, n)
            pb = GpuPyramid(752, 480, cfg.levels)
            pb.upload(b)
            pb.build()
            pred = pts + rng.normal(0, 1.0, pts.shape).astype(np.float32)
            gain0 = rng.uniform(0.9, 1.1, n).astype(np.float32)
            offset0 = rng.uniform(-5, 5, n).astype(np.float32)
            affine0 = (np.tile([1, 0, 0, 1], (n, 1)) + rng.normal(0, 0.02, (n, 4))).astype(np.float32)
            m = n + 16                              # outputs beyond n stay poisoned
            out = {"pos": cp.full((m, 2), cp.nan, cp.float32), "status": cp.full(m, -7, cp.int8),
                   "xy": cp.full((m, 2), -7, cp.float32), "iters": cp.full(m, -7, cp.int32),
                   "residual": cp.full(m, cp.nan, cp.float32), "gain": cp.full(m, cp.nan, cp.float32),
                   "offset": cp.full(m, cp.nan, cp.float32), "affine": cp.full((m, 4), cp.nan, cp.float32)}
            null = np.uint64(0)
            launch(gpu.template_kernel, *gpu.template_launch(n),
                   (bank, valid, cp.asarray(rows), cp.asarray(gain0), cp.asarray(offset0), cp.asarray(affine0),
                    gpu.level_table(pb), np.int32(752), np.int32(480), np.int32(cfg.levels),
                    np.int32(cfg.patch16_mask), cp.array([n], cp.int64), cp.asarray(pred), null, null, null, null,
                    np.int32(cfg.max_iterations), np.float32(cfg.eps), np.float32(cfg.min_eigen),
                    np.float32(cfg.max_residual), out["pos"], out["status"], out["xy"], out["iters"],
                    out["residual"], out["gain"], out["offset"], out["affine"] if warp == "affine" else null))
            o = {k: v.get() for k, v in out.items()}
            for k, v in o.items():                  # untouched beyond n
                assert (np.isnan(v[n:]) if v.dtype.kind == "f" and k != "xy" else v[n:] == -7).all(), k
            assert np.isnan(o["xy"][:n]).all()      # no camera: NaN
            samples = np.ascontiguousarray(bank.get()[:, :, :PATCH_AREA])     # the bank less the solvers
            ref = track_templates_cpu(samples, valid.get(), rows, b, pred, cfg, gain0, offset0,
                                      affine0 if warp == "affine" else None)
            st = o["status"][:n]
            assert np.all(np.isin(st, list(TrackStatus)))
            both = (ref.status == TrackStatus.TRACKED) & (st == TrackStatus.TRACKED)
            assert np.isfinite(o["pos"][:n][st == 0]).all()
            d = np.linalg.norm(ref.pos - o["pos"][:n], axis=1)[both]
            diffs.append(d)
            n_all += n
            n_status += np.count_nonzero(ref.status == st)
            assert np.median(np.abs(ref.gain - o["gain"][:n])[both]) < 0.002
            assert np.median(np.abs(ref.offset - o["offset"][:n])[both]) < 0.2
            assert np.median(np.abs(ref.residual - o["residual"][:n])[both]) < 0.05
            assert np.abs(ref.iterations - o["iters"][:n])[both].mean() < 1.0
            if warp == "affine":
                aff_d.append(np.abs(ref.affine - o["affine"][:n])[both].ravel())
        d = np.concatenate(diffs)
        mapping = f"{feature_warps} warp(s) per feature"
        print(f"\n{warp}/{mode} ({mapping}): {n_all} features, status agrees {n_status / n_all:.1%}, |gpu - cpu| median "
              f"{np.median(d):.5f} max {d.max():.4f} px, within 0.02 px {np.mean(d < 0.02):.1%}")
        assert n_status >= 0.97 * n_all
        assert np.mean(d < 0.02) >= 0.98 and np.median(d) < 0.002
        if warp == "affine":
            assert np.median(np.concatenate(aff_d)) < 1e-3
