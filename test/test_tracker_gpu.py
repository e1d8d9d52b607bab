"""LK tracker, the GPU twin: the CUDA LK kernels (kernels/lk.cu) against the NumPy references, all
modes, on real EuRoC frames and on synthetic frames under illumination change; poisoned outputs: frame
to frame (lk_track_*, against track_cpu), and against stored templates (lk_extract against
extract_templates_cpu, lk_template_<warp>_<mode> against track_templates_cpu). On the device (marked
``gpu``), and the same kernel source compiled for the host behind a SIMT shim (no device needed;
marked ``slow``). (The CPU twins: test_tracker.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros import synthetic as syn
from vilib_ros.frontend.config import MODES, PATCH_AREA, WARPS, TrackerConfig
from vilib_ros.frontend.reference.lk import track_cpu
from vilib_ros.types import TrackStatus

cv2 = pytest.importorskip("cv2")


def _pairs(frames):
    from vilib_ros.frontend.factory import make_detector

    det = make_detector(752, 480, device="cpu")
    out = []
    for i in (0, 40, 80):
        a, b = frames[i], frames[i + 3]
        out.append((a, b, det.detect(a).points()))
    seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.3, illumination=True, gain_amplitude=0.4,
                                                   offset_amplitude=25, illumination_period_s=0.6, stereo=False,
                                                   seed=3, preset="slow"))
    a, b = seq.render(4)[0], seq.render(5)[0]
    out.append((a, b, det.detect(a).points()))
    return out


@pytest.fixture(scope="module")
def pairs(frames):
    return _pairs(frames)


@pytest.mark.gpu
class TestGpuMatchesReference:
    @pytest.mark.parametrize("mode", MODES)
    def test_positions_status_illumination(self, pairs, mode):
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker

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
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker

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
        from vilib_ros.frontend.factory import make_tracker
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker

        assert isinstance(make_tracker(752, 480, TrackerConfig(), device="auto"), GpuLKTracker)


def _device_templates(gpu, cfg, img, pts, rows, capacity):
    """lk_extract of ``pts`` in ``img`` (device pyramid) into bank rows ``rows`` of a poisoned
    bank; returns (bank, valid) on the device and the pyramid."""
    import cupy as cp

    from vilib_ros._cuda import launch
    from vilib_ros.frontend.config import BANK_STRIDE
    from vilib_ros.frontend.gpu.pyramid import GpuPyramid

    pyr = GpuPyramid(752, 480, cfg.levels)
    pyr.upload(img)
    pyr.build()
    n = len(pts)
    bank = cp.full((capacity, cfg.levels, BANK_STRIDE), cp.nan, cp.float32)
    valid = cp.full((capacity, cfg.levels), 7, cp.uint8)
    count = cp.array([n], cp.int64)
    launch(gpu.extract_kernel, ((n + gpu.warps - 1) // gpu.warps, 1, 1), (32, gpu.warps, 1),
           (gpu.level_table(pyr), np.int32(752), np.int32(480), np.int32(cfg.levels), np.int32(cfg.patch16_mask),
            count, cp.asarray(pts, cp.float32), cp.asarray(rows, cp.int32), np.uint64(0), bank, valid))
    return bank, valid, pyr


@pytest.mark.gpu
class TestTemplateKernels:
    """lk_extract and lk_template_<warp>_<mode> against the NumPy oracle of
    vilib_ros.frontend.reference.templates, with poisoned buffers."""

    def test_extract_matches_reference(self, pairs):
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker
        from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
        from vilib_ros.frontend.reference.templates import extract_templates_cpu

        cfg = TrackerConfig(template="reference", warp="affine")
        gpu = GpuLKTracker(752, 480, cfg, max_features=512)
        for a, _, pts in pairs:
            pts = np.vstack([pts + np.float32(0.37), [[3.0, 3.0], [748.0, 200.0], [np.nan, 5.0]]]).astype(np.float32)
            n = len(pts)
            rows = np.random.default_rng(n).permutation(n + 5)[:n]     # another order, 5 rows left unused
            bank, valid, _ = _device_templates(gpu, cfg, a, pts, rows, n + 5)
            ref_p, ref_v = extract_templates_cpu(build_pyramid_cpu(a, cfg.levels), pts, cfg)
            b, v = bank.get(), valid.get()
            np.testing.assert_array_equal(v[rows], ref_v)
            for lvl, P in enumerate(cfg.patch_sizes):
                ok = ref_v[:, lvl] == 1
                A = (P + 2) ** 2
                np.testing.assert_allclose(b[rows][ok, lvl, :A], ref_p[ok, lvl, :A], atol=2e-3)
            unused = np.setdiff1d(np.arange(n + 5), rows)
            assert (v[unused] == 7).all() and np.isnan(b[unused]).all()

    @pytest.mark.parametrize("feature_warps", [2, 1], ids=["two_warps", "one_warp"])   # 4: host emulation
    @pytest.mark.parametrize("warp", WARPS)
    @pytest.mark.parametrize("mode", MODES)
    def test_tracking_matches_reference(self, pairs, mode, warp, feature_warps):
        """The thread mappings of lk_template_* (LK_FEATURE_WARPS: two warps per feature exchanging
        their sums through shared memory, the default; one warp) against the NumPy oracle (four
        warps: TestTemplateKernelsOnHost)."""
        import cupy as cp

        from vilib_ros._cuda import launch
        from vilib_ros.frontend.gpu.pyramid import GpuPyramid
        from vilib_ros.frontend.gpu.tracker import GpuLKTracker
        from vilib_ros.frontend.reference.templates import track_templates_cpu

        cfg = TrackerConfig(mode=mode, template="reference", warp=warp)
        gpu = GpuLKTracker(752, 480, cfg, max_features=512, feature_warps=feature_warps)
        assert gpu.feature_warps == feature_warps
        n_all, n_status, diffs, aff_d = 0, 0, [], []
        for a, b, pts in pairs:
            n = len(pts)
            rng = np.random.default_rng(n)
            rows = rng.permutation(n).astype(np.int32)
            bank, valid, _ = _device_templates(gpu, cfg, a, pts, rows, n)
            pb = GpuPyramid(752, 480, cfg.levels)
            pb.upload(b)
            pb.build()
            pred = pts + rng.normal(0, 1.0, pts.shape).astype(np.float32)
            gain0 = rng.uniform(0.9, 1.1, n).astype(np.float32)
            offset0 = rng.uniform(-5, 5, n).astype(np.float32)
            affine0 = (np.tile([1, 0, 0, 1], (n, 1)) + rng.normal(0, 0.02, (n, 4))).astype(np.float32)
            m = n + 16                              # outputs beyond n stay poisoned
            out = {"pos": cp.full((m, 2), cp.nan, cp.float32), "status": cp.full(m, -7, cp.int8),
                   "xy": cp.full((m, 2), -7, cp.float32), "iters": cp.full(m, -7, cp.int32),
                   "residual": cp.full(m, cp.nan, cp.float32), "gain": cp.full(m, cp.nan, cp.float32),
                   "offset": cp.full(m, cp.nan, cp.float32), "affine": cp.full((m, 4), cp.nan, cp.float32)}
            null = np.uint64(0)
            launch(gpu.template_kernel, *gpu.template_launch(n),
                   (bank, valid, cp.asarray(rows), cp.asarray(gain0), cp.asarray(offset0), cp.asarray(affine0),
                    gpu.level_table(pb), np.int32(752), np.int32(480), np.int32(cfg.levels),
                    np.int32(cfg.patch16_mask), cp.array([n], cp.int64), cp.asarray(pred), null, null, null, null,
                    np.int32(cfg.max_iterations), np.float32(cfg.eps), np.float32(cfg.min_eigen),
                    np.float32(cfg.max_residual), out["pos"], out["status"], out["xy"], out["iters"],
                    out["residual"], out["gain"], out["offset"], out["affine"] if warp == "affine" else null))
            o = {k: v.get() for k, v in out.items()}
            for k, v in o.items():                  # untouched beyond n
                assert (np.isnan(v[n:]) if v.dtype.kind == "f" and k != "xy" else v[n:] == -7).all(), k
            assert np.isnan(o["xy"][:n]).all()      # no camera: NaN
            samples = np.ascontiguousarray(bank.get()[:, :, :PATCH_AREA])     # the bank less the solvers
            ref = track_templates_cpu(samples, valid.get(), rows, b, pred, cfg, gain0, offset0,
                                      affine0 if warp == "affine" else None)
            st = o["status"][:n]
            assert np.all(np.isin(st, list(TrackStatus)))
            both = (ref.status == TrackStatus.TRACKED) & (st == TrackStatus.TRACKED)
            assert np.isfinite(o["pos"][:n][st == 0]).all()
            d = np.linalg.norm(ref.pos - o["pos"][:n], axis=1)[both]
            diffs.append(d)
            n_all += n
            n_status += np.count_nonzero(ref.status == st)
            assert np.median(np.abs(ref.gain - o["gain"][:n])[both]) < 0.002
            assert np.median(np.abs(ref.offset - o["offset"][:n])[both]) < 0.2
            assert np.median(np.abs(ref.residual - o["residual"][:n])[both]) < 0.05
            assert np.abs(ref.iterations - o["iters"][:n])[both].mean() < 1.0
            if warp == "affine":
                aff_d.append(np.abs(ref.affine - o["affine"][:n])[both].ravel())
        d = np.concatenate(diffs)
        mapping = f"{feature_warps} warp(s) per feature"
        print(f"\n{warp}/{mode} ({mapping}): {n_all} features, status agrees {n_status / n_all:.1%}, |gpu - cpu| median "
              f"{np.median(d):.5f} max {d.max():.4f} px, within 0.02 px {np.mean(d < 0.02):.1%}")
        assert n_status >= 0.97 * n_all
        assert np.mean(d < 0.02) >= 0.98 and np.median(d) < 0.002
        if warp == "affine":
            assert np.median(np.concatenate(aff_d)) < 1e-3


def _features(img, n=150, border=24):
    pts = cv2.goodFeaturesToTrack(img, n, 0.01, 15).reshape(-1, 2)
    h, w = img.shape
    m = (pts[:, 0] > border) & (pts[:, 0] < w - border) & (pts[:, 1] > border) & (pts[:, 1] < h - border)
    return pts[m].astype(np.float32)


# ------------------------------------------------------------------------------------------------
# The CUDA source itself, run on the CPU: kernels/lk.cu (with kernels/camera.cuh) compiled with g++
# behind a small SIMT shim (one std::thread per lane, __shfl_xor_sync through a barrier), so that
# the kernel code is checked against the NumPy reference on machines without a GPU. Built for
# LK_FEATURE_WARPS = 1 and for groups (lk_template_* with G warps per feature: 32 G lane threads,
# a barrier per warp for the shuffles and one over the group for the shared-memory exchange).

_SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
struct uint3h { int x, y, z; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
thread_local uint3h threadIdx, blockIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(x)
using std::isfinite;
static inline unsigned char __ldg(const unsigned char* p) { return *p; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {  // lane 0 only
    unsigned long long o = *p; *p += v; return o;
}
thread_local int t_warp;                 // which warp of the feature (its part of a group)
static std::barrier<>* g_bar[4];
static std::barrier<>* g_group_bar;
static float g_shfl[4][32];
static inline float __shfl_xor_sync(unsigned, float v, int m) {
    int l = threadIdx.x, h = t_warp;
    g_shfl[h][l] = v; g_bar[h]->arrive_and_wait(); float r = g_shfl[h][l ^ m]; g_bar[h]->arrive_and_wait(); return r;
}
#define __shared__ static
static inline void __syncwarp() { g_bar[t_warp]->arrive_and_wait(); }
#define LK_GROUP_BARRIER(id) g_group_bar->arrive_and_wait()
#include "lk.cu"
// body(f) on the lane threads of feature f, nw warps (lk_template_*: LK_FEATURE_WARPS), threadIdx
// / blockIdx as the launch would set them
template <class Body> static void run_warps(int n, Body body, int nw = 1) {
    const int per_block = LK_WARPS / nw;
    for (int f = 0; f < n; ++f) {
        std::barrier<> b0(32), b1(32), b2(32), b3(32), gb(32 * nw);
        g_bar[0] = &b0; g_bar[1] = &b1; g_bar[2] = &b2; g_bar[3] = &b3; g_group_bar = &gb;
        std::vector<std::thread> th;
        for (int k = 0; k < 32 * nw; ++k)
            th.emplace_back([&, k, f] {
                const int lane = k % 32, h = k / 32;
                t_warp = h;
                threadIdx = {lane, (f % per_block) * nw + h, 0}; blockIdx = {f / per_block, 0, 0};
                blockDim = {32, LK_WARPS, 1};
                body(f);
            });
        for (auto& t : th) t.join();
    }
}
typedef void (*lkfn)(const unsigned long long*, const unsigned long long*, int, int, int, int, const float2*, const float2*,
                     const signed char*, int, int, int, float, float, float, float2*, signed char*, float*, float*, float*, int*);
extern "C" void run_lk(int mode, const unsigned long long* tl, const unsigned long long* il, int w0, int h0, int L, int mask,
                       const float* tp, const float* pred, const signed char* act, int n, int maxit, float eps2,
                       float mineig, float maxres, float* opos, signed char* ost, float* ores, float* ogain, float* ooff, int* oit) {
    lkfn fns[4] = {lk_track_translation, lk_track_offset, lk_track_gain, lk_track_gain_offset};
    run_warps(n, [&](int) {
        fns[mode](tl, il, w0, h0, L, mask, (const float2*)tp, (const float2*)pred, act, 1, n, maxit, eps2, mineig,
                  maxres, (float2*)opos, ost, ores, ogain, ooff, oit);
    });
}
// lk_template_<warp>_<mode> (stored templates; no prediction, no undistortion) and lk_extract
typedef void (*lktfn)(const float*, const unsigned char*, const int*, const float*, const float*, const float4*,
                      const unsigned long long*, int, int, int, int, const long long*, const float2*, const float2*,
                      const float*, const float*, const float*, int, float, float, float, float2*, signed char*, float2*,
                      int*, float*, float*, float*, float4*);
extern "C" void run_lk_template(int mode, int affine, const float* bank, const unsigned char* bank_valid, const int* tslot,
                                const float* gain0, const float* offset0, const float* affine0,
                                const unsigned long long* il, int w0, int h0, int L, int mask, const float* guess, int n,
                                int maxit, float eps2, float mineig, float maxres, float* opos, signed char* ost, float* oxy,
                                int* oit, float* ores, float* ogain, float* ooff, float* oaff) {
    lktfn fns[2][4] = {{lk_template_translation_translation, lk_template_translation_offset, lk_template_translation_gain,
                        lk_template_translation_gain_offset},
                       {lk_template_affine_translation, lk_template_affine_offset, lk_template_affine_gain,
                        lk_template_affine_gain_offset}};
    const long long count = n;
    run_warps(n, [&](int) {
        fns[affine][mode](bank, bank_valid, tslot, gain0, offset0, (const float4*)affine0, il, w0, h0, L, mask, &count,
                          (const float2*)guess, nullptr, nullptr, nullptr, nullptr, maxit, eps2, mineig, maxres,
                          (float2*)opos, ost, (float2*)oxy, oit, ores, ogain, ooff, affine ? (float4*)oaff : nullptr);
    }, LK_FEATURE_WARPS);
}
typedef void (*lkefn)(const unsigned long long*, int, int, int, int, const long long*, const float2*, const int*,
                      const unsigned char*, float*, unsigned char*);
extern "C" void run_lk_extract(int mode, const unsigned long long* il, int w0, int h0, int L, int mask, const float* uv,
                               int n, const int* tslot, const unsigned char* refresh, float* bank,
                               unsigned char* bank_valid) {
    lkefn fns[4] = {lk_extract_translation, lk_extract_offset, lk_extract_gain, lk_extract_gain_offset};
    const long long count = n;
    run_warps(n, [&](int) { fns[mode](il, w0, h0, L, mask, &count, (const float2*)uv, tslot, refresh, bank, bank_valid); });
}
// the camera model of kernels/camera.cuh, and the rotation prediction of lk_frontend (its first step)
extern "C" void run_undistort(const float* uv, const float* cam, int n, float* xy) {
    for (int i = 0; i < n; ++i) ((float2*)xy)[i] = undistort_px(uv[2 * i], uv[2 * i + 1], cam);
}
extern "C" void run_predict(const float* uv, const float* xy, const float* M, const float* cam, int n, float* pred) {
    for (int i = 0; i < n; ++i) {
        float2 p = ((const float2*)uv)[i];
        const float2 q = ((const float2*)xy)[i];
        const float X = M[0] * q.x + M[1] * q.y + M[2], Y = M[3] * q.x + M[4] * q.y + M[5];
        const float Z = M[6] * q.x + M[7] * q.y + M[8];
        if (Z > 1e-6f) p = distort_norm(X / Z, Y / Z, cam);
        ((float2*)pred)[i] = p;
    }
}
"""


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return _build_shim(tmp_path_factory, 1)


