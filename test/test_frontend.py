"""FeatureTracker (vilib_ros.frontend): ids, ages, redetection, FB check, RANSAC, stereo,
undistortion, bad input, live configuration; CPU path everywhere, the same checks on the GPU
path (marked gpu), the GPU and CPU pipelines against each other on the real frames, plus
GPU-only pipeline properties (graphs, inputs, result slots, flat memory pool, poisoned outputs)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vilib_ros import synthetic as syn
from vilib_ros.camera import CameraModel, euroc_cam0
from vilib_ros.frontend import FeatureTracker, FrontendConfig, check_buildable
from vilib_ros.frontend.config import DetectorConfig, TrackerConfig

cv2 = pytest.importorskip("cv2")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
STAMP0 = 1_000_000_000_000
DT = 50_000_000


@pytest.fixture(scope="module")
def synth():
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.5, stereo=True, seed=4))
    imgs = [seq.render(k)[0] for k in range(8)]
    rights = [seq.render(k, cam=1)[0] for k in range(3)]
    return seq, imgs, rights


@pytest.fixture(scope="module")
def synth_fast():
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.6, stereo=False, seed=5, preset="fast_rotation"))
    return seq, [seq.render(k)[0] for k in range(10)]


#: frame to frame with a translation (the default before reference templates)
F2F = TrackerConfig(template="previous", warp="translation")


def _cfg(**kw):
    tr = kw.pop("tracker", None)
    return FrontendConfig(tracker=tr or TrackerConfig(), **kw)


class TestFrontendConfig:
    @pytest.mark.parametrize("kw", [dict(max_features=-1), dict(min_track_fraction=1.5), dict(fb_threshold=0),
                                    dict(fb_levels=-1), dict(fb_levels=6), dict(fb_levels=1.5),
                                    dict(ransac_confidence=1.0), dict(imu_max_gap_ms=0)])
    def test_invalid(self, kw):
        with pytest.raises(ValueError):
            FrontendConfig(**kw).validate()

    def test_target_is_cells_or_max_features(self):
        ft = FeatureTracker(euroc_cam0(), FrontendConfig(), device="cpu")
        assert ft.target == 15 * 24
        ft = FeatureTracker(euroc_cam0(), FrontendConfig(max_features=100), device="cpu")
        assert ft.target == 100


#: in the declared parameter ranges, yet some cannot be built for a 752x480 image (or on the GPU)
_BUILDABLE_CASES = [dict(), dict(detector=DetectorConfig(cell_width=1024)),
                    dict(detector=DetectorConfig(cell_height=1024)), dict(detector=DetectorConfig(border=256)),
                    dict(detector=DetectorConfig(levels=4, cell_height=64, border=40)),
                    dict(detector=DetectorConfig(levels=1, cell_height=1)), dict(max_features=5000),
                    dict(max_features=4096)]


@pytest.mark.parametrize("device", DEVICES)
class TestCheckBuildable:
    """check_buildable says in advance what building a FeatureTracker refuses (a node checks a
    parameter change with it; guards: an in-range detector.cell_width of 1024 taken, the rebuild
    raising in the post-set callback and ending the frontend node). The reference is the
    construction itself, case by case."""

    @pytest.mark.parametrize("kw", _BUILDABLE_CASES)
    def test_agrees_with_construction(self, device, kw):
        cfg = _cfg(**kw)
        try:
            FeatureTracker(euroc_cam0(), cfg, device=device)
            built = None
        except ValueError as exc:
            built = str(exc)
        try:
            check_buildable(752, 480, cfg, device)
            checked = None
        except ValueError as exc:
            checked = str(exc)
        assert checked == built

    def test_cpu_and_gpu_limits(self, device):
        check_buildable(752, 480, _cfg(max_features=5000), "cpu")
        with pytest.raises(ValueError, match="at most 4096 tracks, got a target of 5000"):
            check_buildable(752, 480, _cfg(max_features=5000), "cuda")
        with pytest.raises(ValueError, match="smaller than one cell"):
            check_buildable(752, 480, _cfg(detector=DetectorConfig(cell_width=1024)), device)


@pytest.mark.parametrize("device", DEVICES)
class TestTracksAgainstGroundTruth:
    def test_ids_ages_positions(self, synth, device):
        seq, imgs, _ = synth
        ft = FeatureTracker(seq.camera(0), _cfg(), device=device)
        prev = None
        errs = []
        for k, img in enumerate(imgs):
            fr = ft.process(img, int(seq.frame_stamps_ns[k]))
            assert len(np.unique(fr.ids)) == len(fr.ids)
            if prev is not None:
                common, i0, i1 = np.intersect1d(prev.ids, fr.ids, return_indices=True)
                assert len(common) > 0.7 * len(prev)
                assert np.all(fr.age[i1] == prev.age[i0] + 1)
                gt, vis = seq.gt_flow(k - 1, k, prev.uv[i0])
                errs.append(np.linalg.norm(fr.uv[i1] - gt, axis=1)[vis])
                new = np.setdiff1d(fr.ids, prev.ids)
                assert np.all(fr.age[np.isin(fr.ids, new)] == 0)
                assert np.all(new > prev.ids.max())
            prev = fr
        e = np.concatenate(errs)
        print(f"\n{device}: median track error vs ground truth {np.median(e):.3f} px over {len(e)} track steps")
        assert np.median(e) < 0.1
        assert np.mean(e > 1.0) < 0.1


@pytest.mark.parametrize("device", DEVICES)
class TestRedetection:
    def test_only_below_fraction_and_only_free_cells(self, synth_fast, device):
        seq, imgs = synth_fast
        cfg = _cfg(imu_prediction=False, min_track_fraction=0.7)
        ft = FeatureTracker(seq.camera(0), cfg, device=device)
        cw, ch = cfg.detector.cell_width, cfg.detector.cell_height
        n_redetect = 0
        for k, img in enumerate(imgs):
            fr = ft.process(img, int(seq.frame_stamps_ns[k]))
            assert len(fr) <= ft.target
            old, new = fr.age > 0, fr.age == 0
            if k == 0:
                assert new.all() and len(fr) > 100
                continue
            if new.any():
                n_redetect += 1
                assert old.sum() < cfg.min_track_fraction * ft.target
                occ = {(int(v // ch), int(u // cw)) for u, v in fr.uv[old]}
                cells_new = [(int(v // ch), int(u // cw)) for u, v in fr.uv[new]]
                assert not occ.intersection(cells_new)
                assert len(set(cells_new)) == len(cells_new)   # one feature per cell
            else:
                assert old.sum() >= cfg.min_track_fraction * ft.target
        assert n_redetect >= 1 and ft.stats["redetections"] == n_redetect + 1
        assert ft.stats["detection_runs"] >= ft.stats["redetections"]

    def test_lost_tracks_dropped(self, frames, device):
        ft = FeatureTracker(euroc_cam0(), _cfg(tracker=TrackerConfig(max_residual=20.0)), device=device)
        f0 = ft.process(frames[0], STAMP0)
        noise = np.random.default_rng(0).integers(0, 256, frames[0].shape, dtype=np.uint8)
        f1 = ft.process(noise, STAMP0 + DT)
        kept = np.intersect1d(f0.ids, f1.ids)
        assert len(kept) < 0.1 * len(f0)
        assert f1.stats["tracks_lost"] >= 0.9 * len(f0)
        assert np.all(f1.age[~np.isin(f1.ids, kept)] == 0)


@pytest.mark.parametrize("device", DEVICES)
class TestOutlierRejection:
    def test_fb_check_rejects_replaced_block(self, frames, device):
        """The FB check's own effect, frame to frame (with reference templates and the affine warp
        the forward track already fails in most of the block: 3 survivors with and without)."""
        a = frames[30]
        b = np.roll(a, (1, 2), axis=(0, 1)).copy()
        blk = (slice(100, 300), slice(250, 500))
        b[blk] = a[250:450, 100:350][::-1, ::-1]     # other texture in the block
        res = {}
        for fb in (False, True):
            ft = FeatureTracker(euroc_cam0(), _cfg(fb_check=fb, fb_threshold=0.5, tracker=F2F), device=device)
            f0 = ft.process(a, STAMP0)
            f1 = ft.process(b, STAMP0 + DT)
            common, i0, i1 = np.intersect1d(f0.ids, f1.ids, return_indices=True)
            u, v = f0.uv[i0, 0], f0.uv[i0, 1]
            inb = (u > 240) & (u < 510) & (v > 90) & (v < 310)
            out0 = (u < 230) | (u > 520) | (v < 80) | (v > 320)
            n_out0 = np.count_nonzero(((f0.uv[:, 0] < 230) | (f0.uv[:, 0] > 520) | (f0.uv[:, 1] < 80) | (f0.uv[:, 1] > 320)))
            res[fb] = (inb.sum(), out0.sum() / n_out0, ft.stats["fb_rejected"])
        print(f"\n{device} FB: block survivors without/with check {res[False][0]}/{res[True][0]}, "
              f"outside kept {res[False][1]:.2f}/{res[True][1]:.2f}, rejected {res[True][2]}")
        assert res[True][2] > 0
        assert res[True][0] < res[False][0] or res[False][0] == 0
        assert res[True][1] > 0.9

    def test_ransac_rejects_independently_moving_block(self, frames, device):
        """Two fronto-parallel planes (left half near, right half far) seen by a pinhole camera
        translating sideways: all true motion is horizontal (23 px / 9 px), epipolar lines are
        horizontal. A block moving 6 px vertically cannot fit any epipolar geometry of that motion."""
        cam = CameraModel(752, 480, 458.0, 457.0, 367.0, 248.0)
        a = frames[30]
        b = np.empty_like(a)
        b[:, 23:376] = a[:, 0:353]
        b[:, :23] = a[:, :23]
        b[:, 376:] = a[:, 367:743]
        b[100:300, 420:650] = a[94:294, 411:641]          # far plane content + 6 px down
        inb = lambda uv: (uv[:, 0] > 430) & (uv[:, 0] < 640) & (uv[:, 1] > 110) & (uv[:, 1] < 290)
        outb = lambda uv: ((uv[:, 0] < 340) | (uv[:, 0] > 400)) & ~((uv[:, 0] > 400) & (uv[:, 0] < 670) & (uv[:, 1] > 80) & (uv[:, 1] < 320))
        res = {}
        for rs in (False, True):
            ft = FeatureTracker(cam, _cfg(ransac=rs, ransac_threshold=1.0), device=device)
            f0 = ft.process(a, STAMP0)
            f1 = ft.process(b, STAMP0 + DT)
            common, i0, i1 = np.intersect1d(f0.ids, f1.ids, return_indices=True)
            res[rs] = (inb(f0.uv[i0]).sum(), inb(f0.uv).sum(), outb(f0.uv[i0]).sum(), outb(f0.uv).sum(),
                       ft.stats["ransac_rejected"])
        print(f"\n{device} RANSAC: block kept {res[True][0]}/{res[True][1]} (without: {res[False][0]}), "
              f"outside kept {res[True][2]}/{res[True][3]} (without: {res[False][2]}), rejected {res[True][4]}")
        assert res[False][0] >= 0.6 * res[False][1]          # LK itself follows the block
        assert res[True][0] <= 0.2 * res[False][0]
        assert res[True][2] >= 0.85 * res[False][2]


@pytest.mark.parametrize("device", DEVICES)
class TestStereo:
    def test_right_positions_against_ground_truth(self, synth, device):
        seq, imgs, rights = synth
        ft = FeatureTracker(seq.camera(0), _cfg(), device=device, camera_right=seq.camera(1))
        errs, frac = [], []
        for k in range(3):
            fr = ft.process(imgs[k], int(seq.frame_stamps_ns[k]), image_right=rights[k])
            assert fr.uv_right.shape == (len(fr), 2) and fr.xy_right.shape == (len(fr), 2)
            m = np.isfinite(fr.uv_right).all(1)
            assert np.array_equal(m, np.isfinite(fr.xy_right).all(1))
            gt, vis = seq.gt_flow(k, k, fr.uv, cam=0, cam_to=1)
            errs.append(np.linalg.norm(fr.uv_right[m & vis] - gt[m & vis], axis=1))
            frac.append(m[vis].mean())
            assert np.allclose(seq.camera(1).distort_normalised(fr.xy_right[m]), fr.uv_right[m], atol=1e-2)
        e = np.concatenate(errs)
        print(f"\n{device} stereo: matched {np.mean(frac):.1%}, median error {np.median(e):.3f} px")
        assert np.median(e) < 0.15 and np.mean(frac) > 0.7


@pytest.mark.parametrize("device", DEVICES)
class TestUndistortionAndVelocity:
    def test_xy_and_velocity(self, frames, device):
        cam = euroc_cam0()
        ft = FeatureTracker(cam, _cfg(), device=device)
        f0 = ft.process(frames[0], STAMP0)
        f1 = ft.process(frames[3], STAMP0 + 3 * DT)
        for f in (f0, f1):
            assert np.max(np.abs(cam.distort_normalised(f.xy) - f.uv)) < 1e-2
        common, i0, i1 = np.intersect1d(f0.ids, f1.ids, return_indices=True)
        assert np.allclose(f1.velocity[i1], (f1.xy[i1] - f0.xy[i0]) / (3 * DT * 1e-9), atol=1e-4)
        assert np.all(f0.velocity == 0)

    def test_equidistant_camera(self, frames, device):
        cam = CameraModel(752, 480, 460.0, 458.0, 370.0, 250.0, "equidistant", np.array([-0.01, 0.02, -0.01, 0.002]))
        ft = FeatureTracker(cam, _cfg(), device=device)
        ft.process(frames[0], STAMP0)
        f = ft.process(frames[1], STAMP0 + DT)
        assert np.max(np.abs(cam.distort_normalised(f.xy) - f.uv)) < 1e-2


@pytest.mark.parametrize("device", DEVICES)
class TestBadInput:
    def test_errors_and_skips(self, frames, device):
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        f0 = ft.process(frames[0], STAMP0)
        with pytest.raises(ValueError, match="752x480"):
            ft.process(frames[1][:240], STAMP0 + DT)
        with pytest.raises(ValueError, match="uint8"):
            ft.process(frames[1].astype(np.float32), STAMP0 + DT)
        with pytest.raises(ValueError):
            ft.process(np.dstack([frames[1]] * 3), STAMP0 + DT)
        with pytest.raises(ValueError, match="gyro"):
            ft.process(frames[1], STAMP0 + DT, gyro=np.zeros((4, 3)))
        with pytest.raises(ValueError, match="image_right"):
            ft.process(frames[1], STAMP0 + DT, image_right=frames[1][:, :100])
        # non-monotonic and empty: counted skips, empty result, state untouched
        fs = ft.process(frames[1], STAMP0)
        assert len(fs) == 0 and fs.stats["skipped_nonmonotonic"] == 1
        fe = ft.process(np.zeros((0, 0), np.uint8), STAMP0 + DT)
        assert len(fe) == 0 and fe.stats["skipped_empty"] == 1
        f1 = ft.process(frames[1], STAMP0 + DT)
        common = np.intersect1d(f0.ids, f1.ids)
        assert len(common) > 0.9 * len(f0)
        assert np.all(f1.age[np.isin(f1.ids, common)] == 1)
        assert f1.stats["frames"] == 2

    def test_imu_nan_and_gap(self, frames, device):
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        f0 = ft.process(frames[0], STAMP0)
        t = np.arange(STAMP0 - 5_000_000, STAMP0 + DT + 5_000_000, 5_000_000, dtype=np.int64)
        g = np.column_stack([t, np.zeros((len(t), 3))]).astype(np.float64)
        g_nan = g.copy()
        g_nan[3, 1] = np.nan
        f1 = ft.process(frames[1], STAMP0 + DT, gyro=g_nan)
        assert f1.stats["imu_nan"] == 1 and len(np.intersect1d(f0.ids, f1.ids)) > 0.9 * len(f0)
        t2 = np.array([STAMP0 + DT - 1_000_000, STAMP0 + 2 * DT + 1_000_000])
        g_gap = np.column_stack([t2, np.zeros((2, 3))]).astype(np.float64)
        f2 = ft.process(frames[2], STAMP0 + 2 * DT, gyro=g_gap)
        assert f2.stats["imu_gaps"] == 1 and len(np.intersect1d(f1.ids, f2.ids)) > 0.9 * len(f1)
        t3 = np.arange(STAMP0 + 2 * DT - 5_000_000, STAMP0 + 3 * DT + 5_000_000, 5_000_000)
        f3 = ft.process(frames[3], STAMP0 + 3 * DT, gyro=np.column_stack([t3, np.zeros((len(t3), 3))]))
        assert f3.stats["imu_predicted"] == 1

    def test_a_gap_on_every_frame_is_warned_once(self, frames, device, caplog):
        """An IMU gap limit below the IMU's period (imu_max_gap_ms at its range's low end, 0.001) is
        warned on the first frame, then once per 10 s with the count held back, and every gap is
        counted (guards: a log line on every frame)."""
        import logging
        import time

        ft = FeatureTracker(euroc_cam0(), _cfg(imu_max_gap_ms=0.001), device=device)
        n = 12
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="vilib_ros.frontend"):
            for k in range(n):
                t = np.arange(STAMP0 + (k - 1) * DT - 5_000_000, STAMP0 + k * DT + 5_000_000, 5_000_000)
                fr = ft.process(frames[k], STAMP0 + k * DT, gyro=np.column_stack([t, np.zeros((len(t), 3))]))
        # the first, then one per period: a loaded machine (a first compilation) may take longer than one
        allowed = 1 + int((time.monotonic() - t0) // ft._warn.period_s)
        assert fr.stats["imu_gaps"] == n - 1
        said = [r for r in caplog.records if "no IMU prediction" in r.getMessage()]
        assert 1 <= len(said) <= min(allowed, n - 2), [r.getMessage() for r in said]

    def test_reset(self, frames, device):
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        f0 = ft.process(frames[0], STAMP0)
        ft.reset()
        f1 = ft.process(frames[1], STAMP0 - DT)   # stamps may restart after reset
        assert len(np.intersect1d(f0.ids, f1.ids)) == 0 and np.all(f1.age == 0)


@pytest.mark.parametrize("device", DEVICES)
class TestAsyncApi:
    def test_submit_ahead_equals_process(self, frames, device):
        frames = frames[:12]
        a = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        # results are views of reused slots on the GPU: copy to keep all 12
        ref = [a.process(f, STAMP0 + i * DT).copy() for i, f in enumerate(frames)]
        b = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        out = []
        b.submit(frames[0], STAMP0)
        for i in range(1, len(frames)):
            b.submit(frames[i], STAMP0 + i * DT)
            out.append(b.result().copy())
        out.append(b.result().copy())
        with pytest.raises(RuntimeError):
            b.result()
        for r, o in zip(ref, out):
            assert r.stamp_ns == o.stamp_ns
            assert np.array_equal(r.ids, o.ids)
            assert np.array_equal(r.uv, o.uv)



    def test_process_and_submit_ahead_mixed(self, frames, device):
        """process() and bursts of submit-ahead in turn, so that every frame slot follows a
        synchronous frame: the synchronous frames share one staging buffer whatever their slot, and
        a frame in flight must not be overwritten in it (guards the staging buffer's reuse)."""
        frames = frames[:30]
        a = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        ref = [a.process(f, STAMP0 + i * DT).copy() for i, f in enumerate(frames)]
        b = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        out, i = [], 0
        for burst in [1, 2, 1, 3, 1, 1, 4, 2, 1, 5, 1, 2, 2, 1, 3]:
            for f in frames[i:i + burst]:
                b.submit(f, STAMP0 + i * DT)
                i += 1
            out += [b.result().copy() for _ in range(burst)]
        assert i == len(frames)
        for r, o in zip(ref, out):
            assert r.stamp_ns == o.stamp_ns
            assert np.array_equal(r.ids, o.ids) and np.array_equal(r.uv, o.uv)

    def test_pipelined_frames_outlive_their_slots(self, frames, device):
        """More frames submitted than there are result slots before any result is taken: the
        oldest results are copied out before their slots are reused (guards silent overwrite)."""
        frames = frames[:FeatureTracker.RESULT_SLOTS + 4]
        a = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        ref = [a.process(f, STAMP0 + i * DT).copy() for i, f in enumerate(frames)]
        b = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        for i, f in enumerate(frames):
            b.submit(f, STAMP0 + i * DT)
        out = [b.result() for _ in frames]
        for r, o in zip(ref, out):
            assert np.array_equal(r.ids, o.ids) and np.array_equal(r.uv, o.uv)


def _table_snapshot(ft) -> bytes:
    """Every byte of the track table (device memory on the GPU path)."""
    p = ft.pipeline
    if ft.device == "cuda":
        p.stream.synchronize()
        p.up_stream.synchronize()
        return p.k.table.get().tobytes()
    t = p.table
    return b"".join(np.ascontiguousarray(a).tobytes() for a in
                    (t.ids, t.uv, t.xy, t.vel, t.score, t.level, t.age, t.counters, np.array([t.count, t.next_id])))


@pytest.mark.parametrize("device", DEVICES)
class TestRejectedFrames:
    def test_table_unchanged(self, frames, device):
        """Frames that are rejected (wrong size or dtype, bad gyro, non-monotonic stamp, empty)
        leave the track table exactly as it was (guards a corrupted table after bad input)."""
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        ft.process(frames[0], STAMP0)
        ft.process(frames[1], STAMP0 + DT)
        before = _table_snapshot(ft)
        bad = [dict(image=frames[2][:200], stamp_ns=STAMP0 + 2 * DT),
               dict(image=frames[2].astype(np.int16), stamp_ns=STAMP0 + 2 * DT),
               dict(image=frames[2], stamp_ns=STAMP0 + 2 * DT, gyro=np.zeros((3, 2)))]
        for kw in bad:
            with pytest.raises(ValueError):
                ft.process(**kw)
            assert _table_snapshot(ft) == before
        assert len(ft.process(frames[2], STAMP0 + DT)) == 0            # not after the previous stamp
        assert _table_snapshot(ft) == before
        assert len(ft.process(np.zeros((0, 752), np.uint8), STAMP0 + 2 * DT)) == 0   # empty
        assert _table_snapshot(ft) == before
        f = ft.process(frames[2], STAMP0 + 2 * DT)
        assert f.stats["skipped_nonmonotonic"] == 1 and f.stats["skipped_empty"] == 1 and np.all(f.age >= 1)


@pytest.mark.parametrize("device", DEVICES)
class TestApplyConfig:
    def test_live_fields_keep_tracks_and_ids(self, frames, device):
        """A threshold change applies without a rebuild: tracks and ids go on, and the new
        detector threshold takes effect (guards ids restarting at 0 after a parameter change)."""
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        f0 = ft.process(frames[0], STAMP0)
        cfg = dataclasses.replace(ft.config, detector=DetectorConfig(threshold=60.0),
                                  tracker=dataclasses.replace(ft.config.tracker, max_iterations=20, eps=1e-3),
                                  fb_threshold=0.8, min_track_fraction=1.0)
        assert ft.apply_config(cfg) is True
        assert ft.config.detector.threshold == 60.0 and ft.config.tracker.max_iterations == 20
        f1 = ft.process(frames[1], STAMP0 + DT)
        kept = np.intersect1d(f0.ids, f1.ids)
        assert len(kept) > 0.9 * len(f0)
        new = f1.ids[f1.age == 0]
        assert new.size and new.min() > f0.ids.max()                   # fraction 1.0: redetection ran
        # the new tracks are exactly what a detector at threshold 60 finds in the free cells
        ref = FeatureTracker(euroc_cam0(), _cfg(detector=DetectorConfig(threshold=60.0)), device="cpu")
        cells = ref.pipeline.detector.detect(frames[1], occupancy=_occupancy(f1.uv[f1.age > 0], ref))
        assert sorted(map(tuple, np.round(f1.uv[f1.age == 0]))) == sorted(map(tuple, cells.points()))

    def test_fb_levels_applied_live(self, frames, device):
        """fb_levels is live (a kernel argument; the GPU graphs are captured again): changed after
        the first frame, the tracker goes on exactly as one built with it, and not as the default
        one (on these frames the backward track on 2 levels ends a few other tracks)."""
        n = len(frames)
        stamps = STAMP0 + DT * np.arange(n)

        def run(ft, live=None):
            out = []
            for k, f in enumerate(frames):
                if k == 1 and live is not None:
                    assert ft.apply_config(dataclasses.replace(ft.config, fb_levels=live)) is True
                fr = ft.process(f, int(stamps[k]))
                out.append((fr.ids.copy(), fr.uv.copy()))
            return out

        live = run(FeatureTracker(euroc_cam0(), _cfg(fb_check=True), device=device), live=2)
        built = run(FeatureTracker(euroc_cam0(), _cfg(fb_check=True, fb_levels=2), device=device))
        default = run(FeatureTracker(euroc_cam0(), _cfg(fb_check=True), device=device))
        for (ia, ua), (ib, ub) in zip(live, built):
            np.testing.assert_array_equal(ia, ib)
            np.testing.assert_array_equal(ua, ub)
        assert any(not np.array_equal(ia, ic) for (ia, _), (ic, _) in zip(live, default))

    @pytest.mark.parametrize("change", [dict(max_features=100), dict(stereo=False), dict(use_graph=False),
                                        dict(detector=DetectorConfig(cell_width=64)),
                                        dict(tracker=TrackerConfig(levels=4)),
                                        dict(fb_check=not FrontendConfig().fb_check)])
    def test_structural_fields_refused(self, frames, device, change):
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        ft.process(frames[0], STAMP0)
        before = ft.config
        assert ft.apply_config(dataclasses.replace(ft.config, **change)) is False
        assert ft.config is before
        assert len(ft.process(frames[1], STAMP0 + DT)) > 0

    def test_invalid_config_raises(self, device):
        ft = FeatureTracker(euroc_cam0(), _cfg(), device=device)
        with pytest.raises(ValueError, match="threshold"):
            ft.apply_config(dataclasses.replace(ft.config, detector=DetectorConfig(threshold=0.0)))


def _occupancy(uv, ft):
    rows, cols = ft.grid_shape
    occ = np.zeros((rows, cols), bool)
    occ[np.clip((uv[:, 1] // 32).astype(int), 0, rows - 1), np.clip((uv[:, 0] // 32).astype(int), 0, cols - 1)] = True
    return occ


@pytest.mark.parametrize("device", DEVICES)
class TestIds:
    def test_first_id_and_next_id_across_a_rebuild(self, frames, device):
        """A tracker rebuilt with first_id=next_id never repeats an id of the one it replaces
        (guards landmarks of the backend attached to reused ids)."""
        a = FeatureTracker(euroc_cam0(), _cfg(min_track_fraction=0.9), device=device, first_id=1000)
        seen = set()
        for i in range(4):
            f = a.process(np.ascontiguousarray(frames[i][::-1]) if i % 2 else frames[i], STAMP0 + i * DT)
            assert f.ids.min() >= 1000 and f.ids.max() < a.next_id
            seen |= set(f.ids.tolist())
        b = FeatureTracker(euroc_cam0(), _cfg(), device=device, first_id=a.next_id)
        f = b.process(frames[5], STAMP0 + 5 * DT)
        assert len(f) > 100 and not seen & set(f.ids.tolist())
        with pytest.raises(ValueError):
            FeatureTracker(euroc_cam0(), _cfg(), device=device, first_id=-1)


# ------------------------------------------------------------------------------------ GPU only


def _common(fa, fb):
    """(positions of fa, positions of fb) of the ids both frames hold."""
    _, ia, ib = np.intersect1d(fa.ids, fb.ids, return_indices=True)
    return ia, ib


@pytest.mark.gpu
class TestGpuMatchesCpu:
    """The whole GPU pipeline (device-side track table) against the whole CPU pipeline (NumPy
    table, NumPy reference LK and detector): the same ids at the same positions.

    Agreement is counted per decision (a live track kept or ended, a new id), not per track-frame:
    RANSAC's inlier test is a threshold on positions that the two LK implementations give within
    0.02 px of each other, so a rare track near the threshold ends on one path and not the other;
    counted per track-frame, that one decision in an early frame weighed as much as ~90 in the last.
    A 0.005 px perturbation of the new positions flips about one RANSAC decision in a thousand;
    counted per track-frame, such flips lowered the id fraction by points."""

    def _compare(self, frames, stamps, cam, cfg, gyros=None, camera_right=None, right=None):
        g = FeatureTracker(cam, cfg, device="cuda", camera_right=camera_right)
        c = FeatureTracker(cam, cfg, device="cpu", camera_right=camera_right)
        assert g.device == "cuda" and c.device == "cpu"
        n_g = n_c = n_common = 0
        d_all, dx_all, dr_all = [], [], []
        prev_g, prev_c, decisions, diverged = set(), set(), 0, 0
        for k, f in enumerate(frames):
            kw = {"gyro": gyros[k]} if gyros is not None else {}
            if right is not None:
                kw["image_right"] = right[k]
            fg = g.process(f, int(stamps[k]), **kw)
            fc = c.process(f, int(stamps[k]), **kw)
            ia, ib = _common(fg, fc)
            n_g, n_c, n_common = n_g + len(fg), n_c + len(fc), n_common + len(ia)
            cur_g, cur_c = set(fg.ids.tolist()), set(fc.ids.tolist())
            both = prev_g & prev_c                      # decided alike so far: kept or ended now
            decisions += len(both) + len((cur_g | cur_c) - prev_g - prev_c)
            diverged += len((cur_g ^ cur_c) & both) + len((cur_g ^ cur_c) - prev_g - prev_c)
            prev_g, prev_c = cur_g, cur_c
            d_all.append(np.linalg.norm(fg.uv[ia] - fc.uv[ib], axis=1))
            assert np.array_equal(fg.age[ia], fc.age[ib])
            assert np.array_equal(fg.level[ia], fc.level[ib]) and np.array_equal(fg.score[ia], fc.score[ib])
            new = fg.age[ia] == 0
            assert np.array_equal(fg.uv[ia][new], fc.uv[ib][new])          # detections are bit-exact
            dx_all.append(np.linalg.norm(fg.xy[ia] - fc.xy[ib], axis=1) * cam.fx)
            if fg.uv_right is not None:
                m = np.isfinite(fg.uv_right[ia]).all(1) & np.isfinite(fc.uv_right[ib]).all(1)
                dr_all.append(np.linalg.norm(fg.uv_right[ia][m] - fc.uv_right[ib][m], axis=1))
        d = np.concatenate(d_all)
        frac = n_common / max(n_g, n_c)
        print(f"\nGPU vs CPU frontend over {len(frames)} frames: {frac:.2%} of the tracks with the same id "
              f"({n_g} GPU, {n_c} CPU), |uv| diff median {np.median(d):.5f}, p99 {np.percentile(d, 99):.4f}, "
              f"max {d.max():.4f} px; {diverged} of {decisions} decisions differ; stats GPU {dict(g.stats)}")
        # bound: the decisions' sensitivity to float rounding (a 0.005 px perturbation flips about one
        # in a thousand); a wrong kernel differs by far more (a RANSAC threshold 3 % off does)
        assert diverged <= 0.001 * decisions + 1
        assert frac > 0.95
        assert np.median(d) < 0.002 and np.percentile(d, 99) < 0.02
        assert np.percentile(np.concatenate(dx_all), 99) < 0.02       # undistorted, in pixels
        for k in ("tracks_new", "redetections", "detection_runs"):
            assert abs(g.stats[k] - c.stats[k]) <= 0.01 * max(1, c.stats[k]) + 1, k
        return d, (np.concatenate(dr_all) if dr_all else None)

    def test_real_frames_mono(self, euroc_frames):
        cam = euroc_cam0()
        stamps = STAMP0 + DT * np.arange(len(euroc_frames))
        self._compare(euroc_frames, stamps, cam, _cfg())

    def test_real_frames_frame_to_frame(self, euroc_frames):
        """The previous default (template 'previous', warp 'translation', no FB check): the
        frame-to-frame kernels."""
        cam = euroc_cam0()
        stamps = STAMP0 + DT * np.arange(len(euroc_frames))
        self._compare(euroc_frames, stamps, cam, _cfg(tracker=F2F, fb_check=False))

    @pytest.mark.parametrize("template, warp", [("reference", "affine"), ("reference", "translation"),
                                                ("previous", "affine")])
    def test_real_frames_stored_templates(self, euroc_frames, template, warp):
        """Stored templates (lk_template_*, lk_extract, the template columns of the device table)
        against the CPU pipeline's template bank, with the FB check and RANSAC, over the 95 frames."""
        cam = euroc_cam0()
        stamps = STAMP0 + DT * np.arange(len(euroc_frames))
        tc = TrackerConfig(template=template, warp=warp)
        self._compare(euroc_frames, stamps, cam, _cfg(tracker=tc, fb_check=True, ransac=True))

    @pytest.mark.parametrize("fb_levels", [1, 2])
    @pytest.mark.parametrize("template, warp", [("reference", "affine"), ("previous", "translation")])
    def test_backward_track_on_fewer_levels(self, euroc_frames, fb_levels, template, warp):
        """FrontendConfig.fb_levels: the backward track on the finest levels, in the fused
        lk_template_fb kernel (stored templates) and in lk_frontend's backward use (frame to
        frame), against the CPU pipeline's backward track on as many levels."""
        cam = euroc_cam0()
        stamps = STAMP0 + DT * np.arange(len(euroc_frames))
        tc = TrackerConfig(template=template, warp=warp)
        self._compare(euroc_frames, stamps, cam, _cfg(tracker=tc, fb_check=True, fb_levels=fb_levels))

    def test_templates_taken_again(self, euroc_frames):
        """Refreshes by age and by residual: the same tracks as the CPU, the same counter."""
        cam = euroc_cam0()
        frames = euroc_frames[:40]
        stamps = STAMP0 + DT * np.arange(len(frames))
        tc = TrackerConfig(template="reference", warp="affine", template_max_age=7, template_refresh_residual=6.0)
        g = FeatureTracker(cam, _cfg(tracker=tc, fb_check=True), device="cuda")
        c = FeatureTracker(cam, _cfg(tracker=tc, fb_check=True), device="cpu")
        for k, f in enumerate(frames):
            g.process(f, int(stamps[k]))
            c.process(f, int(stamps[k]))
        print(f"\ntemplates refreshed: GPU {g.stats['templates_refreshed']}, CPU {c.stats['templates_refreshed']}")
        assert c.stats["templates_refreshed"] > 100
        assert abs(g.stats["templates_refreshed"] - c.stats["templates_refreshed"]) <= 0.02 * c.stats["templates_refreshed"]
        self._compare(frames, stamps, cam, _cfg(tracker=tc, fb_check=True))

    def test_real_frames_fb_and_frequent_redetection(self, euroc_frames):
        cam = euroc_cam0()
        frames = euroc_frames[:40]
        stamps = STAMP0 + DT * np.arange(len(frames))
        self._compare(frames, stamps, cam, _cfg(fb_check=True, min_track_fraction=0.9, max_features=200))

    def test_synthetic_stereo_with_gyro(self):
        """Fast rotation with gyro prediction (the rotation kernel path) and stereo matching."""
        seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.5, stereo=True, seed=6, preset="fast_rotation"))
        n = 8
        left = [seq.render(k)[0] for k in range(n)]
        right = [seq.render(k, cam=1)[0] for k in range(n)]
        t_imu, imu, _, _ = seq.imu()
        st = seq.frame_stamps_ns
        gyros = []
        for k in range(n):
            m = (t_imu >= st[k - 1] - 10_000_000) & (t_imu <= st[k] + 10_000_000) if k else np.zeros(len(t_imu), bool)
            gyros.append(np.column_stack([t_imu[m], imu[m, :3]]))
        d, dr = self._compare(left, st[:n], seq.camera(0), _cfg(), gyros=gyros, camera_right=seq.camera(1), right=right)
        assert dr is not None and dr.size > 100 and np.percentile(dr, 99) < 0.02


@pytest.mark.gpu
class TestGpuPipeline:
    def test_graph_equals_launches(self, frames):
        res = {}
        for use_graph in (False, True):
            ft = FeatureTracker(euroc_cam0(), _cfg(use_graph=use_graph, fb_check=True), device="cuda")
            res[use_graph] = [ft.process(f, STAMP0 + i * DT).copy() for i, f in enumerate(frames[:8])]
            if use_graph:
                assert ft.graph_error is None, ft.graph_error
                assert ft.stats["graph_launches"] >= 8
        for a, b in zip(res[False], res[True]):
            assert np.array_equal(a.ids, b.ids) and np.array_equal(a.uv, b.uv)

    def test_stereo_split_equals_one_graph(self):
        """process() on a pageable stereo pair runs in three graphs (the right frame copied while
        the left part runs, its pyramid on the upload stream; the left frame streamed): the same
        tracks and stereo matches,
        bit for bit, as page-locked pairs (one graph) and as submit-ahead (upload and compute
        graphs). Guards the ordering of the right pyramid before the stereo match."""
        seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=1.0, stereo=True, seed=6))
        n = 12
        left = [seq.render(k)[0] for k in range(n)]
        right = [seq.render(k, cam=1)[0] for k in range(n)]
        st = seq.frame_stamps_ns[:n]

        def tracker():
            return FeatureTracker(seq.camera(0), _cfg(), device="cuda", camera_right=seq.camera(1))

        a = tracker()
        split = [a.process(l, int(t), image_right=r).copy() for l, r, t in zip(left, right, st)]
        assert a.graph_error is None, a.graph_error
        su = a.pipeline._streamer            # the left camera streamed (the default upload)
        assert su._value == n and su._flags[0] == n and su.timeouts == 0
        b = tracker()
        pl, pr = b.pinned_frames(n), b.pinned_frames(n)
        for x, y, l, r in zip(pl, pr, left, right):
            x[...], y[...] = l, r
        pinned = [b.process(l, int(t), image_right=r).copy() for l, r, t in zip(pl, pr, st)]
        c = tracker()
        ahead = []
        c.submit(left[0], int(st[0]), image_right=right[0])
        for k in range(1, n):
            c.submit(left[k], int(st[k]), image_right=right[k])
            ahead.append(c.result().copy())
        ahead.append(c.result().copy())
        matched = 0
        for x, y, z in zip(split, pinned, ahead):
            for o in (y, z):
                assert np.array_equal(x.ids, o.ids) and np.array_equal(x.uv, o.uv)
                np.testing.assert_array_equal(x.uv_right, o.uv_right)
            matched += int(np.isfinite(x.uv_right[:, 0]).sum())
        assert matched > 10 * n

    def test_inputs_and_uploads_agree(self, frames):
        """Pageable, page-locked and CuPy frames, and every upload, give the same tracks."""
        import cupy as cp

        frames = frames[:6]
        runs = {}
        for name in ("streamed", "mapped", "pinned", "cupy", "copy", "pageable"):
            ft = FeatureTracker(euroc_cam0(), _cfg(), device="cuda")
            if name in ("mapped", "copy", "pageable"):
                ft.pipeline.upload = name
            pinned = ft.pinned_frames(len(frames))
            for p, f in zip(pinned, frames):
                p[...] = f
            src = {"pinned": pinned, "cupy": [cp.asarray(f) for f in frames]}.get(name, frames)
            runs[name] = [ft.process(f, STAMP0 + i * DT).copy() for i, f in enumerate(src)]
        for name, r in runs.items():
            for a, b in zip(runs["streamed"], r):
                assert np.array_equal(a.ids, b.ids) and np.array_equal(a.uv, b.uv), name

    def test_streamed_upload_streams(self, frames):
        """The default upload launches a pageable frame before copying it: each process() moves
        the tile flags on by one (no silent fall-back to copying first), frames in flight
        (submit-ahead) and page-locked frames do not stream, and no frame timed out."""
        ft = FeatureTracker(euroc_cam0(), _cfg(), device="cuda")
        p = ft.pipeline
        assert p.upload == "streamed"

        for i, f in enumerate(frames[:5]):
            before = p._streamer._value
            ft.process(f, STAMP0 + i * DT)
            assert p._streamer._value == before + 1, i
        before = p._streamer._value
        for i, f in enumerate(frames[5:9]):
            ft.submit(f, STAMP0 + (5 + i) * DT)
        for _ in range(4):
            ft.result()
        pinned = ft.pinned_frames(1)
        pinned[0][...] = frames[9]
        ft.process(pinned[0], STAMP0 + 9 * DT)
        assert p._streamer._value == before + 1      # only the first submit had nothing in flight
        assert ft.stats["upload_timeouts"] == 0 and ft.graph_error is None

    def test_poisoned_results(self, frames):
        """Every field of every returned track is written by the kernels (result slots and the
        device scratch poisoned first)."""
        import cupy as cp

        ref = TrackerConfig(template="reference", warp="affine")
        ft = FeatureTracker(euroc_cam0(), _cfg(tracker=ref, fb_check=True, min_track_fraction=0.8), device="cuda",
                            camera_right=euroc_cam0())
        p = ft.pipeline
        for v in p._out:
            for a in v.values():
                a[...] = np.array(np.nan).astype(a.dtype) if a.dtype.kind == "f" else -7
        for k in ("lk_pos", "lk_xy", "fb_pos", "st_pos", "st_xy"):
            p.k.t[k].fill(cp.nan)
        for k in ("lk_status", "fb_status", "st_status", "lk_iters"):
            p.k.t[k].fill(-7)
        assert p.k.templates        # stored templates: bank rows are written before they are read
        p.k.bank.fill(cp.nan)
        p.k.bank_valid.fill(7)
        for k in ("lk_residual", "lk_gain", "lk_offset", "lk_affine"):
            p.k.t[k].fill(cp.nan)
        cp.cuda.Device().synchronize()
        for i in range(10):
            f = frames[i] if i % 3 else np.ascontiguousarray(frames[i][::-1])
            fr = ft.process(f, STAMP0 + i * DT, image_right=f)
            assert len(fr) > 50
            assert np.isfinite(fr.uv).all() and np.isfinite(fr.xy).all() and np.isfinite(fr.velocity).all()
            assert (fr.ids >= 0).all() and (fr.age >= 0).all() and (fr.score > 0).all()
            assert np.isin(fr.level, [0, 1]).all()
            assert np.isfinite(fr.uv_right).all(1).mean() > 0.5
            assert np.array_equal(np.isfinite(fr.uv_right).all(1), np.isfinite(fr.xy_right).all(1))

    def test_memory_pool_flat(self, frames):
        import cupy as cp

        ft = FeatureTracker(euroc_cam0(), _cfg(fb_check=True, min_track_fraction=1.0), device="cuda",
                            camera_right=euroc_cam0())
        pool = cp.get_default_memory_pool()
        used = []
        n = 300
        ft.submit(frames[0], STAMP0, image_right=frames[0])
        for i in range(1, n):
            # Every other frame upside down: most tracks are lost each frame, so detection
            # (and its buffers) runs on every frame, as does stereo for the new tracks.
            f = frames[i % len(frames)]
            f = np.ascontiguousarray(f[::-1]) if i % 2 else f
            ft.submit(f, STAMP0 + i * DT, image_right=f)
            ft.result()
            if i in (20, n - 1):
                used.append(pool.used_bytes())
        ft.result()
        print(f"\nmemory pool used bytes after 20 / {n} frames: {used}, redetections {ft.stats['redetections']}")
        assert used[0] == used[1]
        assert ft.stats["detection_runs"] >= n - 1
        assert ft.stats["redetections"] >= 30


