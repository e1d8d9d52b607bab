"""Reference templates (tracker.template='reference', warp='affine'; vilib_ros.frontend.reference.templates):
stored templates against the image they come from, LK against stored templates against the
generator's exact flow, the frontend's drift by track age against frame-to-frame tracking on a
rendered sequence, the template rows of the track table, the configuration (the default).
(The compiled twin against this NumPy reference: test_tracker.py.)"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vilib_ros import synthetic as syn
from vilib_ros.frontend import FeatureTracker, FrontendConfig
from vilib_ros.frontend.config import PATCH_AREA, TrackerConfig
from vilib_ros.frontend.reference.lk import _template_level
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
from vilib_ros.frontend.reference.templates import extract_templates_cpu, stored_level, track_templates_cpu
from vilib_ros.frontend.track_table import TemplateBank, TrackTable
from vilib_ros.types import CellFeatures, TrackStatus

REF = TrackerConfig(template="reference", warp="affine")
F2F = TrackerConfig(template="previous", warp="translation")


@pytest.fixture(scope="module")
def rendered():
    """32 frames (1.6 s) of the generator's default drone motion, mono, with its camera."""
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=1.6, stereo=False, seed=4))
    return seq, [seq.render(k)[0] for k in range(32)]


def _detect(img):
    from vilib_ros.frontend.reference.detector import CpuFastDetector

    return CpuFastDetector(img.shape[1], img.shape[0]).detect(img).points()


class TestTrackerConfig:
    @pytest.mark.parametrize("kw", [dict(template="first"), dict(warp="projective"),
                                    dict(template="reference", cpu_backend="opencv", mode="translation"),
                                    dict(warp="affine", cpu_backend="opencv", mode="translation"),
                                    dict(template="reference", template_refresh_residual=-1.0),
                                    dict(template="reference", template_max_age=1.5)])
    def test_invalid_raises(self, kw):
        with pytest.raises(ValueError):
            TrackerConfig(**kw).validate()

    def test_default_is_reference_affine(self):
        """The default since the GPU tracks against stored templates too (bench/results/tracks_quality.md:
        reference + affine + FB check + RANSAC, 0.85 cm stereo ATE against 2.73 cm frame to frame)."""
        c = TrackerConfig().validate()
        assert (c.template, c.warp, c.template_refresh_residual, c.template_max_age) == ("reference", "affine", 0, 0)
        f = FrontendConfig().validate()
        assert f.tracker.template == "reference" and f.tracker.warp == "affine" and f.fb_check and f.ransac


class TestExtractTemplatesCpu:
    def test_pixel_aligned_patches_hold_the_pixels(self, frames):
        """Where a 16 x 16 patch's samples fall on pixel centres (its centre at x.5), level 0's
        stored samples are the image's pixels, ring included."""
        img = frames[10]
        pos = np.array([[100.5, 80.5], [400.5, 300.5], [8, 8], [743, 240]], np.float32)
        patch, valid = extract_templates_cpu(img, pos, REF)
        assert patch.shape == (4, 5, PATCH_AREA) and patch.dtype == np.float32
        assert valid[:2].all() and valid[2:, 0].tolist() == [0, 0]     # 8.5 px of patch + ring: not at 8 or w - 9
        for (x, y), p in zip((pos[:2] - 8.5).astype(int), patch[:2]):
            np.testing.assert_array_equal(p[0].reshape(18, 18), img[y:y + 18, x:x + 18])

    def test_values_and_gradients_are_the_pyramid_template(self, frames):
        """The template LK builds from stored samples equals the one it builds from the pyramid."""
        pyr = build_pyramid_cpu(frames[20], 5)
        pts = _detect(frames[20]) + np.float32(0.37)
        patch, valid = extract_templates_cpu(pyr, pts, REF)
        for lvl, P in enumerate(REF.patch_sizes):
            ok = valid[:, lvl] == 1
            s = 1.0 / (1 << lvl)
            want = _template_level(pyr[lvl], (pts[ok, 0] + 0.5) * s - 0.5, (pts[ok, 1] + 0.5) * s - 0.5, P)
            for got, w in zip(stored_level(patch[ok, lvl], P), want):
                np.testing.assert_allclose(got, w, atol=1e-6)