@pytest.fixture(scope="module", params=[2, 4], ids=["two_warps", "four_warps"])
def emulated_group(tmp_path_factory, request):
    """The LK_FEATURE_WARPS = 2 and 4 builds: lk_template_* with a group of warps per feature."""
    return _build_shim(tmp_path_factory, request.param)


def _build_shim(tmp_path_factory, feature_warps: int):
    import ctypes
    import shutil
    import subprocess

    from vilib_ros._cuda import KERNEL_DIR

    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    d = tmp_path_factory.mktemp("simt")
    (d / "probe.cpp").write_text("#include <barrier>\nint main() { std::barrier<> b(1); }\n")
    probe = subprocess.run([gxx, "-std=c++20", "-o", str(d / "probe"), str(d / "probe.cpp"), "-lpthread"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"g++ without C++20 <barrier>: {probe.stderr[:200]}")
    (d / "shim.cpp").write_text(_SHIM)
    lib = d / "libsimt.so"
    r = subprocess.run([gxx, "-std=c++20", "-O2", "-shared", "-fPIC", f"-I{KERNEL_DIR}", "-DLK_WARPS=4",
                        f"-DLK_FEATURE_WARPS={feature_warps}", "-o", str(lib), str(d / "shim.cpp"), "-lpthread"],
                       capture_output=True, text=True)
    if r.returncode != 0:     # a compile error of the kernels is a failure, not a skip
        pytest.fail(f"kernel source does not compile on the host:\n{r.stderr[:2000]}")
    return ctypes.CDLL(str(lib))


def _run_emulated_lk(lib, tmpl, img, pts, pred, cfg):
    import ctypes

    from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

    P = ctypes.c_void_p
    tp, ip = build_pyramid_cpu(tmpl, cfg.levels), build_pyramid_cpu(img, cfg.levels)
    tl = np.array([a.ctypes.data for a in tp], np.uint64)
    il = np.array([a.ctypes.data for a in ip], np.uint64)
    n = len(pts)
    pts = np.ascontiguousarray(pts, np.float32)
    pred = np.ascontiguousarray(pred, np.float32)
    act = np.ones(n, np.int8)
    opos = np.full((n, 2), np.nan, np.float32)
    ost = np.full(n, -7, np.int8)
    ores, og, oo = (np.full(n, np.nan, np.float32) for _ in range(3))
    oit = np.full(n, -7, np.int32)
    ptr = lambda a: a.ctypes.data_as(P)  # noqa: E731
    lib.run_lk(ctypes.c_int(MODES.index(cfg.mode)), ptr(tl), ptr(il), ctypes.c_int(img.shape[1]),
               ctypes.c_int(img.shape[0]), ctypes.c_int(cfg.levels), ctypes.c_int(cfg.patch16_mask), ptr(pts), ptr(pred),
               ptr(act), ctypes.c_int(n), ctypes.c_int(cfg.max_iterations), ctypes.c_float(cfg.eps),
               ctypes.c_float(cfg.min_eigen), ctypes.c_float(cfg.max_residual), ptr(opos), ptr(ost), ptr(ores),
               ptr(og), ptr(oo), ptr(oit))
    from vilib_ros.types import TrackResult

    return TrackResult(opos, ost, ores, og, oo, oit)


@pytest.mark.slow
class TestKernelSourceOnHost:
    @pytest.mark.parametrize("mode", MODES)
    def test_lk_kernel_matches_reference(self, emulated, frames, mode):
        from vilib_ros.frontend.factory import make_detector

        a, b = frames[40], frames[43]
        pts = make_detector(752, 480, device="cpu").detect(a).points()[::12][:20]
        pred = pts + np.random.default_rng(1).normal(0, 1.0, pts.shape).astype(np.float32)
        cfg = TrackerConfig(mode=mode)
        r = _run_emulated_lk(emulated, a, b, pts, pred, cfg)
        ref = track_cpu(a, b, pts, pred, cfg)
        assert np.all(np.isin(r.status, list(TrackStatus)))
        assert np.mean(r.status == ref.status) >= 0.95
        both = (r.status == 0) & (ref.status == 0)
        d = np.linalg.norm(r.pos - ref.pos, axis=1)[both]
        assert np.mean(d < 0.02) >= 0.9 and np.median(d) < 0.002
        assert np.median(np.abs(r.iterations - ref.iterations)[both]) == 0

    def test_camera_model_and_prediction(self, emulated):
        """kernels/camera.cuh (undistortion, distortion) and the rotation prediction of lk_frontend
        against the camera model and predict_points (this test compiled the removed helper kernels
        of frontend.cu, and its compile error read as a skip)."""
        import ctypes

        from vilib_ros.camera import CameraModel, euroc_cam0
        from vilib_ros.frontend.imu_prediction import predict_points
        from vilib_ros.frontend.stereo import cam_params

        P = ctypes.c_void_p
        ptr = lambda a: a.ctypes.data_as(P)  # noqa: E731
        rng = np.random.default_rng(0)
        uv = np.column_stack([rng.uniform(5, 745, 300), rng.uniform(5, 475, 300)]).astype(np.float32)
        R = cv2.Rodrigues(np.array([0.02, -0.03, 0.01]))[0]
        for cam in (euroc_cam0(), CameraModel(752, 480, 460.0, 458.0, 370.0, 250.0, "equidistant",
                                              np.array([-0.01, 0.02, -0.01, 0.002]))):
            c = cam_params(cam)
            xy = np.full((300, 2), -7, np.float32)
            emulated.run_undistort(ptr(uv), ptr(c), 300, ptr(xy))
            assert np.max(np.abs(xy - cam.undistort(uv))) < 1e-5
            M = np.zeros(12, np.float32)
            M[:9] = R.T.ravel()
            M[9] = 1
            pred = np.full((300, 2), np.nan, np.float32)
            emulated.run_predict(ptr(uv), ptr(xy), ptr(M), ptr(c), 300, ptr(pred))
            assert np.max(np.abs(pred - predict_points(cam, R, uv, cam.undistort(uv)))) < 1e-3


def _run_emulated_extract(lib, pyr, pos, cfg, capacity):
    """lk_extract of ``pos`` into bank rows capacity-1, capacity-2, ... (rows are not slots)."""
    import ctypes

    from vilib_ros.frontend.config import BANK_STRIDE

    P = ctypes.c_void_p
    ptr = lambda a: a.ctypes.data_as(P)  # noqa: E731
    il = np.array([a.ctypes.data for a in pyr], np.uint64)
    n = len(pos)
    pos = np.ascontiguousarray(pos, np.float32)
    tslot = np.ascontiguousarray(capacity - 1 - np.arange(n), np.int32)
    bank = np.full((capacity, cfg.levels, BANK_STRIDE), np.nan, np.float32)     # poisoned
    valid = np.full((capacity, cfg.levels), 7, np.uint8)
    lib.run_lk_extract(ctypes.c_int(MODES.index(cfg.mode)), ptr(il), ctypes.c_int(pyr[0].shape[1]), ctypes.c_int(pyr[0].shape[0]), ctypes.c_int(cfg.levels),
                       ctypes.c_int(cfg.patch16_mask), ptr(pos), ctypes.c_int(n), ptr(tslot), P(), ptr(bank), ptr(valid))
    return bank, valid, tslot


def _run_emulated_template(lib, bank, valid, tslot, pyr, pred, gain0, offset0, affine0, cfg):
    import ctypes

    from vilib_ros.types import TrackResult

    P = ctypes.c_void_p
    ptr = lambda a: a.ctypes.data_as(P)  # noqa: E731
    il = np.array([a.ctypes.data for a in pyr], np.uint64)
    n = len(pred)
    pred = np.ascontiguousarray(pred, np.float32)
    opos, oxy = np.full((n, 2), np.nan, np.float32), np.full((n, 2), -7, np.float32)
    ost, oit = np.full(n, -7, np.int8), np.full(n, -7, np.int32)
    ores, og, oo = (np.full(n, np.nan, np.float32) for _ in range(3))
    oaff = np.full((n, 4), np.nan, np.float32)
    c = ctypes
    lib.run_lk_template(c.c_int(MODES.index(cfg.mode)), c.c_int(cfg.warp == "affine"), ptr(bank), ptr(valid), ptr(tslot),
                        ptr(np.ascontiguousarray(gain0, np.float32)), ptr(np.ascontiguousarray(offset0, np.float32)),
                        ptr(np.ascontiguousarray(affine0, np.float32)), ptr(il), c.c_int(pyr[0].shape[1]),
                        c.c_int(pyr[0].shape[0]), c.c_int(cfg.levels), c.c_int(cfg.patch16_mask), ptr(pred), c.c_int(n),
                        c.c_int(cfg.max_iterations), c.c_float(cfg.eps), c.c_float(cfg.min_eigen),
                        c.c_float(cfg.max_residual), ptr(opos), ptr(ost), ptr(oxy), ptr(oit), ptr(ores), ptr(og), ptr(oo),
                        ptr(oaff))
    assert np.isnan(oxy).all()          # no camera given: NaN, never the poison
    r = TrackResult(opos, ost, ores, og, oo, oit)
    r.affine = oaff
    return r


@pytest.mark.slow
class TestTemplateKernelsOnHost:
    """lk_extract and lk_template_<warp>_<mode> (kernels/lk.cu, stored templates) run on the CPU
    through the SIMT shim, against the NumPy oracle (extract_templates_cpu, track_templates_cpu)."""

    def test_extract_matches_reference(self, emulated, frames):
        from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
        from vilib_ros.frontend.reference.templates import extract_templates_cpu

        cfg = TrackerConfig(template="reference", warp="affine")
        pyr = build_pyramid_cpu(frames[30], cfg.levels)
        pts = _features(frames[30], 40, border=2) + np.float32(0.31)
        pts = np.vstack([pts, [[3.0, 3.0], [748.0, 200.0], [np.nan, 5.0]]]).astype(np.float32)
        bank, valid, rows = _run_emulated_extract(emulated, pyr, pts, cfg, 64)
        ref_p, ref_v = extract_templates_cpu(pyr, pts, cfg)
        np.testing.assert_array_equal(valid[rows], ref_v)
        assert (valid[rows] == 0).any() and (valid[rows] == 1).any()
        for lvl, P in enumerate(cfg.patch_sizes):
            ok = ref_v[:, lvl] == 1
            A = (P + 2) ** 2
            np.testing.assert_allclose(bank[rows][ok, lvl, :A], ref_p[ok, lvl, :A], atol=2e-3)
        untouched = np.setdiff1d(np.arange(64), rows)
        assert (valid[untouched] == 7).all() and np.isnan(bank[untouched]).all()

    @pytest.mark.parametrize("mode", MODES)
    def test_extract_solver_matches_numpy(self, emulated, frames, mode):
        """The level solvers lk_extract_<mode> stores after the samples (flat-patch measure, the
        inverses of the translation (+ illumination) block Hs and, on 16x16 levels, of the affine
        Gauss-Newton matrix H, at gain 1) against float64 NumPy built from the oracle's samples."""
        from vilib_ros.frontend.config import MODE_INFO as _MODE_INFO, PATCH_AREA
        from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
        from vilib_ros.frontend.reference.templates import extract_templates_cpu

        cfg = TrackerConfig(mode=mode, template="reference", warp="affine")
        pyr = build_pyramid_cpu(frames[30], cfg.levels)
        pts = _features(frames[30], 40)
        bank, valid, rows = _run_emulated_extract(emulated, pyr, pts, cfg, len(pts))
        ref_p, ref_v = extract_templates_cpu(pyr, pts, cfg)
        _, gain_slot, off_slot = _MODE_INFO[mode]
        worst = {"lmin": 0.0, "Hs": 0.0, "H": 0.0}
        for k in range(len(pts)):
            for lvl, P in enumerate(cfg.patch_sizes):
                if not ref_v[k, lvl]:
                    continue
                S = ref_p[k, lvl, :(P + 2) ** 2].astype(np.float64).reshape(P + 2, P + 2) / 255.0
                tv, gx = S[1:-1, 1:-1], 0.5 * (S[1:-1, 2:] - S[1:-1, :-2])
                gy = 0.5 * (S[2:, 1:-1] - S[:-2, 1:-1])
                v, u = np.mgrid[0:P, 0:P] - 0.5 * (P - 1)
                cols = [gx * u, gx * v, gy * u, gy * v, gx, gy]
                cols += [tv] if gain_slot >= 0 else []
                cols += [np.ones_like(tv)] if off_slot >= 0 else []
                U = np.stack([c.ravel() for c in cols])
                H = U @ U.T
                a, b, c = (gx * gx).mean(), (gx * gy).mean(), (gy * gy).mean()
                lmin = 0.5 * (a + c - np.sqrt((a - c) ** 2 + 4 * b * b))
                sv = bank[rows[k], lvl, PATCH_AREA:]
                assert sv[1] == 0.0                 # both matrices SPD on these textured corners
                worst["lmin"] = max(worst["lmin"], abs(sv[0] - lmin) / lmin)
                ns, na = H.shape[0] - 4, H.shape[0]
                Hs = H[4:, 4:]
                worst["Hs"] = max(worst["Hs"], np.abs(sv[4:4 + ns * ns].reshape(ns, ns) @ Hs - np.eye(ns)).max())
                if P == 16:
                    Hi = sv[20:20 + na * na].reshape(na, na)
                    worst["H"] = max(worst["H"], np.abs(Hi @ H - np.eye(na)).max())
        print(f"\n{mode}: worst relative lmin error {worst['lmin']:.2e}, |Hs^-1 Hs - I| {worst['Hs']:.2e}, "
              f"|H^-1 H - I| {worst['H']:.2e}")
        assert worst["lmin"] < 1e-4 and worst["Hs"] < 1e-3 and worst["H"] < 1e-2

    @pytest.mark.parametrize("warp", ["translation", "affine"])
    @pytest.mark.parametrize("mode", MODES)
    def test_template_kernel_matches_reference(self, emulated, frames, warp, mode):
        self._check_template_kernel(emulated, frames, warp, mode)

    @pytest.mark.parametrize("warp,mode", [("translation", "translation"), ("affine", "gain_offset"),
                                           ("affine", "offset")])
    def test_group_mapping_matches_reference(self, emulated_group, frames, warp, mode):
        """The LK_FEATURE_WARPS mappings (two or four warps per feature: each samples its share
        of a 16x16 patch, the sums exchanged through shared memory) against the same NumPy
        oracle."""
        self._check_template_kernel(emulated_group, frames, warp, mode)

    @staticmethod
    def _check_template_kernel(emulated, frames, warp, mode):
        from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
        from vilib_ros.frontend.reference.templates import extract_templates_cpu, track_templates_cpu

        cfg = TrackerConfig(mode=mode, template="reference", warp=warp)
        a, b = frames[40], frames[46]
        pa, pb = build_pyramid_cpu(a, cfg.levels), build_pyramid_cpu(b, cfg.levels)
        pts = _features(a, 60)[:24]
        rng = np.random.default_rng(2)
        n = len(pts)
        pred = pts + rng.normal(0, 1.0, pts.shape).astype(np.float32)
        gain0 = rng.uniform(0.9, 1.1, n).astype(np.float32)
        offset0 = rng.uniform(-5, 5, n).astype(np.float32)
        affine0 = (np.tile([1, 0, 0, 1], (n, 1)) + rng.normal(0, 0.02, (n, 4))).astype(np.float32)
        # the kernels' bank (samples + the levels' solvers) by the emulated lk_extract_<mode>, rows in
        # another order than the features; the oracle's from extract_templates_cpu in the same rows
        dbank, dvalid, slots = _run_emulated_extract(emulated, pa, pts, cfg, n)
        patch, valid = extract_templates_cpu(pa, pts, cfg)
        bank = np.empty_like(patch)
        bvalid = np.empty_like(valid)
        bank[slots], bvalid[slots] = patch, valid
        np.testing.assert_array_equal(dvalid, bvalid)
        r = _run_emulated_template(emulated, dbank, dvalid, slots, pb, pred, gain0, offset0, affine0, cfg)
        ref = track_templates_cpu(bank, bvalid, slots, pb, pred, cfg, gain0, offset0,
                                  affine0 if warp == "affine" else None)
        assert np.all(np.isin(r.status, list(TrackStatus)))
        assert np.mean(r.status == ref.status) >= 0.9
        both = (r.status == 0) & (ref.status == 0)
        assert both.sum() >= 0.6 * n
        d = np.linalg.norm(r.pos - ref.pos, axis=1)[both]
        print(f"\n{warp}/{mode}: status agrees {np.mean(r.status == ref.status):.0%}, |host - ref| median "
              f"{np.median(d):.5f} max {d.max():.4f} px")
        assert np.mean(d < 0.02) >= 0.9 and np.median(d) < 0.002
        assert np.median(np.abs(r.gain - ref.gain)[both]) < 0.002
        assert np.median(np.abs(r.offset - ref.offset)[both]) < 0.2
        assert np.median(np.abs(r.residual - ref.residual)[both]) < 0.05
        assert np.median(np.abs(r.iterations - ref.iterations)[both]) == 0
        if warp == "affine":
            assert np.median(np.abs(r.affine - ref.affine)[both]) < 1e-3
            assert np.abs(r.affine[both] - [1, 0, 0, 1]).max() > 1e-3     # the warp was estimated
