"""The band uploads ('mapped_bands', 'copy_bands'): the band split and the host copy against
plain NumPy (host), and the pyramid kernel waiting for its bands (GPU)."""
import time

import numpy as np
import pytest

from vilib_ros.frontend.upload_bands import BAND_FLAGS, TILE_ROWS, BandCopier, band_ranges


class TestBandRanges:
    @pytest.mark.parametrize("height", [1, 31, 32, 33, 100, 480, 481, 1080, 2048, 4000, 20000])
    def test_cover_rows_in_tiles(self, height):
        r = band_ranges(height)
        assert r[0][0] == 0 and r[-1][1] == height
        assert all(b0 == a1 for (_, b0), (a1, _) in zip(r, r[1:]))          # contiguous, no overlap
        assert all(a % TILE_ROWS == 0 for a, _ in r)                        # a pyramid tile lies in one band
        assert 1 <= len(r) <= BAND_FLAGS
        rows = r[0][1] - r[0][0]
        assert all(b - a == rows for a, b in r[:-1]) and rows % TILE_ROWS == 0 or len(r) == 1

    def test_euroc_four_bands(self):
        assert band_ranges(480) == ((0, 128), (128, 256), (256, 384), (384, 480))


class TestBandCopier:
    def test_copy_and_flags(self):
        rng = np.random.default_rng(3)
        img = rng.integers(0, 256, (480, 752), dtype=np.uint8)
        dst = np.full((480, 752), 7, np.uint8)
        flags = np.zeros(BAND_FLAGS, np.uint32)
        bc = BandCopier(480, 752)
        bc.defer(bc.views(dst), img[:, :], flags)
        assert bc.pending and not np.array_equal(dst, img)           # nothing copied before flush
        bc.flush(41)
        assert not bc.pending
        np.testing.assert_array_equal(dst, img)
        assert list(flags[:4]) == [41] * 4 and not flags[4:].any()

    def test_strided_source(self):
        wide = np.arange(480 * 1504, dtype=np.uint32).astype(np.uint8).reshape(480, 1504)
        dst = np.zeros((480, 752), np.uint8)
        bc = BandCopier(480, 752)
        bc.defer(bc.views(dst), wide[:, ::2], np.zeros(BAND_FLAGS, np.uint32))
        bc.flush(1)
        np.testing.assert_array_equal(dst, wide[:, ::2])

    def test_failed_copy_still_releases_the_device(self):
        """A copy that fails must still write every band's flag, or the pyramid kernel waits
        for a frame that never comes (regression guard of the flag-on-error path)."""
        dst = np.zeros((480, 752), np.uint8)
        flags = np.zeros(BAND_FLAGS, np.uint32)
        bc = BandCopier(480, 752)
        bc.defer(bc.views(dst), np.zeros((100, 752), np.uint8), flags)     # too few rows: copyto raises
        with pytest.raises(ValueError):
            bc.flush(9)
        assert list(flags[:4]) == [9] * 4
        assert not bc.pending


@pytest.mark.gpu
class TestPyramidWaitsForBands:
    def test_kernel_waits_then_reads_the_bands(self, euroc_frames):
        """With 'mapped_bands' the pyramid kernel is launched before the host copy; it must not
        finish before the bands' flags are written, and must then read the new frame (not the
        poisoned staging slot)."""
        import cupy as cp

        from vilib_ros.frontend.detector import DetectorConfig
        from vilib_ros.frontend.detector_gpu import GpuFastDetector
        from vilib_ros.frontend.pyramid import build_pyramid_cpu

        det = GpuFastDetector(752, 480, DetectorConfig(), upload="mapped_bands")
        for k in range(3):
            img = euroc_frames[20 + 7 * k]        # another frame each time: a stale line of the last one shows
            det._frame_host[...] = 0xFF                  # poison: the staging slot before the copy
            for lv in det.pyramid.levels:
                lv.fill(0)
            cp.cuda.Device().synchronize()
            src, _ = det.prepare(img)
            assert det._seq != 0 and det._bands.pending
            done = cp.cuda.Event(disable_timing=True)
            det.enqueue_pyramid(src, checked=False)
            done.record(det.stream)
            time.sleep(0.05)
            assert not done.done, "the pyramid kernel ran before its bands were copied"
            det.flush_upload()
            done.synchronize()
            for got, ref in zip(det.pyramid_host(), build_pyramid_cpu(img, len(det.pyramid.levels))):
                np.testing.assert_array_equal(got, ref)


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not on PATH")
class TestFrameParamsLayout:
    def test_host_offsets_match_frame_cuh(self, tmp_path):
        """The host writes the band fields at fixed word offsets (upload_bands.U64_BANDS, I32_SEQ,
        I32_BAND_ROWS); the struct in kernels/frame.cuh must put them there (static_asserts)."""
        import subprocess
        from pathlib import Path

        from vilib_ros.frontend import upload_bands as ub
        from vilib_ros.frontend.gpu_frame import PARAMS_BYTES

        inc = Path(__file__).resolve().parents[1] / "vilib_ros" / "kernels"
        src = tmp_path / "layout.cu"
        src.write_text(
            '#include <cstddef>\n#include "frame.cuh"\n'
            f"static_assert(offsetof(FrameParams, bands) == 8 * {ub.U64_BANDS}, \"bands\");\n"
            f"static_assert(offsetof(FrameParams, seq) == 4 * {ub.I32_SEQ}, \"seq\");\n"
            f"static_assert(sizeof(FrameParams::seq) == 8, \"seq per camera\");\n"
            f"static_assert(offsetof(FrameParams, band_rows) == 4 * {ub.I32_BAND_ROWS}, \"band_rows\");\n"
            f"static_assert(sizeof(FrameParams) == {PARAMS_BYTES}, \"size\");\n"
            f"static_assert(BAND_FLAGS == {ub.BAND_FLAGS}, \"flags\");\n")
        res = subprocess.run(["nvcc", "-std=c++17", f"-I{inc}", "-c", "-o", str(tmp_path / "l.o"), str(src)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
