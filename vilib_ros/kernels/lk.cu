// Pyramidal inverse-compositional Lucas-Kanade with affine illumination (vilib / IROS 2020,
// "approximated simultaneous" variant: the Hessian is built once per feature and level from
// the template and the gain estimate at the start of that level, then reused every iteration).
//
// Thread mapping: ONE WARP PER FEATURE (blockDim = (32, LK_WARPS)); feature = blockIdx.x *
// LK_WARPS + threadIdx.y. A PxP patch (P = 16 on fine levels, 8 on coarse ones) is split so
// that lane l owns column l % P and rows l / P + k * (32 / P): a half-warp (16x16) or a quarter
// warp (8x8) reads one patch row of consecutive pixels. Each lane keeps its P*P/32 template
// pixels and gradients in registers; per iteration every lane accumulates its part of the
// 4-vector sum U r, then a butterfly (__shfl_xor_sync) reduction leaves the full sum in every
// lane, so all lanes compute the same update and stay converged/diverged together (no
// divergence inside the warp). Lane 0 writes the outputs.
//
// Parameters q = [tx, ty, alpha (gain), beta (offset)], model I(x + t) = (1 + alpha) T(x) + beta.
// Intensities are scaled to [0, 1] inside (offset / residual outputs are in 0..255 units).
// Coordinates: level-0 pixel centres at integers; level l coordinate x_l = (x_0 + 0.5) / 2^l - 0.5
// (the 2x2-mean pyramid). Level l image: width w0 >> l, height h0 >> l, pitch = width.
//
// Status codes (int8), shared with vilib_ros.frontend.tracker.TrackStatus.
#define LK_TRACKED 0
#define LK_LEFT_IMAGE 1
#define LK_DIVERGED 2
#define LK_NOT_CONVERGED 3
#define LK_INACTIVE 4

#define LK_MODE_TRANSLATION 0
#define LK_MODE_OFFSET 1
#define LK_MODE_GAIN 2
#define LK_MODE_GAIN_OFFSET 3

#ifndef LK_WARPS
#define LK_WARPS 4
#endif
// Oscillation stop (TrackerConfig.osc_eps / osc_growth; defaults = the config defaults): after an
// update dq that is not converged, if the translation update reverses and does not shrink
// (dq . dq_prev < 0 and |dq|^2 >= LK_OSC_GROWTH |dq_prev|^2), or nearly cancels the previous one
// (|dq_x + dq_prev_x| < LK_OSC_EPS and |dq_y + dq_prev_y| < LK_OSC_EPS, OpenCV's 'jumping back and
// forth'), half of dq is taken back (the middle of the jump) and the level ends as converged.
// 0 switches a test off.
#ifndef LK_OSC_EPS
#define LK_OSC_EPS 0.01f
#endif
#ifndef LK_OSC_GROWTH
#define LK_OSC_GROWTH 1.0f
#endif
#define FULL_MASK 0xffffffffu

typedef unsigned char uchar;

__device__ __forceinline__ float warp_sum(float v)
{
    // butterfly: after 5 xor-shuffle steps every lane holds the sum of all 32 lanes
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) v += __shfl_xor_sync(FULL_MASK, v, m);
    return v;
}

__device__ __forceinline__ float bilinear(const uchar* __restrict__ img, int pitch, float x, float y)
{
    const float fx = floorf(x), fy = floorf(y);
    const int x0 = (int)fx, y0 = (int)fy;
    const float ax = x - fx, ay = y - fy;
    const uchar* p = img + (size_t)y0 * pitch + x0;
    const float i00 = __ldg(p), i10 = __ldg(p + 1), i01 = __ldg(p + pitch), i11 = __ldg(p + pitch + 1);
    return (1.f - ay) * ((1.f - ax) * i00 + ax * i10) + ay * ((1.f - ax) * i01 + ax * i11);
}

// patch of half-extent `half` (pixels from centre to outermost sample) fits for bilinear reads
__device__ __forceinline__ bool fits(float x, float y, float half, int w, int h)
{
    return (x - half >= 0.f) && (y - half >= 0.f) && (x + half < (float)(w - 1)) && (y + half < (float)(h - 1));
}

