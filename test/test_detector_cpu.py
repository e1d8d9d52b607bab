"""CPU FAST detector: brute-force per-pixel references, OpenCV conformance, NMS and cells."""
import logging

import numpy as np
import pytest

from vilib_ros.frontend.config import SCORES, DetectorConfig
from vilib_ros.frontend.factory import make_detector
from vilib_ros.frontend.reference.detector import CpuFastDetector, cell_select_cpu, fast_score_cpu, nms_suppress_cpu

# Bresenham circle, radius 3, written out independently of fast_lut.CIRCLE (clockwise from the top)
RING = [(0, -3), (1, -3), (2, -2), (3, -1), (3, 0), (3, 1), (2, 2), (1, 3),
        (0, 3), (-1, 3), (-2, 2), (-3, 1), (-3, 0), (-3, -1), (-2, -2), (-1, -3)]


def runs(labels, cls):
    """Maximal circular runs of label ``cls`` as lists of circle indices."""
    if all(lb == cls for lb in labels):
        return [list(range(16))]
    start = next(i for i in range(16) if labels[i] != cls)   # begin right after a non-member
    out, cur = [], []
    for j in range(1, 17):
        i = (start + j) % 16
        if labels[i] == cls:
            cur.append(i)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def is_corner(vals, c, t, n):
    labels = [1 if v > c + t else (-1 if v < c - t else 0) for v in vals]
    return any(len(r) >= n for cls in (1, -1) for r in runs(labels, cls))


def ref_score(img, x, y, n, t, score):
    c = int(img[y, x])
    vals = [int(img[y + dy, x + dx]) for dx, dy in RING]
    if not is_corner(vals, c, t, n):
        return 0
    if score == "sad_circle":
        return sum(abs(v - c) for v in vals)
    if score == "sad_arc":
        labels = [1 if v > c + t else (-1 if v < c - t else 0) for v in vals]
        return max(sum(abs(vals[i] - c) for i in r) for cls in (1, -1) for r in runs(labels, cls) if len(r) >= n)
    tt = t
    while is_corner(vals, c, tt + 1, n):  # largest threshold at which it is still a corner
        tt += 1
    return tt


def ref_score_map(img, n, t, score, border):
    h, w = img.shape
    out = np.zeros((h, w), np.float32)
    for y in range(border, h - border):
        for x in range(border, w - border):
            out[y, x] = ref_score(img, x, y, n, t, score)
    return out


def blocky(shape, seed, block=4, noise=3):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (shape[0] // block + 1, shape[1] // block + 1))
    img = np.kron(small, np.ones((block, block)))[:shape[0], :shape[1]]
    return np.clip(img + rng.integers(-noise, noise + 1, shape), 0, 255).astype(np.uint8)


class TestFastScoreCpu:
    @pytest.mark.parametrize("score", SCORES)
    @pytest.mark.parametrize("n,seed,threshold", [(9, 0, 10.0), (10, 1, 10.0), (11, 2, 5.5), (12, 3, 20.0)])
    def test_matches_brute_force(self, score, n, seed, threshold):
        img = blocky((30, 34), seed, block=3 + seed % 3)
        ref = ref_score_map(img, n, int(np.floor(threshold)), score, 3)
        assert np.count_nonzero(ref) > 5, "test image has too few corners to be meaningful"
        got = fast_score_cpu(img, n, threshold, score, 3)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ref)

    def test_border_is_zero(self):
        img = blocky((40, 40), 5)
        s = fast_score_cpu(img, 9, 10, "sad_arc", 8)
        assert np.count_nonzero(fast_score_cpu(img, 9, 10, "sad_arc", 3)[8:-8, 8:-8]) > 0
        assert not s[:8].any() and not s[-8:].any() and not s[:, :8].any() and not s[:, -8:].any()
        np.testing.assert_array_equal(s[8:-8, 8:-8], fast_score_cpu(img, 9, 10, "sad_arc", 3)[8:-8, 8:-8])


