"""Image pyramid, the GPU twin (gpu.pyramid, kernels/pyramid.cu) against the NumPy reference
(reference.pyramid.build_pyramid_cpu); every output poisoned before the run so unwritten values show."""
import numpy as np
import pytest

from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

pytestmark = pytest.mark.gpu


def _poisoned_pyramid(w, h, levels):
    from vilib_ros.frontend.gpu.pyramid import GpuPyramid

    pyr = GpuPyramid(w, h, levels)
    for lv in pyr.levels:
        lv.fill(0xAB)
    return pyr


def assert_levels_equal(got, ref, what=""):
    """As many levels, each equal (``zip`` alone would pass a pyramid that lost its last levels)."""
    got, ref = list(got), list(ref)
    assert len(got) == len(ref), f"{what}: {len(got)} levels, expected {len(ref)}"
    for k, (g, r) in enumerate(zip(got, ref)):
        np.testing.assert_array_equal(g, r, err_msg=f"{what} level {k}")


class TestGpuPyramid:
    @pytest.mark.parametrize("shape", [(480, 752), (101, 77)])
    def test_random_equals_cpu(self, shape):
        rng = np.random.default_rng(2)
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        pyr = _poisoned_pyramid(shape[1], shape[0], 5)
        pyr.upload(img)
        pyr.build()
        assert_levels_equal(pyr.to_host(), build_pyramid_cpu(img, 5))

    def test_euroc_equals_cpu(self, frames):
        pyr = _poisoned_pyramid(752, 480, 5)
        for img in (frames[0], frames[50]):
            pyr.upload(img)
            pyr.build()
            assert_levels_equal(pyr.to_host(), build_pyramid_cpu(img, 5))


def _pyramid_frame(img, levels, source):
    """Run the frontend's fused kernel (kernels/pyramid.cu: pyramid_frame) on one frame read from
    ``source``: page-locked host memory (zero-copy), a CuPy array, or level 0 itself."""
    import cupy as cp

    from vilib_ros._cuda import get_module, host_device_pointer, pinned_buffer

    h, w = img.shape
    pyr = _poisoned_pyramid(w, h, levels)
    keep = []
    prm = pinned_buffer(128, keep).view(np.uint64)
    prm[:] = 0
    if source == "pinned":
        buf = pinned_buffer(img.size, keep).reshape(h, w)
        buf[...] = img
        prm[0] = host_device_pointer(buf.ctypes.data)
    elif source == "cupy":
        d = cp.asarray(img)
        prm[0] = d.data.ptr
    else:
        pyr.levels[0].set(img)
        prm[0] = pyr.levels[0].data.ptr
    prm[2] = 12345                   # a field the kernel copies to the device
    lvl = cp.asarray(np.array([a.data.ptr for a in pyr.levels], np.uint64))
    dprm = cp.zeros(128, cp.uint8)
    cp.cuda.Device().synchronize()
    k = get_module("pyramid").get_function("pyramid_frame")
    k(((w + 127) // 128, (h + 31) // 32, 1), (256, 1, 1),
      (np.uint64(host_device_pointer(prm.ctypes.data)), dprm, lvl, np.int32(levels), np.int32(w), np.int32(h),
       np.int32(min(levels - 1, 5)), np.int32(0)))
    cp.cuda.Device().synchronize()
    assert dprm.get().view(np.uint64)[2] == 12345
    return pyr.to_host()


class TestPyramidFrameKernel:
    @pytest.mark.parametrize("source", ["pinned", "cupy", "level0"])
    @pytest.mark.parametrize("shape,levels", [((480, 752), 6), ((101, 77), 5), ((97, 200), 4)])
    def test_equals_cpu(self, shape, levels, source):
        """Fused levels (tiles of 128x32 in shared memory) equal the level-by-level NumPy build,
        for widths with and without 16-byte rows and partial tiles, from every kind of source."""
        rng = np.random.default_rng(levels)
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        assert_levels_equal(_pyramid_frame(img, levels, source), build_pyramid_cpu(img, levels))

    def test_right_camera_alone(self):
        """``cam_base`` 1, one camera in the grid (the split stereo upload of process()): the right
        camera's source into the right pyramid, the left pyramid untouched, and the frame
        parameters not copied (the left camera's launch does that)."""
        import cupy as cp

        from vilib_ros._cuda import get_module, host_device_pointer, pinned_buffer

        h, w, levels = 480, 752, 6
        img = np.random.default_rng(9).integers(0, 256, (h, w), dtype=np.uint8)
        left, right = _poisoned_pyramid(w, h, levels), _poisoned_pyramid(w, h, levels)
        before = left.to_host()
        keep = []
        prm = pinned_buffer(128, keep).view(np.uint64)
        buf = pinned_buffer(img.size, keep).reshape(h, w)
        buf[...] = img
        prm[:] = 0
        prm[1] = host_device_pointer(buf.ctypes.data)     # src[1]: the right camera's frame
        prm[2] = 12345
        lvl = cp.asarray(np.array([a.data.ptr for a in left.levels + right.levels], np.uint64))
        dprm = cp.zeros(128, cp.uint8)
        cp.cuda.Device().synchronize()
        k = get_module("pyramid").get_function("pyramid_frame")
        k(((w + 127) // 128, (h + 31) // 32, 1), (256, 1, 1),
          (np.uint64(host_device_pointer(prm.ctypes.data)), dprm, lvl, np.int32(levels), np.int32(w), np.int32(h),
           np.int32(min(levels - 1, 5)), np.int32(1)))
        cp.cuda.Device().synchronize()
        assert_levels_equal(right.to_host(), build_pyramid_cpu(img, levels), "right")
        assert_levels_equal(left.to_host(), before, "left (untouched)")
        assert not dprm.get().any()