class TestFrameWarnings:
    def test_first_then_held_back_with_a_count(self, caplog):
        import logging

        from vilib_ros.frontend.feature_tracker import FrameWarnings

        w = FrameWarnings(period_s=3600.0)
        with caplog.at_level(logging.WARNING, logger="vilib_ros.frontend"):
            for k in range(5):
                w("gap", "gap at %d", k)
            w("empty", "empty frame")
            w._last["gap"] -= 7200.0            # the period has passed (no sleeping in tests)
            w("gap", "gap at %d", 5)
        msgs = [r.getMessage() for r in caplog.records]
        assert msgs[0] == "gap at 0" and msgs[1] == "empty frame"
        assert msgs[2].startswith("gap at 5 (4 more like it in the last ") and len(msgs) == 3


class TestResolveDevice:
    def test_the_cpu_fallback_is_said_once(self, caplog, monkeypatch):
        """device='auto' without CUDA logs why once per process (a stereo run's trackers and every
        rebuild each said it again); 'cuda' still raises with the reason every time."""
        import logging

        from vilib_ros import _cuda

        monkeypatch.setattr(_cuda, "_said_cpu_fallback", [])
        if _cuda.cuda_available():
            pytest.skip("CUDA is usable here: 'auto' resolves to it")
        with caplog.at_level(logging.WARNING, logger="vilib_ros.cuda"):
            assert [_cuda.resolve_device("auto") for _ in range(3)] == ["cpu"] * 3
        said = [r.getMessage() for r in caplog.records if "CUDA not available" in r.getMessage()]
        assert len(said) == 1, said
        for _ in range(2):
            with pytest.raises(_cuda.CudaUnavailable, match="device='cuda' requested but"):
                _cuda.resolve_device("cuda")