// number of estimated parameters and slots of gain / offset in q
template <int MODE> struct ModeInfo;
template <> struct ModeInfo<LK_MODE_TRANSLATION> { enum { N = 2, GAIN = -1, OFF = -1 }; };
template <> struct ModeInfo<LK_MODE_OFFSET>      { enum { N = 3, GAIN = -1, OFF = 2 }; };
template <> struct ModeInfo<LK_MODE_GAIN>        { enum { N = 3, GAIN = 2, OFF = -1 }; };
template <> struct ModeInfo<LK_MODE_GAIN_OFFSET> { enum { N = 4, GAIN = 2, OFF = 3 }; };

// Inverse of an N x N symmetric positive definite matrix (the Gram matrix H) through its
// Cholesky factor; fully unrolled with compile-time indices so everything stays in registers.
// Every lane does it redundantly on identical data. Returns false if not SPD. (Single precision
// is enough: intensities are scaled to [0, 1], and the converged position is where sum U r = 0,
// which the accuracy of H^-1 does not move.)
template <int N>
__device__ __forceinline__ bool invert(const float (&A)[N][N], float (&Ai)[N][N])
{
    float L[N][N], Li[N][N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        float s = A[j][j];
#pragma unroll
        for (int k = 0; k < j; ++k) s -= L[j][k] * L[j][k];
        if (!(s > 0.f)) return false;
        L[j][j] = sqrtf(s);
        const float inv = 1.f / L[j][j];
#pragma unroll
        for (int i = j + 1; i < N; ++i) {
            float t = A[i][j];
#pragma unroll
            for (int k = 0; k < j; ++k) t -= L[i][k] * L[j][k];
            L[i][j] = t * inv;
        }
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
        Li[j][j] = 1.f / L[j][j];
#pragma unroll
        for (int i = j + 1; i < N; ++i) {
            float t = 0.f;
#pragma unroll
            for (int k = j; k < i; ++k) t -= L[i][k] * Li[k][j];
            Li[i][j] = t / L[i][i];
        }
    }
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < N; ++j) {
            float t = 0.f;
            const int k0 = i > j ? i : j;
#pragma unroll
            for (int k = k0; k < N; ++k) t += Li[k][i] * Li[k][j];
            Ai[i][j] = t;
        }
    return true;
}

// level result codes
#define LVL_CONVERGED 0
#define LVL_MAXITER 1
#define LVL_SKIPPED 2   // coarse level could not be used (patch outside, flat): estimate kept
#define LVL_LEFT 3
#define LVL_SINGULAR 4