class TestTrackTemplatesCpu:
    def test_affine_follows_the_exact_flow_where_translation_drifts(self, rendered):
        """LK from frame 0's stored templates straight into frame 30 (a start 1 px off the exact
        flow): the affine warp stays on the surface point, a translation-only match of the same
        template is pulled off by the patch's deformation (about an order of magnitude more)."""
        seq, imgs = rendered
        pts = _detect(imgs[0])
        gt, vis = seq.gt_flow(0, 30, pts)
        pts, gt = pts[vis], gt[vis].astype(np.float32)
        start = gt + np.random.default_rng(0).normal(0, 1.0, gt.shape).astype(np.float32)
        patch, valid = extract_templates_cpu(imgs[0], pts, REF)
        slots = np.arange(len(pts))
        err = {}
        for warp in ("affine", "translation"):
            cfg = dataclasses.replace(REF, warp=warp)
            r = track_templates_cpu(patch, valid, slots, imgs[30], start, cfg)
            ok = r.status == TrackStatus.TRACKED
            err[warp] = np.linalg.norm(r.pos[ok] - gt[ok], axis=1)
            assert ok.mean() > 0.8, warp
        print(f"\nframe 0 -> 30, {len(pts)} features: median error affine {np.median(err['affine']):.3f} px, "
              f"translation {np.median(err['translation']):.3f} px")
        assert np.median(err["affine"]) < 0.12
        assert np.percentile(err["affine"], 75) < 0.25
        assert np.median(err["translation"]) > 3 * np.median(err["affine"])

    def test_inactive_and_non_finite(self, frames):
        pts = _detect(frames[0])[:20]
        patch, valid = extract_templates_cpu(frames[0], pts, REF)
        pred = pts.copy()
        pred[3] = np.nan
        act = np.ones(20, bool)
        act[5] = False
        aff = np.tile(np.float32([1, 0, 0, 1]), (20, 1))
        aff[7] = np.nan
        r = track_templates_cpu(patch, valid, np.arange(20), frames[1], pred, REF, affine=aff, active=act)
        assert r.status[3] == TrackStatus.DIVERGED and r.status[7] == TrackStatus.DIVERGED
        assert r.status[5] == TrackStatus.INACTIVE and np.array_equal(r.pos[5], pred[5])
        assert np.array_equal(r.affine[5], aff[5])
        assert (r.status == TrackStatus.TRACKED).sum() >= 15


    def test_a_level_without_a_usable_template(self):
        """Regression: where no feature had a usable template on a pyramid level, the reference
        failed (``stored_level`` reshaped its zero rows to (0, -1), which NumPy cannot)."""
        for P in (8, 16):
            tv, gx, gy = stored_level(np.zeros((0, PATCH_AREA), np.uint8), P)
            assert tv.shape == gx.shape == gy.shape == (0, P * P)
        img = np.zeros((480, 752), np.uint8)
        img[200:260, 300:360] = 200
        pts = np.float32([[300, 200], [359, 259]])
        patch, valid = extract_templates_cpu(img, pts, REF)
        valid[:, 3:] = 0                        # the coarse levels unusable for every feature
        r = track_templates_cpu(patch, valid, np.arange(2), img, pts, REF)
        assert r.pos.shape == (2, 2) and np.isfinite(r.pos).all()


class TestTrackTableTemplateRows:
    def test_rows_stay_with_their_tracks_and_are_reused(self):
        """Each live track names its own template row; compaction moves the row index with the
        track; new tracks take free rows (guards two tracks sharing one template)."""
        tab = TrackTable(8, (2, 4), (32, 32))

        def cells(xs):
            x = np.full(8, np.nan, np.float32)
            lv = np.full(8, -1, np.int32)
            x[: len(xs)] = xs
            lv[: len(xs)] = 0
            return CellFeatures(x, x.copy(), np.ones(8, np.float32), lv, (2, 4))

        tab.add(cells([10, 20, 30, 40, 50]), lambda uv: uv.astype(float))
        assert sorted(tab.tslot[:5]) == [0, 1, 2, 3, 4]
        rows = {int(i): int(s) for i, s in zip(tab.ids[:5], tab.tslot[:5])}
        st = np.array([0, 2, 0, 1, 0], np.int8)            # the 2nd and 4th are lost
        tab.update(tab.uv[:5], st, tab.xy[:5], np.ones(5), 0.05)
        assert tab.count == 3 and all(rows[int(i)] == int(s) for i, s in zip(tab.ids[:3], tab.tslot[:3]))
        tab.add(cells([60, 70, 80, 90]), lambda uv: uv.astype(float))
        live = tab.tslot[:tab.count]
        assert tab.count == 7 and len(set(live.tolist())) == 7 and set(live.tolist()) <= set(range(8))
        assert {1, 3} <= set(tab.tslot[3:7].tolist())       # the freed rows are taken again


