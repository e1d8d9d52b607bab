"""FAST detector, the CPU twins: the NumPy reference (reference.detector: fast_score_cpu,
nms_suppress_cpu, cell_select_cpu, CpuFastDetector) against brute-force per-pixel references and
OpenCV's FAST; the compiled twin (numba: compiled.fast, .nms, .detector) against the reference, bit
for bit (score maps, suppressed maps, cells) on the real frames (the generated sequence's where they
are absent) and random images, for every score, N = 9..12, n = 1..4 and l = 1..3. (The pyramid:
test_pyramid.py; the GPU twin: test_detector_gpu.py; the choice between twins: test_factory.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import compiled_twin
from vilib_ros.frontend.config import SCORE_CODES, SCORES, DetectorConfig, grid_shape_for
from vilib_ros.frontend.factory import compiled_available, make_detector
from vilib_ros.frontend.fast_lut import build_lut
from vilib_ros.frontend.reference.detector import CpuFastDetector, cell_select_cpu, fast_score_cpu, nms_suppress_cpu
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

if compiled_available():      # the compiled twin's modules import numba
    from vilib_ros.frontend.compiled.detector import NumbaFastDetector
    from vilib_ros.frontend.compiled.fast import fast_score
    from vilib_ros.frontend.compiled.nms import nms_cells, nms_full

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


def blocky(shape, seed, block=3, noise=4):
    """Random blocks plus noise: many corners of every kind, many score ties."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (shape[0] // block + 1, shape[1] // block + 1))
    img = np.kron(small, np.ones((block, block)))[:shape[0], :shape[1]]
    return np.clip(img + rng.integers(-noise, noise + 1, shape), 0, 255).astype(np.uint8)


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


def _compiled_score(img, n, threshold, score, border):
    out = np.full(img.shape, np.nan, np.float32)   # poisoned: every pixel must be written
    fast_score(np.ascontiguousarray(img), build_lut(n), n, int(np.floor(threshold)), SCORE_CODES[score], border, out)
    return out


def _reference_detect(img, cfg, occupancy=None):
    """The NumPy reference chain, keeping the intermediate maps."""
    levels = build_pyramid_cpu(img, cfg.levels)
    scores = [fast_score_cpu(lv, cfg.arc_length, cfg.threshold, cfg.score, cfg.border) for lv in levels]
    sup = [nms_suppress_cpu(s, cfg.nms_radius) for s in scores]
    cells = cell_select_cpu(sup, cfg, grid_shape_for(img.shape[1], img.shape[0], cfg), occupancy)
    return levels, scores, sup, cells


def _assert_cells_equal(got, ref):
    assert got.grid_shape == ref.grid_shape
    for f in ("x", "y", "score", "level"):
        a, b = getattr(got, f), getattr(ref, f)
        assert a.dtype == b.dtype, f
        np.testing.assert_array_equal(a, b, err_msg=f)


@pytest.fixture(scope="module")
def euroc_reference(frames):
    """Reference pyramid, score maps and cells (default config, and with an occupancy) per frame."""
    cfg = DetectorConfig()
    gs = grid_shape_for(752, 480, cfg)
    occ = np.random.default_rng(0).random(gs) < 0.3
    out = []
    for img in frames:
        levels, scores, sup, cells = _reference_detect(img, cfg)
        out.append((levels, scores, cells, cell_select_cpu(sup, cfg, gs, occ)))
    return cfg, occ, out


class TestFastScoreCpu:
    """The reference score map against the segment test and scores written out pixel by pixel, and
    against OpenCV's FAST."""

    @pytest.mark.parametrize("score", SCORES)
    @pytest.mark.parametrize("n,seed,threshold", [(9, 0, 10.0), (10, 1, 10.0), (11, 2, 5.5), (12, 3, 20.0)])
    def test_matches_brute_force(self, score, n, seed, threshold):
        img = blocky((30, 34), seed, block=3 + seed % 3, noise=3)
        ref = ref_score_map(img, n, int(np.floor(threshold)), score, 3)
        assert np.count_nonzero(ref) > 5, "test image has too few corners to be meaningful"
        got = fast_score_cpu(img, n, threshold, score, 3)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ref)

    def test_border_is_zero(self):
        img = blocky((40, 40), 5, block=4, noise=3)
        s = fast_score_cpu(img, 9, 10, "sad_arc", 8)
        assert np.count_nonzero(fast_score_cpu(img, 9, 10, "sad_arc", 3)[8:-8, 8:-8]) > 0
        assert not s[:8].any() and not s[-8:].any() and not s[:, :8].any() and not s[:, -8:].any()
        np.testing.assert_array_equal(s[8:-8, 8:-8], fast_score_cpu(img, 9, 10, "sad_arc", 3)[8:-8, 8:-8])

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