// One pyramid level for one feature (whole warp). (x, y) = current estimate in level
// coordinates (updated), (tcx, tcy) = template centre in level coordinates.
template <int P, int MODE>
__device__ int track_level(const uchar* __restrict__ T, const uchar* __restrict__ I, int w, int h,
                           float tcx, float tcy, float& x, float& y, float& alpha, float& beta,
                           int max_iterations, float eps2, float min_eigen, float& residual, int& iters)
{
    typedef ModeInfo<MODE> MI;
    constexpr int NP = P * P / 32;       // pixels per lane
    constexpr int RSTEP = 32 / P;        // row step between a lane's pixels
    constexpr float HALF = 0.5f * (P - 1);
    const int lane = threadIdx.x;
    const int col = lane % P, row0 = lane / P;
    const float s255 = 1.f / 255.f;

    if (!fits(tcx, tcy, HALF + 1.f, w, h)) return LVL_LEFT;  // template patch (+gradient ring)

    // Every sample of a patch has the same sub-pixel fraction (the offsets from the centre are
    // integers + HALF), so the 4 bilinear weights are computed once per patch position.
    // Template values and central-difference gradients from bilinear samples:
    float tv[NP], gx[NP], gy[NP];
    {
        const float bx = tcx - HALF, by = tcy - HALF;
        const float fx = floorf(bx), fy = floorf(by);
        const float ax = bx - fx, ay = by - fy;
        const float w00 = (1.f - ax) * (1.f - ay), w10 = ax * (1.f - ay), w01 = (1.f - ax) * ay, w11 = ax * ay;
        const uchar* base = T + (size_t)((int)fy + row0) * w + (int)fx + col;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
            const uchar* p = base + (size_t)(k * RSTEP) * w;
            // 4x4 neighbourhood p[-w-1 .. 2w+2] covers the centre sample and its 4 neighbours
            const float c00 = __ldg(p), c10 = __ldg(p + 1), c01 = __ldg(p + w), c11 = __ldg(p + w + 1);
            const float l0 = __ldg(p - 1), l1 = __ldg(p + w - 1);          // column x-1
            const float r0 = __ldg(p + 2), r1 = __ldg(p + w + 2);          // column x+2
            const float u0 = __ldg(p - w), u1 = __ldg(p - w + 1);          // row y-1
            const float d0 = __ldg(p + 2 * w), d1 = __ldg(p + 2 * w + 1);  // row y+2
            const float centre = w00 * c00 + w10 * c10 + w01 * c01 + w11 * c11;
            const float left = w00 * l0 + w10 * c00 + w01 * l1 + w11 * c01;
            const float right = w00 * c10 + w10 * r0 + w01 * c11 + w11 * r1;
            const float up = w00 * u0 + w10 * u1 + w01 * c00 + w11 * c10;
            const float down = w00 * c01 + w10 * c11 + w01 * d0 + w11 * d1;
            tv[k] = centre * s255;
            gx[k] = 0.5f * (right - left) * s255;
            gy[k] = 0.5f * (down - up) * s255;
        }
    }
    // Hessian H = sum U U^T with U = [g gx, g gy, (T), (1)], g = 1 + alpha at level start
    const float g = (MODE == LK_MODE_OFFSET || MODE == LK_MODE_TRANSLATION) ? 1.f : 1.f + alpha;
    float hxx = 0, hxy = 0, hyy = 0, hxt = 0, hyt = 0, htt = 0, hx1 = 0, hy1 = 0, ht1 = 0;