class TestFeatureTrackerReference:
    @staticmethod
    def _age30(frames, cfg, seq):
        ft = FeatureTracker(seq.camera(0), FrontendConfig(tracker=cfg), device="cpu")
        first = ft.process(frames[0], int(seq.frame_stamps_ns[0]))
        for k in range(1, len(frames)):
            fr = ft.process(frames[k], int(seq.frame_stamps_ns[k]))
        _, i0, i1 = np.intersect1d(first.ids, fr.ids, return_indices=True)
        gt, vis = seq.gt_flow(0, len(frames) - 1, first.uv[i0])
        assert np.all(fr.age[i1] == len(frames) - 1)
        return np.linalg.norm(fr.uv[i1] - gt, axis=1)[vis], fr

    def test_error_at_age_30_below_frame_to_frame(self, rendered):
        """The drift of a track: where its position is after 31 frames against where the surface
        point of its first observation really is (the generator's exact flow). Frame to frame it
        is a random walk plus the patch's deformation; against the detection frame's template
        with an affine warp it stays at the single-step error, several times smaller."""
        seq, frames = rendered
        e_f2f, _ = self._age30(frames, F2F, seq)
        e_ref, fr = self._age30(frames, REF, seq)
        print(f"\nage 31: frame to frame median {np.median(e_f2f):.3f} px p90 {np.percentile(e_f2f, 90):.3f} "
              f"({len(e_f2f)} tracks); reference median {np.median(e_ref):.3f} px p90 "
              f"{np.percentile(e_ref, 90):.3f} ({len(e_ref)} tracks)")
        assert len(e_ref) > 80 and len(e_ref) > 0.7 * len(e_f2f)
        assert np.median(e_f2f) > 0.25                          # the sequence shows the drift
        assert np.median(e_ref) < 0.3 * np.median(e_f2f)
        assert np.percentile(e_ref, 90) < 0.5

    def test_templates_are_taken_again_when_due(self, rendered):
        """template_max_age: every live track's template is at most that old; tracks go on."""
        seq, frames = rendered
        cfg = dataclasses.replace(REF, template_max_age=5)
        ft = FeatureTracker(seq.camera(0), FrontendConfig(tracker=cfg), device="cpu")
        for k in range(12):
            fr = ft.process(frames[k], int(seq.frame_stamps_ns[k]))
        assert fr.stats["templates_refreshed"] >= len(fr) and np.max(fr.age) == 11
        tab = ft.pipeline.table
        assert np.all(tab.tmpl_age[:tab.count] < 5)

    def test_reset_and_bank_size(self, rendered):
        seq, frames = rendered
        ft = FeatureTracker(seq.camera(0), FrontendConfig(tracker=REF), device="cpu")
        ft.process(frames[0], int(seq.frame_stamps_ns[0]))
        bank = ft.pipeline.bank
        assert isinstance(bank, TemplateBank) and bank.patch.shape == (ft.target, 5, PATCH_AREA)
        ft.reset()
        f = ft.process(frames[1], int(seq.frame_stamps_ns[1]))
        assert len(f) > 100 and np.all(f.age == 0)
        f = ft.process(frames[2], int(seq.frame_stamps_ns[2]))
        assert np.mean(f.age == 1) > 0.8

    def test_previous_frame_affine_is_reference_taken_every_frame(self, rendered):
        """template='previous' with warp='affine' is the reference tracker whose templates are
        taken again every frame (the same ids and positions)."""
        seq, frames = rendered
        a = FeatureTracker(seq.camera(0), FrontendConfig(tracker=TrackerConfig(template="previous", warp="affine")), device="cpu")
        b = FeatureTracker(seq.camera(0), FrontendConfig(tracker=dataclasses.replace(REF, template_max_age=1)),
                           device="cpu")
        for k in range(8):
            fa = a.process(frames[k], int(seq.frame_stamps_ns[k]))
            fb = b.process(frames[k], int(seq.frame_stamps_ns[k]))
            np.testing.assert_array_equal(fa.ids, fb.ids)
            np.testing.assert_array_equal(fa.uv, fb.uv)
        assert len(fa) > 100 and fa.stats["templates_refreshed"] > 0