class TestOpenCvConformance:
    @pytest.mark.parametrize("border", [3, 8])
    def test_no_false_positives_on_euroc(self, euroc_frames, border):
        import cv2

        fast = cv2.FastFeatureDetector_create(threshold=10, nonmaxSuppression=False,
                                              type=cv2.FAST_FEATURE_DETECTOR_TYPE_9_16)
        tp = fp = fn = 0
        for img in euroc_frames[::4]:
            ours = fast_score_cpu(img, 9, 10.0, "sad_arc", border) > 0
            ocv = np.zeros(img.shape, bool)
            pts = np.array([k.pt for k in fast.detect(img)], dtype=np.int64)
            ocv[pts[:, 1], pts[:, 0]] = True
            inner = np.zeros(img.shape, bool)
            inner[border:-border, border:-border] = True
            tp += int(np.count_nonzero(ours & ocv))
            fp += int(np.count_nonzero(ours & ~ocv))
            fn += int(np.count_nonzero(ocv & inner & ~ours))
        recall = tp / (tp + fn)
        print(f"\nborder={border}: {tp} common corners, {fp} false positives, recall inside the border {recall:.4f}")
        assert tp > 1000
        assert fp == 0


def brute_suppress(score, n):
    h, w = score.shape
    out = np.zeros_like(score)
    for y in range(h):
        for x in range(w):
            s = score[y, x]
            if s <= 0:
                continue
            keep = True
            for yy in range(max(0, y - n), min(h, y + n + 1)):
                for xx in range(max(0, x - n), min(w, x + n + 1)):
                    if (yy, xx) == (y, x):
                        continue
                    q = score[yy, xx]
                    if q > s or (q == s and (yy, xx) < (y, x)):
                        keep = False
            out[y, x] = s if keep else 0
    return out


class TestNmsSuppressCpu:
    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_matches_brute_force_with_ties(self, n):
        rng = np.random.default_rng(n)
        score = rng.integers(0, 4, (23, 29)).astype(np.float32) * (rng.random((23, 29)) < 0.6)
        ref = brute_suppress(score, n)
        np.testing.assert_array_equal(nms_suppress_cpu(score, n), ref)
        assert np.count_nonzero(ref) > 3

    def test_plateau_keeps_first_in_raster_order(self):
        s = np.zeros((7, 7), np.float32)
        s[2:5, 2:5] = 5
        out = nms_suppress_cpu(s, 1)
        # every other plateau pixel has an equal neighbour earlier in raster order
        assert np.argwhere(out > 0).tolist() == [[2, 2]]