#pragma unroll
    for (int k = 0; k < NP; ++k) {
        hxx += gx[k] * gx[k]; hxy += gx[k] * gy[k]; hyy += gy[k] * gy[k];
        hxt += gx[k] * tv[k]; hyt += gy[k] * tv[k]; htt += tv[k] * tv[k];
        hx1 += gx[k]; hy1 += gy[k]; ht1 += tv[k];
    }
    hxx = warp_sum(hxx); hxy = warp_sum(hxy); hyy = warp_sum(hyy);
    if (MI::GAIN >= 0) { hxt = warp_sum(hxt); hyt = warp_sum(hyt); htt = warp_sum(htt); }
    if (MI::OFF >= 0) { hx1 = warp_sum(hx1); hy1 = warp_sum(hy1); }
    if (MI::GAIN >= 0 && MI::OFF >= 0) ht1 = warp_sum(ht1);

    // flat-patch test: smallest eigenvalue of the gradient matrix per pixel
    {
        const float a = hxx / (P * P), b = hxy / (P * P), c = hyy / (P * P);
        const float lmin = 0.5f * (a + c - sqrtf((a - c) * (a - c) + 4.f * b * b));
        if (!(lmin >= min_eigen)) return LVL_SINGULAR;
    }
    float A[MI::N][MI::N], Hf[MI::N][MI::N];
    {
        const float gg = g;
        A[0][0] = gg * gg * hxx; A[0][1] = gg * gg * hxy; A[1][0] = A[0][1]; A[1][1] = gg * gg * hyy;
        if (MI::GAIN >= 0) {
            const int j = MI::GAIN;
            A[0][j] = gg * hxt; A[j][0] = A[0][j]; A[1][j] = gg * hyt; A[j][1] = A[1][j]; A[j][j] = htt;
        }
        if (MI::OFF >= 0) {
            const int j = MI::OFF;
            A[0][j] = gg * hx1; A[j][0] = A[0][j]; A[1][j] = gg * hy1; A[j][1] = A[1][j]; A[j][j] = (float)(P * P);
        }
        if (MI::GAIN >= 0 && MI::OFF >= 0) { A[MI::GAIN][MI::OFF] = ht1; A[MI::OFF][MI::GAIN] = ht1; }
    }
    if (!invert<MI::N>(A, Hf)) return LVL_SINGULAR;

    const float x_start = x, y_start = y;
    // mean |r| of the latest iteration: each lane keeps its part, the warp sum is taken once
    // when the level ends (not every iteration)
    float ra_lane = 0.f;
    int done = 0;
    float px = 0.f, py = 0.f;   // previous translation update
    int code = LVL_MAXITER;
    for (int it = 0; it < max_iterations; ++it) {
        if (!fits(x, y, HALF, w, h)) { x = x_start; y = y_start; code = LVL_LEFT; break; }
        const float ga = 1.f + alpha;
        float bx = 0, by = 0, bt = 0, b1 = 0, ra = 0;
        const float qx = x - HALF, qy = y - HALF;
        const float fx = floorf(qx), fy = floorf(qy);
        const float ax = qx - fx, ay = qy - fy;
        const float w00 = (1.f - ax) * (1.f - ay) * s255, w10 = ax * (1.f - ay) * s255;
        const float w01 = (1.f - ax) * ay * s255, w11 = ax * ay * s255;
        const uchar* base = I + (size_t)((int)fy + row0) * w + (int)fx + col;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
            const uchar* p = base + (size_t)(k * RSTEP) * w;
            const float iv = w00 * __ldg(p) + w10 * __ldg(p + 1) + w01 * __ldg(p + w) + w11 * __ldg(p + w + 1);
            const float r = iv - ga * tv[k] - beta;
            bx += gx[k] * r; by += gy[k] * r; bt += tv[k] * r; b1 += r; ra += fabsf(r);
        }
        bx = warp_sum(bx) * g; by = warp_sum(by) * g;
        if (MI::GAIN >= 0) bt = warp_sum(bt);
        if (MI::OFF >= 0) b1 = warp_sum(b1);
        ra_lane = ra;
        float b[MI::N];
        b[0] = bx; b[1] = by;
        if (MI::GAIN >= 0) b[MI::GAIN] = bt;
        if (MI::OFF >= 0) b[MI::OFF] = b1;
        float dq[MI::N];
#pragma unroll
        for (int i = 0; i < MI::N; ++i) {
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < MI::N; ++j) s += Hf[i][j] * b[j];
            dq[i] = s;
        }
        x -= dq[0];
        y -= dq[1];
        if (MI::GAIN >= 0) alpha += dq[MI::GAIN];
        if (MI::OFF >= 0) beta += dq[MI::OFF];
        ++iters;
        ++done;
        const float d2 = dq[0] * dq[0] + dq[1] * dq[1];
        if (d2 < eps2) { code = LVL_CONVERGED; break; }
        if (it > 0) {
            const bool cancel = LK_OSC_EPS > 0.f && fabsf(dq[0] + px) < LK_OSC_EPS && fabsf(dq[1] + py) < LK_OSC_EPS;
            const bool grow = LK_OSC_GROWTH > 0.f && dq[0] * px + dq[1] * py < 0.f &&
                              d2 >= LK_OSC_GROWTH * (px * px + py * py);
            if (cancel || grow) {   // jumping back and forth: go to the middle, level done
                x += 0.5f * dq[0];
                y += 0.5f * dq[1];
                if (MI::GAIN >= 0) alpha -= 0.5f * dq[MI::GAIN];
                if (MI::OFF >= 0) beta -= 0.5f * dq[MI::OFF];
                code = LVL_CONVERGED;
                break;
            }
        }
        px = dq[0];
        py = dq[1];
    }
    if (done > 0) residual = warp_sum(ra_lane) * (255.f / (P * P));   // warp-uniform
    return code;
}