@compiled_twin
class TestFastScoreCompiled:
    """compiled.fast.fast_score against the reference score map, bit for bit."""

    def test_real_frames_bit_identical(self, frames, euroc_reference):
        cfg = euroc_reference[0]
        for img, (levels, scores, _, _) in zip(frames, euroc_reference[2]):
            for lv, ref in zip(levels, scores):
                np.testing.assert_array_equal(_compiled_score(lv, cfg.arc_length, cfg.threshold, cfg.score,
                                                              cfg.border), ref)

    @pytest.mark.parametrize("score", SCORES)
    @pytest.mark.parametrize("n", [9, 10, 11, 12])
    def test_random_images_all_scores_and_arcs(self, score, n):
        img = blocky((61, 83), seed=n, block=2 + n % 3)
        for threshold, border in ((10.0, 3), (5.5, 8), (30.0, 4)):
            ref = fast_score_cpu(img, n, threshold, score, border)
            got = _compiled_score(img, n, threshold, score, border)
            np.testing.assert_array_equal(got, ref)
        assert np.count_nonzero(fast_score_cpu(img, n, 10.0, score, 3)) > 20, "too few corners to be meaningful"

    @pytest.mark.parametrize("score", SCORES)
    def test_real_frame_every_score(self, frames, score):
        img = frames[47]
        for n in (9, 12):
            np.testing.assert_array_equal(_compiled_score(img, n, 10.0, score, 3), fast_score_cpu(img, n, 10.0, score, 3))

    @pytest.mark.parametrize("shape,border", [((6, 40), 3), ((40, 6), 3), ((17, 17), 8), ((7, 7), 3)])
    def test_tiny_images_are_zero_outside_the_border(self, shape, border):
        img = blocky(shape, seed=3)
        np.testing.assert_array_equal(_compiled_score(img, 9, 5, "sad_arc", border), fast_score_cpu(img, 9, 5, "sad_arc", border))

    def test_saturated_contrast(self):
        img = np.zeros((40, 40), np.uint8)
        img[::2, ::3] = 255
        img[20, 20] = 255
        for score in SCORES:
            np.testing.assert_array_equal(_compiled_score(img, 9, 254, score, 3), fast_score_cpu(img, 9, 254, score, 3))
            np.testing.assert_array_equal(_compiled_score(img, 9, 1, score, 3), fast_score_cpu(img, 9, 1, score, 3))


class TestNmsSuppressCpu:
    """The reference non-maxima suppression against a brute-force neighbourhood scan."""

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


@compiled_twin
class TestNmsFull:
    """compiled.nms.nms_full against the reference suppression."""

    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_matches_reference_with_ties(self, n):
        rng = np.random.default_rng(n)
        score = (rng.integers(0, 4, (37, 45)) * (rng.random((37, 45)) < 0.6)).astype(np.float32)
        out = np.full_like(score, np.nan)
        nms_full(score, n, out)
        np.testing.assert_array_equal(out, nms_suppress_cpu(score, n))


class TestCellSelectCpu:
    """The reference cell selection against a brute-force maximum over each cell on every level."""

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


