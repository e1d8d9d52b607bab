"""The CUDA LK kernel (kernels/lk.cu) against the NumPy reference (track_cpu), all modes,
on real EuRoC frames and on synthetic frames under illumination change; poisoned outputs."""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.frontend.tracker import MODES, TrackerConfig, TrackStatus, track_cpu

pytestmark = pytest.mark.gpu


def _pairs(euroc_frames):
    from vilib_ros.frontend.detector import make_detector

    det = make_detector(752, 480, device="cpu")
    out = []
    for i in (0, 40, 80):
        a, b = euroc_frames[i], euroc_frames[i + 3]
        out.append((a, b, det.detect(a).points()))
    import vilib_ros.synthetic as syn
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.3, illumination=True, gain_amplitude=0.4,
                                                   offset_amplitude=25, illumination_period_s=0.6, stereo=False,
                                                   seed=3, preset="slow"))
    a, b = seq.render(4)[0], seq.render(5)[0]
    out.append((a, b, det.detect(a).points()))
    return out


@pytest.fixture(scope="module")
def pairs(euroc_frames):
    return _pairs(euroc_frames)


class TestGpuMatchesReference:
    @pytest.mark.parametrize("mode", MODES)
    def test_positions_status_illumination(self, pairs, mode):
        from vilib_ros.frontend.tracker import GpuLKTracker

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
        from vilib_ros.frontend.tracker import GpuLKTracker

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
        from vilib_ros.frontend.tracker import GpuLKTracker, make_tracker

        assert isinstance(make_tracker(752, 480, TrackerConfig(), device="auto"), GpuLKTracker)