class TestCellSelection:
    @pytest.mark.parametrize("levels,cw,ch,n", [(2, 32, 32, 1), (1, 64, 24, 2), (3, 32, 16, 3)])
    def test_winner_is_true_cell_maximum(self, frames, levels, cw, ch, n):
        cfg = DetectorConfig(levels=levels, cell_width=cw, cell_height=ch, nms_radius=n, score="max_threshold")
        det = CpuFastDetector(752, 480, cfg)
        img = frames[10]
        maps = det.suppressed_maps(img)
        res = det.detect(img)
        rows, cols = det.grid_shape
        assert (rows, cols) == (-(-480 // ch), -(-752 // cw))
        for r in range(rows):
            for c in range(cols):
                i = r * cols + c
                best = (0.0, None)
                for k, m in enumerate(maps):          # brute force over the cell on every level
                    cwk, chk = cw >> k, ch >> k
                    for y in range(r * chk, min((r + 1) * chk, m.shape[0])):
                        row = m[y, c * cwk:(c + 1) * cwk]
                        if row.size and row.max() > best[0]:
                            x = c * cwk + int(np.argmax(row))
                            best = (float(row.max()), (k, y, x))
                if best[1] is None:
                    assert res.level[i] == -1 and res.score[i] == 0 and res.x[i] == -1 and res.y[i] == -1
                else:
                    k, y, x = best[1]
                    assert (res.score[i], res.level[i], res.x[i], res.y[i]) == (best[0], k, x << k, y << k)
        assert res.count > rows * cols // 3

    def test_occupancy_skips_cells(self, frames):
        det = CpuFastDetector(752, 480, DetectorConfig())
        img = frames[3]
        full = det.detect(img)
        occ = np.zeros(det.grid_shape, bool)
        occ[::2, 1::3] = True
        part = det.detect(img, occupancy=occ)
        o = occ.reshape(-1)
        assert np.all(part.level[o] == -1) and np.all(part.score[o] == 0)
        assert full.valid[o].sum() > 10
        for f in ("x", "y", "score", "level"):
            np.testing.assert_array_equal(getattr(part, f)[~o], getattr(full, f)[~o])

    def test_level_scaling(self):
        # one corner only on level 1 -> reported at 2x its level-1 position
        cfg = DetectorConfig(levels=2)
        m0 = np.zeros((64, 96), np.float32)
        m1 = np.zeros((32, 48), np.float32)
        m1[5, 20] = 7
        m0[40, 40] = 7   # same score on level 0 in another cell; and one tie in the same cell:
        m0[12, 33] = 7
        m1[6, 35] = 5    # a level-1 corner alone in its cell (0, 2): at (70, 12) on level 0
        res = cell_select_cpu([m0, m1], cfg, (2, 3))
        assert res.level.tolist() == [-1, 0, 1, -1, 0, -1]
        assert (res.x[1], res.y[1]) == (33, 12)      # tie between levels -> lower level wins
        assert (res.x[2], res.y[2], res.score[2]) == (70, 12, 5)   # the level-1 position scaled by 2


class TestConfigAndInput:
    @pytest.mark.parametrize("field,value", [("arc_length", 8), ("arc_length", 13), ("nms_radius", 0),
                                             ("nms_radius", 5), ("cell_width", 48), ("cell_width", 0),
                                             ("levels", 0), ("levels", 5), ("border", 2), ("threshold", 0.5),
                                             ("score", "harris"), ("cell_height", 31)])
    def test_bad_parameter_named(self, field, value):
        cfg = DetectorConfig(**{field: value})
        with pytest.raises(ValueError, match=field):
            cfg.validate()
        with pytest.raises(ValueError, match=field):
            make_detector(752, 480, cfg, device="cpu")

    @pytest.mark.parametrize("bad,what", [(np.zeros((480, 752), np.float32), "uint8"),
                                          (np.zeros((480, 752, 3), np.uint8), "2D"),
                                          (np.zeros((240, 376), np.uint8), "shape"),
                                          (np.zeros((0, 752), np.uint8), "empty"),
                                          ([[1, 2]], "numpy")])
    def test_bad_image(self, bad, what):
        det = make_detector(752, 480, DetectorConfig(), device="cpu")
        with pytest.raises(ValueError, match=what):
            det.detect(bad)

    def test_bad_occupancy(self):
        det = make_detector(752, 480, DetectorConfig(), device="cpu")
        img = np.zeros((480, 752), np.uint8)
        with pytest.raises(ValueError, match="occupancy"):
            det.detect(img, occupancy=np.zeros((3, 3), bool))
        with pytest.raises(ValueError, match="occupancy"):
            det.detect(img, occupancy=np.zeros(det.grid_shape, np.int32))

    @pytest.mark.parametrize("w,h", [(40, 480), (752, 40), (0, 0)])
    def test_too_small(self, w, h):
        with pytest.raises(ValueError, match="smaller|positive"):
            make_detector(w, h, DetectorConfig(), device="cpu")

    def test_level_too_small_for_border(self):
        with pytest.raises(ValueError, match="border"):
            make_detector(64, 64, DetectorConfig(levels=4, cell_width=32, cell_height=32, border=8), device="cpu")


class TestMakeDetector:
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
        with and without CUDA (these tests were marked gpu and skipped where they could run)."""
        with pytest.raises(ValueError, match=field):
            make_detector(752, 480, DetectorConfig(**{field: value}), device=device)

    @pytest.mark.parametrize("device", ["auto", "cuda"])
    def test_too_small_image_before_device(self, device):
        with pytest.raises(ValueError, match="smaller"):
            make_detector(40, 40, DetectorConfig(), device=device)