@compiled_twin
class TestNmsCells:
    """compiled.nms.nms_cells (suppression and cell selection in one pass) against the reference."""

    @pytest.mark.parametrize("levels", [1, 2, 3])
    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_random_images(self, levels, n):
        cfg = DetectorConfig(levels=levels, nms_radius=n, cell_width=32, cell_height=32 if levels < 3 else 16,
                             score="max_threshold" if n % 2 else "sad_arc", arc_length=9, border=3)
        img = blocky((150, 200), seed=10 * levels + n)
        gs = grid_shape_for(200, 150, cfg)
        occ = np.random.default_rng(n).random(gs) < 0.25
        for o in (None, occ):
            _, scores, _, ref = _reference_detect(img, cfg, o)
            det = NumbaFastDetector(200, 150, cfg)
            _assert_cells_equal(det.detect(img, occupancy=o), ref)
            assert ref.count > gs[0] * gs[1] // 2

    def test_poisoned_outputs_all_written(self):
        cfg = DetectorConfig(levels=2)
        img = blocky((96, 128), seed=5)
        levels = build_pyramid_cpu(img, 2)
        maps = tuple(fast_score_cpu(lv, 10, 10, "sad_arc", 8) for lv in levels) + (np.zeros((1, 1), np.float32),) * 2
        rows, cols = grid_shape_for(128, 96, cfg)
        outs = [np.full(rows * cols, np.nan, np.float32) for _ in range(3)] + [np.full(rows * cols, -7, np.int32)]
        nms_cells(maps, 2, 32, 32, rows, cols, 1, np.zeros(rows * cols, np.uint8), False, *outs)
        ref = cell_select_cpu([nms_suppress_cpu(m, 1) for m in maps[:2]], cfg, (rows, cols))
        for a, f in zip(outs, ("x", "y", "score", "level")):
            np.testing.assert_array_equal(a, getattr(ref, f))

    def test_partial_cells_and_tie_across_levels(self):
        # width 100 = 3 full cells + a partial one; a level-1 corner ties a level-0 corner in its cell
        cfg = DetectorConfig(levels=2, border=3, cell_width=32, cell_height=32)
        m0 = np.zeros((70, 100), np.float32)
        m1 = np.zeros((35, 50), np.float32)
        m0[10, 97] = 5.0      # in the partial last column of cells
        m0[40, 10] = 9.0
        m1[22, 6] = 9.0       # same cell (row 1, col 0) on level 1: the lower level must win
        m1[3, 20] = 4.0       # cell (0, 1) only on level 1: reported at (40, 6)
        rows, cols = grid_shape_for(100, 70, cfg)
        maps = (m0, m1) + (np.zeros((1, 1), np.float32),) * 2
        outs = [np.empty(rows * cols, np.float32) for _ in range(3)] + [np.empty(rows * cols, np.int32)]
        nms_cells(maps, 2, 32, 32, rows, cols, 1, np.zeros(rows * cols, np.uint8), False, *outs)
        ref = cell_select_cpu([m0, m1], cfg, (rows, cols))
        for a, f in zip(outs, ("x", "y", "score", "level")):
            np.testing.assert_array_equal(a, getattr(ref, f))
        assert (outs[3][cols], outs[0][cols], outs[1][cols]) == (0, 10, 40)
        assert (outs[3][1], outs[0][1], outs[1][1]) == (1, 40, 6)


@compiled_twin
class TestNumbaFastDetector:
    """compiled.detector.NumbaFastDetector: the reference detector's interface and cells."""

    def test_real_frames_cells_bit_identical(self, frames, euroc_reference):
        cfg, occ, ref = euroc_reference
        det = NumbaFastDetector(752, 480, cfg)
        for img, (_, _, cells, cells_occ) in zip(frames, ref):
            _assert_cells_equal(det.detect(img), cells)
            _assert_cells_equal(det.detect(img, occupancy=occ), cells_occ)
        assert np.mean([r[2].count for r in ref]) > 200

    def test_interface_matches_reference_detector(self, frames):
        cfg = DetectorConfig(levels=3, cell_height=32, nms_radius=2, score="sad_circle", arc_length=11)
        det, ref = NumbaFastDetector(752, 480, cfg), CpuFastDetector(752, 480, cfg)
        img = frames[60]
        for method in ("pyramid", "score_maps", "suppressed_maps"):
            got, want = getattr(det, method)(img), getattr(ref, method)(img)
            assert len(got) == len(want) == 3
            for a, b in zip(got, want):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)
        first = det.score_maps(img)
        det.detect(frames[61])              # internal buffers are reused ...
        np.testing.assert_array_equal(first[0], ref.score_maps(img)[0])   # ... returned maps are copies
        assert det.grid_shape == ref.grid_shape and det.device == "cpu" and isinstance(det, CpuFastDetector)

    def test_bad_input_reads_as_message(self):
        det = NumbaFastDetector(752, 480, DetectorConfig())
        with pytest.raises(ValueError, match="uint8"):
            det.detect(np.zeros((480, 752), np.float32))
        with pytest.raises(ValueError, match="shape"):
            det.detect(np.zeros((480, 750), np.uint8))
        with pytest.raises(ValueError, match="occupancy"):
            det.detect(np.zeros((480, 752), np.uint8), occupancy=np.zeros((2, 2), bool))


class TestConfigAndInput:
    """DetectorConfig.validate and the detector's input checks: each error names what is wrong."""

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