// The whole pyramid for one feature (whole warp): template centre `tp` (level 0), initial guess
// `p0` (level 0). Returns the status; (x, y) = level-0 position, alpha/beta the illumination,
// residual the final mean |r| (0..255), iters the iterations over all levels (warp-uniform).
template <int MODE>
__device__ __forceinline__ int lk_point(const unsigned long long* __restrict__ tmpl_levels,
                                        const unsigned long long* __restrict__ img_levels,
                                        int w0, int h0, int n_levels, int patch16_mask, float2 tp, float2 p0,
                                        int max_iterations, float eps2, float min_eigen, float max_residual,
                                        float& x, float& y, float& alpha, float& beta, float& residual, int& iters)
{
    alpha = 0.f; beta = 0.f; residual = 0.f;
    iters = 0;
    int status = LK_NOT_CONVERGED;
    // estimate in level-(L-1) coordinates
    const float top = 1.f / (float)(1 << (n_levels - 1));
    x = (p0.x + 0.5f) * top - 0.5f;
    y = (p0.y + 0.5f) * top - 0.5f;
    if (!(isfinite(p0.x) && isfinite(p0.y) && isfinite(tp.x) && isfinite(tp.y))) return LK_DIVERGED;
    for (int l = n_levels - 1; l >= 0; --l) {
        const float s = 1.f / (float)(1 << l);
        const int w = w0 >> l, h = h0 >> l;
        const uchar* T = (const uchar*)tmpl_levels[l];
        const uchar* I = (const uchar*)img_levels[l];
        const float tcx = (tp.x + 0.5f) * s - 0.5f, tcy = (tp.y + 0.5f) * s - 0.5f;
        int r;
        if ((patch16_mask >> l) & 1)
            r = track_level<16, MODE>(T, I, w, h, tcx, tcy, x, y, alpha, beta, max_iterations, eps2, min_eigen, residual, iters);
        else
            r = track_level<8, MODE>(T, I, w, h, tcx, tcy, x, y, alpha, beta, max_iterations, eps2, min_eigen, residual, iters);
        if (l == 0) {
            status = (r == LVL_CONVERGED) ? LK_TRACKED
                   : (r == LVL_MAXITER) ? LK_NOT_CONVERGED
                   : (r == LVL_LEFT) ? LK_LEFT_IMAGE : LK_DIVERGED;
        } else {
            x = 2.f * x + 0.5f;           // level l -> level l-1
            y = 2.f * y + 0.5f;
        }
    }
    if (!(isfinite(x) && isfinite(y) && isfinite(alpha) && isfinite(beta)) ||
        !(1.f + alpha > 0.2f && 1.f + alpha < 5.f)) {
        status = LK_DIVERGED;
    } else if ((status == LK_TRACKED || status == LK_NOT_CONVERGED) && max_residual > 0.f && residual > max_residual) {
        status = LK_DIVERGED;
    }
    return status;
}

template <int MODE>
__device__ void lk_track_impl(const unsigned long long* __restrict__ tmpl_levels,
                              const unsigned long long* __restrict__ img_levels,
                              int w0, int h0, int n_levels, int patch16_mask,
                              const float2* __restrict__ tmpl_pos, const float2* __restrict__ pred,
                              const signed char* __restrict__ active, int active_value, int n,
                              int max_iterations, float eps2, float min_eigen, float max_residual,
                              float2* __restrict__ out_pos, signed char* __restrict__ out_status,
                              float* __restrict__ out_residual, float* __restrict__ out_gain,
                              float* __restrict__ out_offset, int* __restrict__ out_iters)
{
    const int f = blockIdx.x * LK_WARPS + threadIdx.y;
    if (f >= n) return;                       // warp-uniform
    const int lane = threadIdx.x;
    const float2 p0 = pred[f];
    if (active != nullptr && (int)active[f] != active_value) {
        if (lane == 0) {
            out_pos[f] = p0; out_status[f] = LK_INACTIVE; out_residual[f] = 0.f;
            out_gain[f] = 1.f; out_offset[f] = 0.f; out_iters[f] = 0;
        }
        return;
    }
    float x, y, alpha, beta, residual;
    int iters;
    const int status = lk_point<MODE>(tmpl_levels, img_levels, w0, h0, n_levels, patch16_mask, tmpl_pos[f], p0,
                                      max_iterations, eps2, min_eigen, max_residual, x, y, alpha, beta, residual, iters);
    if (lane == 0) {
        out_pos[f] = make_float2(x, y);
        out_status[f] = (signed char)status;
        out_residual[f] = residual;
        out_gain[f] = 1.f + alpha;
        out_offset[f] = beta * 255.f;
        out_iters[f] = iters;
    }
}

