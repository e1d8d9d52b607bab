"""Programmatic dependent launch (``_cuda.launch`` with ``VILIB_ROS_PDL``, ``kernels/pdl.cuh``;
launches captured into CUDA graphs): launches may overlap their predecessor's tail, so every kernel must wait for it before touching
memory. Checked on the device: a chain of dependent one-block kernels in a CUDA graph sees every
predecessor's write; the arguments reach the kernel as CuPy passes them; the frontend gives the
same tracks to the bit with and without it."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

BENCH_KERNELS = Path(__file__).resolve().parents[1] / "bench" / "kernels"   # bench_util.cu: chain_step

gpu = pytest.mark.gpu      # every test but the setting's "0" (it reads no device) needs one


@pytest.fixture
def pdl_env():
    old = os.environ.get("VILIB_ROS_PDL")
    yield
    if old is None:
        os.environ.pop("VILIB_ROS_PDL", None)
    else:
        os.environ["VILIB_ROS_PDL"] = old


class TestSetting:
    def test_zero_switches_it_off(self, pdl_env):
        """Runs without a GPU: "0" is read before any device is asked."""
        from vilib_ros._cuda import pdl_enabled

        os.environ["VILIB_ROS_PDL"] = "0"
        assert not pdl_enabled()

    @gpu
    def test_on_where_the_device_has_it(self, pdl_env):
        import cupy as cp

        from vilib_ros._cuda import pdl_enabled

        os.environ["VILIB_ROS_PDL"] = "1"
        major = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["major"]
        assert pdl_enabled() == (major >= 9)


@gpu
class TestChainInGraph:
    """Regression guard: a kernel without PDL_ENTRY (or with it after an early return) would read
    its predecessor's output before it is written; the chain records what each link read."""

    @pytest.mark.parametrize("env", ["1", "0"])
    def test_every_link_sees_its_predecessor(self, pdl_env, env):
        import cupy as cp

        from vilib_ros._cuda import get_module, launch

        os.environ["VILIB_ROS_PDL"] = env
        k = get_module("bench_util", kernel_dir=BENCH_KERNELS).get_function("chain_step")
        links, replays = 24, 50
        s = cp.cuda.Stream(non_blocking=True)
        x = cp.zeros(1, cp.int32)
        trace = cp.full(links, -7, cp.int32)          # poison
        s.begin_capture()
        for i in range(links):
            launch(k, (1, 1, 1), (128, 1, 1), (x, trace, np.int32(i)), stream=s, checked=False)
        g = s.end_capture()
        for _ in range(replays):
            g.launch(s)
        s.synchronize()
        assert int(x.get()[0]) == links * replays
        np.testing.assert_array_equal(trace.get(), links * (replays - 1) + np.arange(links))


@gpu
class TestArguments:
    def test_scalars_and_arrays_as_cupy_passes_them(self, pdl_env):
        """int32 / float32 / float64 / uint64 scalars, a Python int (int64) and arrays, through
        the PDL launch and through CuPy's, into the same kernel."""
        import cupy as cp

        from vilib_ros._cuda import launch

        src = r'''
        extern "C" __global__ void args(int a, float b, double c, unsigned long long d, long long e,
                                        const float* x, double* out)
        { out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = (double)e; out[5] = x[2]; }
        '''
        k = cp.RawKernel(src, "args")
        x = cp.asarray(np.array([0, 0, 3.25], np.float32))
        res = {}
        for env in ("1", "0"):
            os.environ["VILIB_ROS_PDL"] = env
            out = cp.full(6, np.nan)                  # poison
            s = cp.cuda.Stream(non_blocking=True)
            s.begin_capture()                         # where the PDL launch is taken
            launch(k, (1, 1, 1), (1, 1, 1), (np.int32(-5), np.float32(1.5), np.float64(2.5e-300),
                                             np.uint64(2 ** 40 + 3), 2 ** 33 + 1, x, out), stream=s, checked=False)
            s.end_capture().launch(s)
            s.synchronize()
            res[env] = out.get()
        expect = [-5, 1.5, 2.5e-300, float(2 ** 40 + 3), float(2 ** 33 + 1), 3.25]
        np.testing.assert_array_equal(res["1"], expect)
        np.testing.assert_array_equal(res["0"], expect)

    def test_unsupported_argument_is_a_clear_error(self, pdl_env):
        import cupy as cp

        from vilib_ros._cuda import launch, pdl_enabled

        os.environ["VILIB_ROS_PDL"] = "1"
        if not pdl_enabled():
            pytest.skip("this device has no programmatic dependent launch (compute capability < 9.0)")
        k = cp.RawKernel('extern "C" __global__ void one(int a) {}', "one")
        s = cp.cuda.Stream(non_blocking=True)
        s.begin_capture()
        try:
            with pytest.raises(TypeError, match="cannot be passed"):
                launch(k, (1, 1, 1), (1, 1, 1), ("a string",), stream=s, checked=False)
        finally:
            s.end_capture()


@gpu
class TestFrontendSameTracks:
    @pytest.mark.parametrize("stereo", [False, True], ids=["mono", "stereo"])
    def test_identical_with_and_without(self, pdl_env, frames, stereo):
        from bench.frontend import _stamp, _tracker

        frames = frames[:40]
        runs = {}
        for env in ("1", "0"):
            os.environ["VILIB_ROS_PDL"] = env
            ft, right = _tracker("cuda", stereo=stereo, frames=frames)
            rows = []
            for i, f in enumerate(frames):
                kw = {"image_right": right[i]} if stereo else {}
                fr = ft.process(f, _stamp(), **kw)
                rows.append((fr.ids.copy(), fr.xy.copy(), None if fr.xy_right is None else fr.xy_right.copy()))
            runs[env] = rows
        assert sum(len(r[0]) for r in runs["1"]) > 1000
        for a, b in zip(runs["1"], runs["0"]):
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
            if stereo:
                np.testing.assert_array_equal(a[2], b[2])


@gpu
class TestRefusedLaunch:
    """A driver that refuses the attributed launch under capture (here: an attribute id the driver
    does not know) must not cost the graphs: GraphCache captures again without PDL, logs it once,
    and the frontend runs on graphs with the same tracks."""

    def test_graphs_captured_again_without(self, pdl_env, frames, monkeypatch, caplog):
        from vilib_ros import _cuda
        from bench.frontend import _stamp, _tracker

        os.environ["VILIB_ROS_PDL"] = "1"
        if not _cuda.pdl_enabled():
            pytest.skip("this device has no programmatic dependent launch (compute capability < 9.0)")
        frames = frames[:12]
        ref, _ = _tracker("cuda", frames=frames)
        want = [ref.process(f, _stamp()).ids.copy() for f in frames]
        monkeypatch.setattr(_cuda, "_PDL_ATTRIBUTE", 0x7FFF)
        monkeypatch.setattr(_cuda, "_PDL_FAILED", [])
        with caplog.at_level("WARNING", logger="vilib_ros.cuda"):
            ft, _ = _tracker("cuda", frames=frames)
            got = [ft.process(f, _stamp()).ids.copy() for f in frames]
        assert _cuda._PDL_FAILED and not _cuda.pdl_enabled()
        assert ft.pipeline.graph_error is None and ft.pipeline.graph_launches >= len(frames)
        assert sum("switched off" in r.getMessage() for r in caplog.records) == 1
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b)
