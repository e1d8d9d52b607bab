"""GPU detector against the CPU reference: exact score maps, cells, baseline, occupancy, errors.

Every GPU output is poisoned (NaN / 0xFF / -7) before the run so unwritten values show.
"""
import numpy as np
import pytest

from vilib_ros.frontend.config import SCORES, DetectorConfig
from vilib_ros.frontend.factory import make_detector
from vilib_ros.frontend.reference.detector import CpuFastDetector, nms_suppress_cpu
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

pytestmark = pytest.mark.gpu

W, H = 752, 480


def gpu_detector(cfg, **kw):
    from vilib_ros.frontend.gpu.detector import GpuFastDetector

    return GpuFastDetector(W, H, cfg, **kw)


def poison(det):
    """Fill the detector's outputs, score maps and pyramid levels with garbage, so that values
    no kernel wrote show up in the comparisons."""
    det._cells.fill(np.nan)
    det.out_level.fill(-7)
    for m in det.scores + det.suppressed:
        m.fill(np.nan)
    for lv in det.pyramid.levels:
        lv.fill(0xFF)
    det._cells_host[:] = np.nan
    det.stream.synchronize()
    import cupy as cp

    cp.cuda.Device().synchronize()


def random_images(shape=(H, W), seeds=(0, 1)):
    out = []
    for s in seeds:
        rng = np.random.default_rng(s)
        small = rng.integers(0, 256, (shape[0] // 4 + 1, shape[1] // 4 + 1))
        img = np.kron(small, np.ones((4, 4)))[:shape[0], :shape[1]] + rng.integers(-6, 7, shape)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def assert_cells_equal(got, ref):
    assert got.grid_shape == ref.grid_shape
    for f in ("level", "score", "x", "y"):
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)


class TestScoreMapsExact:
    @pytest.mark.parametrize("n", [9, 10, 11, 12])
    @pytest.mark.parametrize("score", SCORES)
    def test_equal_cpu(self, frames, score, n):
        cfg = DetectorConfig(arc_length=n, score=score, levels=2, threshold=10.0)
        gpu, cpu = gpu_detector(cfg), CpuFastDetector(W, H, cfg)
        for img in [frames[0], frames[60]] + random_images(seeds=(n,)):
            poison(gpu)
            gpu.detect(img)
            got, ref = gpu.score_maps_host(), cpu.score_maps(img)
            for k, (g, r) in enumerate(zip(got, ref)):
                np.testing.assert_array_equal(g, r, err_msg=f"level {k}")
            assert np.count_nonzero(ref[0]) > 100

    def test_fractional_threshold_and_border(self, frames):
        cfg = DetectorConfig(arc_length=9, score="max_threshold", threshold=7.5, border=3, levels=3, cell_height=32)
        gpu, cpu = gpu_detector(cfg), CpuFastDetector(W, H, cfg)
        img = frames[30]
        poison(gpu)
        gpu.detect(img)
        for g, r in zip(gpu.score_maps_host(), cpu.score_maps(img)):
            np.testing.assert_array_equal(g, r)


class TestPyramidInDetector:
    def test_pyramid_identical(self, frames):
        cfg = DetectorConfig(levels=4, cell_height=32)
        gpu = gpu_detector(cfg)
        for img in (frames[5], random_images()[0]):
            poison(gpu)
            gpu.detect(img)
            for g, r in zip(gpu.pyramid_host(), build_pyramid_cpu(img, 4)):
                np.testing.assert_array_equal(g, r)


class TestCellsEqualCpu:
    @pytest.mark.parametrize("score", SCORES)
    @pytest.mark.parametrize("nms_radius", [1, 2, 3, 4])
    def test_cells(self, frames, score, nms_radius):
        for levels, cw, ch in ((1, 32, 32), (2, 32, 32), (3, 64, 48)):
            cfg = DetectorConfig(score=score, nms_radius=nms_radius, levels=levels, cell_width=cw, cell_height=ch)
            gpus = [gpu_detector(cfg, nms_kernel=v) for v in ("smem", "global")]
            assert [g.nms_kernel for g in gpus] == ["smem", "global"]
            cpu = CpuFastDetector(W, H, cfg)
            for img in (frames[0], frames[94]):
                ref = cpu.detect(img)
                for gpu in gpus:
                    poison(gpu)
                    res = gpu.detect(img)
                    assert_cells_equal(res, ref)
                assert ref.count > 0.5 * ref.level.size

    @pytest.mark.parametrize("levels,cw,ch,n", [(2, 64, 40, 2), (3, 32, 36, 1), (4, 96, 24, 3)])
    def test_random_images_and_partial_cells(self, levels, cw, ch, n):
        # odd cell sizes: level-k cells (cw>>k) x (ch>>k) hold pixel counts that are not
        # multiples of 32 (e.g. 8 x 9), and the last cell row/column is partial
        cfg = DetectorConfig(levels=levels, cell_width=cw, cell_height=ch, nms_radius=n)
        w, h = 700, 419     # neither side a multiple of the cell: partial last row/column
        from vilib_ros.frontend.gpu.detector import GpuFastDetector

        gpus = [GpuFastDetector(w, h, cfg, nms_kernel=v) for v in ("smem", "global")]
        cpu = CpuFastDetector(w, h, cfg)
        for img in random_images((h, w), seeds=(3, 4, 5)):
            ref = cpu.detect(img)
            for gpu in gpus:
                poison(gpu)
                assert_cells_equal(gpu.detect(img), ref)

    def test_large_cells_fall_back_to_global_kernel(self, frames):
        cfg = DetectorConfig(cell_width=256, cell_height=256, nms_radius=4)
        gpu, cpu = gpu_detector(cfg, nms_kernel="smem"), CpuFastDetector(W, H, cfg)
        assert gpu.nms_kernel == "global" and gpu.nms_smem_bytes > gpu.SMEM_LIMIT
        poison(gpu)
        assert_cells_equal(gpu.detect(frames[3]), cpu.detect(frames[3]))

    @pytest.mark.parametrize("warps", [1, 4, 32])
    def test_warps_per_cell(self, frames, warps):
        cfg = DetectorConfig(nms_radius=2)
        cpu = CpuFastDetector(W, H, cfg)
        ref = cpu.detect(frames[7])
        for v in ("smem", "global"):
            gpu = gpu_detector(cfg, warps_per_cell=warps, nms_kernel=v)
            poison(gpu)
            assert_cells_equal(gpu.detect(frames[7]), ref)

    def test_graph_and_launch_paths_agree(self, frames):
        cfg = DetectorConfig(score="max_threshold")
        g, nog = gpu_detector(cfg, use_graph=True), gpu_detector(cfg, use_graph=False)
        for img in frames[:20:4]:
            poison(g)
            poison(nog)
            assert_cells_equal(g.detect(img), nog.detect(img))
        assert g.graph_error is None, g.graph_error
        assert len(g.graphs) > 0, "no CUDA graph was captured"

    @pytest.mark.parametrize("upload", ["streamed", "mapped", "copy", "pageable"])
    def test_uploads(self, frames, upload):
        """Every way of getting the frame to the device gives the reference cells, graph or not,
        from pageable, strided and page-locked frames."""
        cfg = DetectorConfig()
        cpu = CpuFastDetector(W, H, cfg)
        for use_graph in (True, False):
            gpu = gpu_detector(cfg, upload=upload, use_graph=use_graph)
            ring = gpu.pinned_frames(1)
            ring[0][...] = frames[11]
            strided = np.zeros((H, 2 * W), np.uint8)
            strided[:, ::2] = frames[12]
            for img, ref in ((frames[10], frames[10]), (ring[0], frames[11]),
                             (strided[:, ::2], frames[12])):
                poison(gpu)
                assert_cells_equal(gpu.detect(img), cpu.detect(ref))

    def test_pinned_frames_path(self, frames):
        cfg = DetectorConfig()
        gpu, cpu = gpu_detector(cfg), CpuFastDetector(W, H, cfg)
        ring = gpu.pinned_frames(3)
        for i, buf in enumerate(ring):
            buf[...] = frames[10 * i]
        for i, buf in enumerate(ring):
            poison(gpu)
            assert_cells_equal(gpu.detect(buf), cpu.detect(frames[10 * i]))


class TestBaselineNms:
    @pytest.mark.parametrize("nms_radius", [1, 2, 3, 4])
    def test_baseline_equals_combined(self, frames, nms_radius):
        cfg = DetectorConfig(nms_radius=nms_radius, levels=2)
        gpu, cpu = gpu_detector(cfg), CpuFastDetector(W, H, cfg)
        for img in (frames[1], frames[40]):
            poison(gpu)
            base = gpu.detect_baseline(img)
            sup = gpu.suppressed_maps_host()
            for s, m in zip(sup, cpu.score_maps(img)):
                np.testing.assert_array_equal(s, nms_suppress_cpu(m, nms_radius))
            poison(gpu)
            assert_cells_equal(base, gpu.detect(img))
            assert_cells_equal(base, cpu.detect(img))


class TestOccupancy:
    def test_occupied_cells_empty(self, frames):
        cfg = DetectorConfig()
        gpu, cpu = gpu_detector(cfg), CpuFastDetector(W, H, cfg)
        img = frames[12]
        rng = np.random.default_rng(0)
        occ = rng.random(gpu.grid_shape) < 0.4
        poison(gpu)
        res = gpu.detect(img, occupancy=occ)
        assert_cells_equal(res, cpu.detect(img, occupancy=occ))
        o = occ.reshape(-1)
        assert np.all(res.level[o] == -1) and np.all(res.score[o] == 0) and np.all(res.x[o] == -1)
        assert res.valid[~o].mean() > 0.5
        # next frame without occupancy: every cell is searched again (graph variant switch)
        poison(gpu)
        assert_cells_equal(gpu.detect(img), cpu.detect(img))

    def test_detect_device_with_external_pyramid(self, frames):
        import cupy as cp

        from vilib_ros.frontend.gpu.pyramid import GpuPyramid

        cfg = DetectorConfig()
        gpu, cpu = gpu_detector(cfg), CpuFastDetector(W, H, cfg)
        pyr = GpuPyramid(W, H, 5)
        img = frames[20]
        pyr.upload(img)
        pyr.build()
        occ = np.zeros(gpu.grid_shape, bool)
        occ[3:6, 4:9] = True
        poison(gpu)
        occ_dev = cp.asarray(occ)
        x, y, s, lv = gpu.detect_device(pyr, occupancy_dev=occ_dev)   # current (legacy) stream
        cp.cuda.Device().synchronize()
        ref = cpu.detect(img, occupancy=occ)
        np.testing.assert_array_equal(lv.get(), ref.level)
        np.testing.assert_array_equal(s.get(), ref.score)
        np.testing.assert_array_equal(x.get(), ref.x)
        np.testing.assert_array_equal(y.get(), ref.y)


class TestBadInput:
    @pytest.mark.parametrize("bad,what", [(np.zeros((H, W), np.float32), "uint8"),
                                          (np.zeros((H, W, 3), np.uint8), "2D"),
                                          (np.zeros((H // 2, W // 2), np.uint8), "shape"),
                                          (np.zeros((0, W), np.uint8), "empty")])
    def test_bad_image(self, bad, what):
        gpu = gpu_detector(DetectorConfig())
        with pytest.raises(ValueError, match=what):
            gpu.detect(bad)
        # the detector still works afterwards
        img = random_images()[0]
        assert_cells_equal(gpu.detect(img), CpuFastDetector(W, H, DetectorConfig()).detect(img))

    def test_bad_occupancy(self):
        gpu = gpu_detector(DetectorConfig())
        with pytest.raises(ValueError, match="occupancy"):
            gpu.detect(np.zeros((H, W), np.uint8), occupancy=np.zeros((2, 2), bool))

    def test_make_detector_picks_gpu(self):
        from vilib_ros.frontend.gpu.detector import GpuFastDetector

        assert isinstance(make_detector(W, H, DetectorConfig(), device="auto"), GpuFastDetector)
        assert isinstance(make_detector(W, H, DetectorConfig(), device="cuda"), GpuFastDetector)
