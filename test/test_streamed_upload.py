"""The streamed upload (vilib_ros.frontend.gpu.streamed_upload): the band layout, and on the GPU the
device waiting for the host's bands, giving the reference result, and never hanging."""
import time

import numpy as np
import pytest

from vilib_ros.frontend.gpu.streamed_upload import BANDS, TILE_ROWS, band_rows


class TestBandRows:
    @pytest.mark.parametrize("height", [1, 31, 32, 33, 100, 480, 481, 1080])
    @pytest.mark.parametrize("bands", [1, 2, 4, 8])
    def test_whole_tiles_and_at_most_bands(self, height, bands):
        """A band is whole 32-row tiles of the pyramid kernel (a block never waits for two bands),
        and a frame has at most ``bands`` of them, covering every row."""
        rows = band_rows(height, bands)
        assert rows % TILE_ROWS == 0 and rows > 0
        n = -(-height // rows)
        assert 1 <= n <= bands
        assert rows - TILE_ROWS < -(-height // bands) or rows == TILE_ROWS

    def test_euroc_frame(self):
        assert band_rows(480) == 128 and BANDS == 4


@pytest.mark.gpu
class TestStreamedDetector:
    W, H = 752, 480

    def _frames(self):
        rng = np.random.default_rng(3)
        return [(rng.random((self.H, self.W)) * 255).astype(np.uint8) for _ in range(3)]

    def test_equals_copy_first(self, frames):
        """A streamed frame gives the cells of the CPU detector (CpuFastDetector, the NumPy
        reference of the FAST + NMS + cell selection the device runs; bit-identical), with the
        staging buffer poisoned before every frame (a block that read before its band would see
        0xEE); so does the same frame copied before the launch (upload='mapped'). The reference
        is the CPU, not the mapped GPU upload: a fault common to both GPU paths (a band released
        before its copy, a wrong kernel) fails."""
        from vilib_ros.frontend.config import DetectorConfig
        from vilib_ros.frontend.gpu.detector import GpuFastDetector
        from vilib_ros.frontend.reference.detector import CpuFastDetector

        cfg = DetectorConfig()
        a = GpuFastDetector(self.W, self.H, cfg, upload="streamed")
        b = GpuFastDetector(self.W, self.H, cfg, upload="mapped")
        ref = CpuFastDetector(self.W, self.H, cfg)
        for img in frames[:12:3]:
            a._frame_host[...] = 0xEE
            before = a._streamer._value
            ca, cb, cr = a.detect(img), b.detect(img), ref.detect(img)
            assert a._streamer._value == before + 1, "the frame did not stream"
            assert a._streamer._flags[0] == a._streamer._value, "the frame was not released"
            assert cr.count > 100 and np.ptp(cr.y[cr.valid]) > 3 * a._streamer.rows   # cells in every band
            for f in ("x", "y", "score", "level"):
                np.testing.assert_array_equal(getattr(ca, f), getattr(cr, f), err_msg=f"streamed {f}")
                np.testing.assert_array_equal(getattr(cb, f), getattr(cr, f), err_msg=f"mapped {f}")
        assert a._streamer.timeouts == 0

    def test_host_that_never_copies_cannot_hang_the_device(self, frames):
        """Regression guard for the wait on host memory: a frame launched and never copied ends
        after the 1 s timeout, is counted, and the next frame is right again."""
        from vilib_ros.frontend.config import DetectorConfig
        from vilib_ros.frontend.gpu.detector import GpuFastDetector
        from vilib_ros.frontend.reference.detector import CpuFastDetector

        cfg = DetectorConfig()
        det = GpuFastDetector(self.W, self.H, cfg, upload="streamed")
        det.detect(frames[0])                     # the graph captured
        src, _ = det.prepare(frames[1], stream_ok=True)
        g = det.graphs.get((False, False, "streamed", 0), lambda: None)
        assert g is not None and det._deferred is not None
        t0 = time.perf_counter()
        g.launch(det.stream)                            # and no fill
        det.stream.synchronize()
        waited = time.perf_counter() - t0
        assert 0.9 < waited < 30.0, waited
        assert det._streamer.take_timeouts() == 1 and det._streamer.timeouts == 1
        cells = det.detect(frames[2])
        ref = CpuFastDetector(self.W, self.H, cfg).detect(frames[2])
        for f in ("x", "y", "score", "level"):
            np.testing.assert_array_equal(getattr(cells, f), getattr(ref, f))
        assert det._streamer.timeouts == 1