#define LK_ARGS                                                                                   \
    const unsigned long long* __restrict__ tmpl_levels, const unsigned long long* __restrict__ img_levels, \
    int w0, int h0, int n_levels, int patch16_mask, const float2* __restrict__ tmpl_pos,          \
    const float2* __restrict__ pred, const signed char* __restrict__ active, int active_value, int n, \
    int max_iterations, float eps2, float min_eigen, float max_residual, float2* __restrict__ out_pos, \
    signed char* __restrict__ out_status, float* __restrict__ out_residual, float* __restrict__ out_gain, \
    float* __restrict__ out_offset, int* __restrict__ out_iters
#define LK_PASS tmpl_levels, img_levels, w0, h0, n_levels, patch16_mask, tmpl_pos, pred, active, \
    active_value, n, max_iterations, eps2, min_eigen, max_residual, out_pos, out_status, out_residual, \
    out_gain, out_offset, out_iters

// One kernel per photometric mode (the mode is a template parameter of the implementation).
#define LK_KERNELS(PREFIX, IMPL, ARGS, PASS)                                                       \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_translation(ARGS)        \
    { IMPL<LK_MODE_TRANSLATION>(PASS); }                                                          \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_offset(ARGS)             \
    { IMPL<LK_MODE_OFFSET>(PASS); }                                                               \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_gain(ARGS)               \
    { IMPL<LK_MODE_GAIN>(PASS); }                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_gain_offset(ARGS)        \
    { IMPL<LK_MODE_GAIN_OFFSET>(PASS); }

LK_KERNELS(lk_track, lk_track_impl, LK_ARGS, LK_PASS)

// ---------------------------------------------------------------------------------------------
// The frontend's LK launches (vilib_ros.frontend.gpu_pipeline), on the device-side track table:
// the number of slots comes from device memory (`count`), the initial guess is made here (the
// rotation-only prediction of vilib_ros.frontend.imu_prediction.predict_points where M[9] != 0:
// distort(M [xy, 1]) with `cam_pred`, else `guess`), and lane 0 undistorts the result with
// `cam_out` (NaN unless tracked). Three uses, one kernel:
//   temporal: previous -> current frame of every live track (M = R_c0_c1^T, may be off);
//   backward: current -> previous frame of the tracked ones (`gate` = forward status; the
//             forward-backward check), no prediction, no undistortion;
//   stereo:   left -> right image of every live track (M = R_right_left, cam_pred = cam_out = right
//             camera) with the epipolar check (`epi` = E_rl row-major, threshold in right-image
//             pixels, 0 = off) against the left `xy`: rejected and untracked slots get NaN, and
//             the matched / rejected counters are incremented.
// Thread mapping as lk_track_*: one warp per slot.
#include "camera.cuh"

template <int MODE>
__device__ void lk_frontend_impl(const unsigned long long* __restrict__ tmpl_levels,
                                 const unsigned long long* __restrict__ img_levels,
                                 int w0, int h0, int n_levels, int patch16_mask,
                                 const long long* __restrict__ count, const float2* __restrict__ tmpl_pos,
                                 const float2* __restrict__ guess, const float2* __restrict__ xy,
                                 const float* __restrict__ M, const float* __restrict__ cam_pred,
                                 const float* __restrict__ cam_out, const signed char* __restrict__ gate,
                                 int max_iterations, float eps2, float min_eigen, float max_residual,
                                 const float* __restrict__ epi, float epi_threshold,
                                 unsigned long long* __restrict__ n_matched, unsigned long long* __restrict__ n_rejected,
                                 float2* __restrict__ out_pos, signed char* __restrict__ out_status,
                                 float2* __restrict__ out_xy, int* __restrict__ out_iters)
{
    const int f = blockIdx.x * LK_WARPS + threadIdx.y;
    if (f >= (int)*count) return;             // warp-uniform
    const int lane = threadIdx.x;
    const float qnan = __int_as_float(0x7fc00000);
    float2 p0 = guess[f];
    if (gate != nullptr && gate[f] != LK_TRACKED) {
        if (lane == 0) {
            out_pos[f] = p0; out_status[f] = LK_INACTIVE;
            if (out_xy != nullptr) out_xy[f] = make_float2(qnan, qnan);
            if (out_iters != nullptr) out_iters[f] = 0;
        }
        return;
    }
    if (M != nullptr && M[9] != 0.f) {
        const float2 q = xy[f];
        const float X = M[0] * q.x + M[1] * q.y + M[2];
        const float Y = M[3] * q.x + M[4] * q.y + M[5];
        const float Z = M[6] * q.x + M[7] * q.y + M[8];
        if (Z > 1e-6f) p0 = distort_norm(X / Z, Y / Z, cam_pred);
    }
    float x, y, alpha, beta, residual;
    int iters;
    const int status = lk_point<MODE>(tmpl_levels, img_levels, w0, h0, n_levels, patch16_mask, tmpl_pos[f], p0,
                                      max_iterations, eps2, min_eigen, max_residual, x, y, alpha, beta, residual, iters);
    if (lane != 0) return;
    float2 pos = make_float2(x, y);
    float2 q = make_float2(qnan, qnan);
    if (cam_out != nullptr && status == LK_TRACKED) q = undistort_px(x, y, cam_out);
    if (epi != nullptr) {
        bool good = status == LK_TRACKED && isfinite(q.x) && isfinite(q.y);
        if (good && epi_threshold > 0.f) {
            const float2 l = xy[f];
            const float a = epi[0] * l.x + epi[1] * l.y + epi[2];
            const float b = epi[3] * l.x + epi[4] * l.y + epi[5];
            const float c = epi[6] * l.x + epi[7] * l.y + epi[8];
            const float dist = fabsf(q.x * a + q.y * b + c) / (sqrtf(a * a + b * b) + 1e-12f) * cam_out[0];
            good = dist < epi_threshold;
        }
        if (good) {
            atomicAdd(n_matched, 1ull);
        } else {
            if (status == LK_TRACKED) atomicAdd(n_rejected, 1ull);
            pos = make_float2(qnan, qnan);
            q = pos;
        }
    }
    out_pos[f] = pos;
    out_status[f] = (signed char)status;
    if (out_xy != nullptr) out_xy[f] = q;
    if (out_iters != nullptr) out_iters[f] = iters;
}

#define LKF_ARGS                                                                                  \
    const unsigned long long* __restrict__ tmpl_levels, const unsigned long long* __restrict__ img_levels, \
    int w0, int h0, int n_levels, int patch16_mask, const long long* __restrict__ count,         \
    const float2* __restrict__ tmpl_pos, const float2* __restrict__ guess, const float2* __restrict__ xy, \
    const float* __restrict__ M, const float* __restrict__ cam_pred, const float* __restrict__ cam_out, \
    const signed char* __restrict__ gate, int max_iterations, float eps2, float min_eigen,       \
    float max_residual, const float* __restrict__ epi, float epi_threshold,                       \
    unsigned long long* __restrict__ n_matched, unsigned long long* __restrict__ n_rejected,      \
    float2* __restrict__ out_pos, signed char* __restrict__ out_status, float2* __restrict__ out_xy, \
    int* __restrict__ out_iters
#define LKF_PASS tmpl_levels, img_levels, w0, h0, n_levels, patch16_mask, count, tmpl_pos, guess, xy, M, \
    cam_pred, cam_out, gate, max_iterations, eps2, min_eigen, max_residual, epi, epi_threshold, n_matched, \
    n_rejected, out_pos, out_status, out_xy, out_iters

LK_KERNELS(lk_frontend, lk_frontend_impl, LKF_ARGS, LKF_PASS)
