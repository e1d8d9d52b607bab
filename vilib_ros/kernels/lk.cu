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
// divergence inside the warp). Lane 0 writes the outputs. The stored-template kernels
// (lk_template_*) can give a feature a group of LK_FEATURE_WARPS warps instead (below, LkGroup).
//
// Parameters q = [tx, ty, alpha (gain), beta (offset)], model I(x + t) = (1 + alpha) T(x) + beta.
// Intensities are scaled to [0, 1] inside (offset / residual outputs are in 0..255 units).
// Coordinates: level-0 pixel centres at integers; level l coordinate x_l = (x_0 + 0.5) / 2^l - 0.5
// (the 2x2-mean pyramid). Level l image: width w0 >> l, height h0 >> l, pitch = width.
//
// Status codes (int8), shared with vilib_ros.types.TrackStatus.
#include "pdl.cuh"
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

// Warp groups (LK_FEATURE_WARPS = G > 1, lk_template_* only): G WARPS PER FEATURE (blockDim =
// (32, LK_WARPS), LK_WARPS a multiple of G; feature = blockIdx.x * LK_WARPS / G + threadIdx.y / G,
// part = threadIdx.y % G). On the 16x16 levels (SPLIT) warp `part` owns rows k = part * 8 / G ..
// (part + 1) * 8 / G - 1 of each lane's 8 (lane l: column l % 16, rows l / 16 + 2 k), so every
// sample loop is G times shorter; each sum is a butterfly in the warp, then one exchange among the
// group's warps through shared memory (group_sum). Every warp adds the parts in the same order,
// so all hold bit-identical state and take the same branches; the 8x8 levels run in every warp
// whole (identical work, no exchange). Part 0's lane 0 writes the outputs.
#ifndef LK_FEATURE_WARPS
#define LK_FEATURE_WARPS 1
#endif
#define LK_PX 40   // values of one exchange at most (the affine Hessian: 36 + 3)
struct LkGroup {
    float* buf;    // shared: [2 alternating buffers][LK_FEATURE_WARPS parts][LK_PX]
    int part;      // 0 .. LK_FEATURE_WARPS - 1
    int bar;       // named barrier of the group (1..)
    int phase;     // the buffer of the next exchange
};

// The stored template bank (vilib_ros.frontend.reference.templates, lk_extract_<mode>): per bank row and
// level TPL_STRIDE floats, the (P + 2) x (P + 2) samples (TPL_AREA) then the level's solver,
// which depends on the template alone and so is made once when the template is taken instead of
// on every frame's LK chain: the flat-patch measure and the inverses of the Gauss-Newton matrices
// at gain g = 1. At gain g, H(g) = D H(1) D with D = diag(g on the geometric parameters, 1 on
// gain / offset), so H(g)^-1 = D^-1 H(1)^-1 D^-1 (solver_scale).
#define TPL_AREA 324           // vilib_ros.frontend.config.PATCH_AREA: (16 + 2)^2 floats per level
#ifndef TPL_SOLVER
#define TPL_SOLVER 84          // the solver's floats (vilib_ros.frontend.config.SOLVER_AREA)
#endif
#define TPL_STRIDE (TPL_AREA + TPL_SOLVER)   // vilib_ros.frontend.config.BANK_STRIDE
#define SLV_LMIN 0             // smallest eigenvalue of the gradient matrix per pixel (flat-patch test)
#define SLV_FAIL 1             // 1: the translation (+ illumination) matrix Hs is not SPD; + 2: the affine H
#define SLV_HS 4               // Hs(1)^-1, NS x NS row-major (solve_level's matrix; H's last NS rows / columns)
#define SLV_H 20               // H(1)^-1, NA x NA row-major (16x16 levels only)

// Samples per lane of a P x P patch: NP in a whole warp, NL in each warp of a group of G on SPLIT
// levels.
template <int P, int G> struct Lay {
    enum { NP = P * P / 32, SPLIT = (G > 1 && P == 16) ? 1 : 0, NL = SPLIT ? NP / G : NP };
};

#if LK_FEATURE_WARPS > 1
#ifndef LK_GROUP_BARRIER   // (the host build of the tests brings its own)
#define LK_GROUP_BARRIER(id) asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(32 * LK_FEATURE_WARPS) : "memory")
#endif
// The group's sums of N warp-uniform values: lane 0 of each warp stores its warp's, a barrier over
// the group's threads, every lane adds parts 0, 1, ... in that order. The two buffers alternate,
// so one barrier per exchange suffices (a warp writes a buffer again only after every other warp
// of the group passed the next barrier, i.e. after it read this one).
template <int N>
__device__ __forceinline__ void group_sum(float (&v)[N], LkGroup& gr)
{
    static_assert(N <= LK_PX, "group exchange too large");
    constexpr int G = LK_FEATURE_WARPS;
    float* b = gr.buf + gr.phase * (G * LK_PX);
    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) b[gr.part * LK_PX + i] = v[i];
    }
    LK_GROUP_BARRIER(gr.bar);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float t = b[i];
#pragma unroll
        for (int g = 1; g < G; ++g) t += b[g * LK_PX + i];
        v[i] = t;
    }
    gr.phase ^= 1;
}
#define GROUP_SUM(SPLIT, V, GR) do { if constexpr (SPLIT) group_sum(V, GR); } while (0)
#else
#define GROUP_SUM(SPLIT, V, GR) do { } while (0)
#endif

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

// The template of one level for one feature (whole warp): lane l holds the values tv and the
// central-difference gradients gx, gy (0..1 units) of its NP = P*P/32 pixels (column l % P, rows
// l / P + k * (32 / P)).
//
// From the template image T at the template centre (tcx, tcy) (level coordinates; the patch and
// its gradient ring must fit): every sample of a patch has the same sub-pixel fraction (the
// offsets from the centre are integers + HALF), so the 4 bilinear weights are computed once.
template <int P, int G = 1>
__device__ __forceinline__ void template_from_image(const uchar* __restrict__ T, int w, float tcx, float tcy,
                                                    float (&tv)[Lay<P, G>::NL], float (&gx)[Lay<P, G>::NL],
                                                    float (&gy)[Lay<P, G>::NL], int k0 = 0)
{
    constexpr int NP = Lay<P, G>::NL;   // this warp's samples: rows k0 .. k0 + NP - 1
    constexpr int RSTEP = 32 / P;
    constexpr float HALF = 0.5f * (P - 1);
    const int lane = threadIdx.x;
    const int col = lane % P, row0 = lane / P;
    const float s255 = 1.f / 255.f;
    const float bx = tcx - HALF, by = tcy - HALF;
    const float fx = floorf(bx), fy = floorf(by);
    const float ax = bx - fx, ay = by - fy;
    const float w00 = (1.f - ax) * (1.f - ay), w10 = ax * (1.f - ay), w01 = (1.f - ax) * ay, w11 = ax * ay;
    const uchar* base = T + (size_t)((int)fy + row0 + k0 * RSTEP) * w + (int)fx + col;
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

// From a stored template level S (vilib_ros.frontend.reference.templates: the (P + 2) x (P + 2) bilinear
// samples 0..255 around the template position, row stride P + 2; written by lk_extract with the
// arithmetic of template_from_image, so both give the same values).
template <int P, int G = 1>
__device__ __forceinline__ void template_from_bank(const float* __restrict__ S, float (&tv)[Lay<P, G>::NL],
                                                   float (&gx)[Lay<P, G>::NL], float (&gy)[Lay<P, G>::NL],
                                                   int k0 = 0)
{
    constexpr int NP = Lay<P, G>::NL;
    constexpr int RSTEP = 32 / P;
    constexpr int SW = P + 2;
    const int lane = threadIdx.x;
    const int col = lane % P, row0 = lane / P;
    const float s255 = 1.f / 255.f;
#pragma unroll
    for (int k = 0; k < NP; ++k) {
        const float* p = S + (row0 + (k0 + k) * RSTEP + 1) * SW + col + 1;
        tv[k] = p[0] * s255;
        gx[k] = 0.5f * (p[1] - p[-1]) * s255;
        gy[k] = 0.5f * (p[SW] - p[-SW]) * s255;
    }
}

// H(g)^-1 from a stored H(1)^-1 (N x N row-major at m; the first NG parameters geometric):
// out[i][j] = m[i][j] / (d_i d_j), d = g on the geometric ones, 1 on gain / offset.
template <int N, int NG>
__device__ __forceinline__ void solver_scale(const float* __restrict__ m, float ig, float (&out)[N][N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < N; ++j) out[i][j] = m[i * N + j] * ((i < NG) ? ig : 1.f) * ((j < NG) ? ig : 1.f);
}

// Gauss-Newton iterations of one level for one feature (whole warp) on the template in tv / gx /
// gy (translation warp). (x, y) = current estimate in level coordinates (updated). PRE: the
// level's solver `sv` (stored with the template) instead of the matrix built and inverted here.
template <int P, int MODE, int G = 1, bool PRE = false>
__device__ int solve_level(const uchar* __restrict__ I, int w, int h, const float (&tv)[Lay<P, G>::NL],
                           const float (&gx)[Lay<P, G>::NL], const float (&gy)[Lay<P, G>::NL], float& x,
                           float& y, float& alpha, float& beta, int max_iterations, float eps2, float min_eigen,
                           float& residual, int& iters, LkGroup& gr, int k0 = 0, const float* __restrict__ sv = nullptr)
{
    typedef ModeInfo<MODE> MI;
    constexpr bool SPLIT = Lay<P, G>::SPLIT;
    constexpr int NP = Lay<P, G>::NL; // pixels per lane (of this warp: rows k0 ..)
    constexpr int RSTEP = 32 / P;        // row step between a lane's pixels
    constexpr float HALF = 0.5f * (P - 1);
    const int lane = threadIdx.x;
    const int col = lane % P, row0 = lane / P;
    const float s255 = 1.f / 255.f;

    // Hessian H = sum U U^T with U = [g gx, g gy, (T), (1)], g = 1 + alpha at level start
    const float g = (MODE == LK_MODE_OFFSET || MODE == LK_MODE_TRANSLATION) ? 1.f : 1.f + alpha;
    float Hf[MI::N][MI::N];
    if constexpr (PRE) {
        if (!(sv[SLV_LMIN] >= min_eigen) || ((int)sv[SLV_FAIL] & 1)) return LVL_SINGULAR;
        solver_scale<MI::N, 2>(sv + SLV_HS, 1.f / g, Hf);
    } else {
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
    if constexpr (SPLIT) {
        float v[9] = {hxx, hxy, hyy, hxt, hyt, htt, hx1, hy1, ht1};
        GROUP_SUM(SPLIT, v, gr);
        hxx = v[0]; hxy = v[1]; hyy = v[2]; hxt = v[3]; hyt = v[4]; htt = v[5]; hx1 = v[6]; hy1 = v[7]; ht1 = v[8];
    }

    // flat-patch test: smallest eigenvalue of the gradient matrix per pixel
    {
        const float a = hxx / (P * P), b = hxy / (P * P), c = hyy / (P * P);
        const float lmin = 0.5f * (a + c - sqrtf((a - c) * (a - c) + 4.f * b * b));
        if (!(lmin >= min_eigen)) return LVL_SINGULAR;
    }
    float A[MI::N][MI::N];
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
    }

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
        const uchar* base = I + (size_t)((int)fy + row0 + k0 * RSTEP) * w + (int)fx + col;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
            const uchar* p = base + (size_t)(k * RSTEP) * w;
            const float iv = w00 * __ldg(p) + w10 * __ldg(p + 1) + w01 * __ldg(p + w) + w11 * __ldg(p + w + 1);
            const float r = iv - ga * tv[k] - beta;
            bx += gx[k] * r; by += gy[k] * r; bt += tv[k] * r; b1 += r; ra += fabsf(r);
        }
        bx = warp_sum(bx); by = warp_sum(by);
        if (MI::GAIN >= 0) bt = warp_sum(bt);
        if (MI::OFF >= 0) b1 = warp_sum(b1);
        if constexpr (SPLIT) {
            float v[4] = {bx, by, bt, b1};
            GROUP_SUM(SPLIT, v, gr);
            bx = v[0]; by = v[1]; bt = v[2]; b1 = v[3];
        }
        bx *= g; by *= g;
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
    if (done > 0) {   // warp-uniform (group-uniform)
        float v[1] = {warp_sum(ra_lane)};
        GROUP_SUM(SPLIT, v, gr);
        residual = v[0] * (255.f / (P * P));
    }
    return code;
}

// One pyramid level for one feature (whole warp), the template taken from the image T at the
// template centre (tcx, tcy) (level coordinates).
template <int P, int MODE, int G = 1>
__device__ __forceinline__ int track_level(const uchar* __restrict__ T, const uchar* __restrict__ I, int w, int h,
                                           float tcx, float tcy, float& x, float& y, float& alpha, float& beta,
                                           int max_iterations, float eps2, float min_eigen, float& residual,
                                           int& iters, LkGroup& gr)
{
    constexpr float HALF = 0.5f * (P - 1);
    constexpr int NL = Lay<P, G>::NL;
    const int k0 = Lay<P, G>::SPLIT ? gr.part * NL : 0;
    if (!fits(tcx, tcy, HALF + 1.f, w, h)) return LVL_LEFT;  // template patch (+gradient ring)
    float tv[NL], gx[NL], gy[NL];
    template_from_image<P, G>(T, w, tcx, tcy, tv, gx, gy, k0);
    return solve_level<P, MODE, G>(I, w, h, tv, gx, gy, x, y, alpha, beta, max_iterations, eps2, min_eigen,
                                      residual, iters, gr, k0);
}

// The whole pyramid for one feature (whole warp): template centre `tp` (level 0), initial guess
// `p0` (level 0). Returns the status; (x, y) = level-0 position, alpha/beta the illumination,
// residual the final mean |r| (0..255), iters the iterations over all levels (warp-uniform).
template <int MODE, int G = 1>
__device__ __forceinline__ int lk_point(const unsigned long long* __restrict__ tmpl_levels,
                                        const unsigned long long* __restrict__ img_levels,
                                        int w0, int h0, int n_levels, int patch16_mask, float2 tp, float2 p0,
                                        int max_iterations, float eps2, float min_eigen, float max_residual,
                                        float& x, float& y, float& alpha, float& beta, float& residual, int& iters,
                                        LkGroup& gr)
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
            r = track_level<16, MODE, G>(T, I, w, h, tcx, tcy, x, y, alpha, beta, max_iterations, eps2, min_eigen,
                                            residual, iters, gr);
        else
            r = track_level<8, MODE, G>(T, I, w, h, tcx, tcy, x, y, alpha, beta, max_iterations, eps2, min_eigen,
                                           residual, iters, gr);
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

// The solver of one affine level (whole warp, or group of G on SPLIT levels; sums in the same
// order in every warp): H = sum U U^T (U as solve_level_affine's, at gain g), the inverse Hsi of
// its translation (+ illumination) block Hs = H[4:, 4:] (which is solve_level's matrix) and, on
// 16x16 levels, the inverse Hi of H. Returns the flat-patch measure (the smallest eigenvalue of the
// gradient matrix per pixel); `fail` bit 0: Hs not SPD, bit 1: H not SPD.
template <int MODE> struct AffInfo {
    typedef ModeInfo<MODE> MI;
    enum { GS = MI::GAIN >= 0 ? 6 : -1, OS = MI::OFF >= 0 ? 6 + (MI::GAIN >= 0 ? 1 : 0) : -1,
           NA = 6 + (GS >= 0) + (OS >= 0), NS = NA - 4 };
};
#define AFFINE_PATCH 16
template <int P, int MODE, int G>
__device__ __forceinline__ float affine_solver(const float (&tv)[Lay<P, G>::NL], const float (&gx)[Lay<P, G>::NL],
                                               const float (&gy)[Lay<P, G>::NL], float g, int k0, LkGroup& gr,
                                               float (&Hsi)[AffInfo<MODE>::NS][AffInfo<MODE>::NS],
                                               float (&Hi)[AffInfo<MODE>::NA][AffInfo<MODE>::NA], int& fail)
{
    constexpr bool SPLIT = Lay<P, G>::SPLIT;
    constexpr int NP = Lay<P, G>::NL;
    constexpr int RSTEP = 32 / P;
    constexpr float HALF = 0.5f * (P - 1);
    constexpr int GS = AffInfo<MODE>::GS, OS = AffInfo<MODE>::OS, NA = AffInfo<MODE>::NA, NS = AffInfo<MODE>::NS;
    constexpr bool AFF = P == AFFINE_PATCH;
    const int lane = threadIdx.x;
    const float ucol = (float)(lane % P) - HALF;
    const int row0 = lane / P;
    float H[NA][NA];
    float sxx = 0.f, sxy = 0.f, syy = 0.f;
    {
        float hl[NA][NA];
#pragma unroll
        for (int i = 0; i < NA; ++i)
#pragma unroll
            for (int j = 0; j < NA; ++j) hl[i][j] = 0.f;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
            const float uy = (float)(row0 + (k0 + k) * RSTEP) - HALF;
            const float a = g * gx[k], b = g * gy[k];
            float U[NA];
            U[0] = a * ucol; U[1] = a * uy; U[2] = b * ucol; U[3] = b * uy; U[4] = a; U[5] = b;
            if (GS >= 0) U[GS] = tv[k];
            if (OS >= 0) U[OS] = 1.f;
#pragma unroll
            for (int i = 0; i < NA; ++i)
#pragma unroll
                for (int j = i; j < NA; ++j) hl[i][j] += U[i] * U[j];
            sxx += gx[k] * gx[k]; sxy += gx[k] * gy[k]; syy += gy[k] * gy[k];
        }
#pragma unroll
        for (int i = 0; i < NA; ++i)
#pragma unroll
            for (int j = i; j < NA; ++j) { H[i][j] = warp_sum(hl[i][j]); H[j][i] = H[i][j]; }
        sxx = warp_sum(sxx); sxy = warp_sum(sxy); syy = warp_sum(syy);
        if constexpr (SPLIT) {
            float v[NA * (NA + 1) / 2 + 3];
            int q = 0;
#pragma unroll
            for (int i = 0; i < NA; ++i)
#pragma unroll
                for (int j = i; j < NA; ++j) v[q++] = H[i][j];
            v[q] = sxx; v[q + 1] = sxy; v[q + 2] = syy;
            GROUP_SUM(SPLIT, v, gr);
            q = 0;
#pragma unroll
            for (int i = 0; i < NA; ++i)
#pragma unroll
                for (int j = i; j < NA; ++j) { H[i][j] = v[q++]; H[j][i] = H[i][j]; }
            sxx = v[q]; sxy = v[q + 1]; syy = v[q + 2];
        }
    }
    // flat-patch measure, as in solve_level
    const float fa = sxx / (P * P), fb = sxy / (P * P), fc = syy / (P * P);
    const float lmin = 0.5f * (fa + fc - sqrtf((fa - fc) * (fa - fc) + 4.f * fb * fb));
    float Hs[NS][NS];
#pragma unroll
    for (int i = 0; i < NS; ++i)
#pragma unroll
        for (int j = 0; j < NS; ++j) Hs[i][j] = H[4 + i][4 + j];
    fail = invert<NS>(Hs, Hsi) ? 0 : 1;
    if (AFF && !invert<NA>(H, Hi)) fail |= 2;
    return lmin;
}

// Gauss-Newton iterations of one level for one feature (whole warp) with an affine warp against
// the template in tv / gx / gy (vilib_ros.frontend.reference.templates._track_affine): the template sample
// at offset u from the centre is compared with the image at x + A u (A = a11 a12 a21 a22, kept
// across levels). Parameters [d11, d12, d21, d22, dtx, dty, (dalpha), (dbeta)], U = [g gx ux,
// g gx uy, g gy ux, g gy uy, g gx, g gy, (T), (1)], H = sum U U^T once per level (g = 1 + alpha
// at the level's start); inverse compositional: the warp is composed with the inverse step.
// First a translation phase (the sub-block of [dtx, dty, (dalpha), (dbeta)], A held), then on
// 16 x 16 levels (AFFINE_PATCH) an affine phase; the oscillation test and the convergence test
// on the position's step. Each lane samples the image at its own warped positions (its own
// bilinear weights); the 8 sums of U r and the Hessian's entries by butterfly, so every lane
// holds the same state (warp-uniform phases and stops).
template <int P, int MODE, int G = 1, bool PRE = false>
__device__ int solve_level_affine(const uchar* __restrict__ I, int w, int h, const float (&tv)[Lay<P, G>::NL],
                                  const float (&gx)[Lay<P, G>::NL], const float (&gy)[Lay<P, G>::NL], float& x,
                                  float& y, float (&A)[4], float& alpha, float& beta, int max_iterations, float eps2,
                                  float min_eigen, float& residual, int& iters, LkGroup& gr, int k0 = 0,
                                  const float* __restrict__ sv = nullptr)
{
    typedef ModeInfo<MODE> MI;
    constexpr bool SPLIT = Lay<P, G>::SPLIT;
    constexpr int NP = Lay<P, G>::NL;   // this warp's samples: rows k0 ..
    constexpr int RSTEP = 32 / P;
    constexpr float HALF = 0.5f * (P - 1);
    constexpr int GS = MI::GAIN >= 0 ? 6 : -1;                         // slots in the affine parameters
    constexpr int OS = MI::OFF >= 0 ? 6 + (MI::GAIN >= 0 ? 1 : 0) : -1;
    constexpr int NA = 6 + (GS >= 0) + (OS >= 0);
    constexpr int NS = NA - 4;                                         // translation (+ illumination)
    constexpr bool AFF = P == AFFINE_PATCH;
    const int lane = threadIdx.x;
    const float ucol = (float)(lane % P) - HALF;
    const int row0 = lane / P;
    const float s255 = 1.f / 255.f;
    const float g = MI::GAIN >= 0 ? 1.f + alpha : 1.f;

    float Hi[NA][NA], Hsi[NS][NS];
    if constexpr (PRE) {        // the level's solver, stored with the template (at gain 1)
        if (!(sv[SLV_LMIN] >= min_eigen) || ((int)sv[SLV_FAIL] & (AFF ? 3 : 1))) return LVL_SINGULAR;
        const float ig = 1.f / g;
        solver_scale<NS, 2>(sv + SLV_HS, ig, Hsi);
        if (AFF) solver_scale<NA, 6>(sv + SLV_H, ig, Hi);
    } else {
        int fail;
        const float lmin = affine_solver<P, MODE, G>(tv, gx, gy, g, k0, gr, Hsi, Hi, fail);
        if (!(lmin >= min_eigen) || (fail & (AFF ? 3 : 1))) return LVL_SINGULAR;
    }

    const float xs = x, ys = y, s0 = A[0], s1 = A[1], s2 = A[2], s3 = A[3];
    float ra_lane = 0.f;
    int done = 0;
    int phase = 0;          // 0: translation (+ illumination), 1: affine (warp-uniform)
    bool fresh = true;      // no previous step for the oscillation test
    float px = 0.f, py = 0.f;
    int code = LVL_MAXITER;
    for (int it = 0; it < max_iterations; ++it) {
        const float ex = (fabsf(A[0]) + fabsf(A[1])) * HALF, ey = (fabsf(A[2]) + fabsf(A[3])) * HALF;
        if (!(x - ex >= 0.f && y - ey >= 0.f && x + ex < (float)(w - 1) && y + ey < (float)(h - 1))) {
            x = xs; y = ys; A[0] = s0; A[1] = s1; A[2] = s2; A[3] = s3;
            code = LVL_LEFT;
            break;
        }
        const float ga = 1.f + alpha;
        float b[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        float ra = 0.f;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
            const float uy = (float)(row0 + (k0 + k) * RSTEP) - HALF;
            const float X = x + A[0] * ucol + A[1] * uy, Y = y + A[2] * ucol + A[3] * uy;
            const float r = bilinear(I, w, X, Y) * s255 - ga * tv[k] - beta;
            const float a = gx[k] * r, c = gy[k] * r;
            b[0] += a * ucol; b[1] += a * uy; b[2] += c * ucol; b[3] += c * uy; b[4] += a; b[5] += c;
            b[6] += tv[k] * r; b[7] += r; ra += fabsf(r);
        }
        ra_lane = ra;
        float bv[NA];
        if constexpr (SPLIT) {   // the group's sums: 4 in the translation phase, all 8 in the affine one
            if (phase == 0) {
                float v[4] = {warp_sum(b[4]), warp_sum(b[5]), GS >= 0 ? warp_sum(b[6]) : 0.f,
                              OS >= 0 ? warp_sum(b[7]) : 0.f};
                GROUP_SUM(SPLIT, v, gr);
                b[4] = v[0]; b[5] = v[1]; b[6] = v[2]; b[7] = v[3];
            } else {
                float v[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) v[i] = (i < 6 || (i == 6 && GS >= 0) || (i == 7 && OS >= 0)) ? warp_sum(b[i]) : 0.f;
                GROUP_SUM(SPLIT, v, gr);
#pragma unroll
                for (int i = 0; i < 8; ++i) b[i] = v[i];
            }
            bv[4] = b[4] * g; bv[5] = b[5] * g;
            if (GS >= 0) bv[GS] = b[6];
            if (OS >= 0) bv[OS] = b[7];
        } else {
            bv[4] = warp_sum(b[4]) * g; bv[5] = warp_sum(b[5]) * g;
            if (GS >= 0) bv[GS] = warp_sum(b[6]);
            if (OS >= 0) bv[OS] = warp_sum(b[7]);
        }
        float dq[NA];
        if (phase == 0) {
#pragma unroll
            for (int i = 0; i < 4; ++i) dq[i] = 0.f;
#pragma unroll
            for (int i = 0; i < NS; ++i) {
                float s = 0.f;
#pragma unroll
                for (int j = 0; j < NS; ++j) s += Hsi[i][j] * bv[4 + j];
                dq[4 + i] = s;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) bv[i] = (SPLIT ? b[i] : warp_sum(b[i])) * g;
#pragma unroll
            for (int i = 0; i < NA; ++i) {
                float s = 0.f;
#pragma unroll
                for (int j = 0; j < NA; ++j) s += Hi[i][j] * bv[j];
                dq[i] = s;
            }
        }
        // compose with the inverse step: x + A u <- x + A D^-1 u, D = [[1 + d11, d12, dtx], [d21, 1 + d22, dty]]
        const float d11 = 1.f + dq[0], d12 = dq[1], d21 = dq[2], d22 = 1.f + dq[3];
        const float dd = d11 * d22 - d12 * d21;
        const float i11 = d22 / dd, i12 = -d12 / dd, i21 = -d21 / dd, i22 = d11 / dd;
        const float tix = -(i11 * dq[4] + i12 * dq[5]), tiy = -(i21 * dq[4] + i22 * dq[5]);
        const float sx = A[0] * tix + A[1] * tiy, sy = A[2] * tix + A[3] * tiy;
        const float xo = x, yo = y, o0 = A[0], o1 = A[1], o2 = A[2], o3 = A[3], alo = alpha, beo = beta;
        x = xo + sx;
        y = yo + sy;
        A[0] = o0 * i11 + o1 * i21; A[1] = o0 * i12 + o1 * i22;
        A[2] = o2 * i11 + o3 * i21; A[3] = o2 * i12 + o3 * i22;
        if (GS >= 0) alpha += dq[GS];
        if (OS >= 0) beta += dq[OS];
        ++iters;
        ++done;
        const float d2 = sx * sx + sy * sy;
        bool conv = d2 < eps2;
        if (!fresh && !conv) {
            const bool cancel = LK_OSC_EPS > 0.f && fabsf(sx + px) < LK_OSC_EPS && fabsf(sy + py) < LK_OSC_EPS;
            const bool grow = LK_OSC_GROWTH > 0.f && sx * px + sy * py < 0.f && d2 >= LK_OSC_GROWTH * (px * px + py * py);
            if (cancel || grow) {   // the middle of the jump
                x = 0.5f * (xo + x); y = 0.5f * (yo + y);
                A[0] = 0.5f * (o0 + A[0]); A[1] = 0.5f * (o1 + A[1]);
                A[2] = 0.5f * (o2 + A[2]); A[3] = 0.5f * (o3 + A[3]);
                alpha = 0.5f * (alo + alpha); beta = 0.5f * (beo + beta);
                conv = true;
            }
        }
        px = sx;
        py = sy;
        fresh = false;
        if (conv && phase == 0 && AFF) {
            phase = 1;
            fresh = true;
        } else if (conv) {
            code = LVL_CONVERGED;
            break;
        }
    }
    if (done > 0) {   // warp-uniform (group-uniform)
        float v[1] = {warp_sum(ra_lane)};
        GROUP_SUM(SPLIT, v, gr);
        residual = v[0] * (255.f / (P * P));
    }
    return code;
}

#define AFFINE_DET_MIN 0.25f   // vilib_ros.frontend.config.AFFINE_DET_RANGE
#define AFFINE_DET_MAX 4.0f

// LK_PRESOLVE 1: lk_template_* take each level's solver from the bank (written by
// lk_extract_<mode>); 0: they build and invert the matrices on every frame (the earlier way).
#ifndef LK_PRESOLVE
#define LK_PRESOLVE 1
#endif

// The whole pyramid for one feature (whole warp) against its stored template levels `bank`
// (TPL_STRIDE floats per level: samples and solver) where `valid` (a level without one is LVL_LEFT), from the initial
// guess p0 (level 0), the illumination alpha / beta and (AFFINE) the warp A (updated). Status and
// outputs as lk_point, plus a warp whose determinant leaves (AFFINE_DET_MIN, AFFINE_DET_MAX) is
// DIVERGED.
template <int MODE, bool AFFINE, int G = 1>
__device__ __forceinline__ int lk_point_stored(const float* __restrict__ bank, const uchar* __restrict__ valid,
                                               const unsigned long long* __restrict__ img_levels, int w0, int h0,
                                               int n_levels, int patch16_mask, float2 p0, int max_iterations,
                                               float eps2, float min_eigen, float max_residual, float& x, float& y,
                                               float (&A)[4], float& alpha, float& beta, float& residual, int& iters,
                                               LkGroup& gr)
{
    typedef ModeInfo<MODE> MI;
    if (MI::GAIN < 0) alpha = 0.f;
    if (MI::OFF < 0) beta = 0.f;
    residual = 0.f;
    iters = 0;
    int status = LK_NOT_CONVERGED;
    const float top = 1.f / (float)(1 << (n_levels - 1));
    x = (p0.x + 0.5f) * top - 0.5f;
    y = (p0.y + 0.5f) * top - 0.5f;
    bool finite_in = isfinite(p0.x) && isfinite(p0.y) && isfinite(alpha) && isfinite(beta);
    if (AFFINE) finite_in = finite_in && isfinite(A[0]) && isfinite(A[1]) && isfinite(A[2]) && isfinite(A[3]);
    if (!finite_in) return LK_DIVERGED;
    for (int l = n_levels - 1; l >= 0; --l) {
        const int w = w0 >> l, h = h0 >> l;
        const uchar* I = (const uchar*)img_levels[l];
        const float* S = bank + (size_t)l * TPL_STRIDE;
        const float* sv = S + TPL_AREA;   // the level's solver
        constexpr bool PRE = LK_PRESOLVE != 0;
        int r = LVL_LEFT;
        if (valid[l]) {
            if ((patch16_mask >> l) & 1) {
                constexpr int NL = Lay<16, G>::NL;
                const int k0 = Lay<16, G>::SPLIT ? gr.part * NL : 0;
                float tv[NL], gx[NL], gy[NL];
                template_from_bank<16, G>(S, tv, gx, gy, k0);
                r = AFFINE ? solve_level_affine<16, MODE, G, PRE>(I, w, h, tv, gx, gy, x, y, A, alpha, beta,
                                                                  max_iterations, eps2, min_eigen, residual, iters, gr,
                                                                  k0, sv)
                           : solve_level<16, MODE, G, PRE>(I, w, h, tv, gx, gy, x, y, alpha, beta, max_iterations,
                                                           eps2, min_eigen, residual, iters, gr, k0, sv);
            } else {
                float tv[2], gx[2], gy[2];
                template_from_bank<8>(S, tv, gx, gy);
                r = AFFINE ? solve_level_affine<8, MODE, 1, PRE>(I, w, h, tv, gx, gy, x, y, A, alpha, beta,
                                                                 max_iterations, eps2, min_eigen, residual, iters, gr,
                                                                 0, sv)
                           : solve_level<8, MODE, 1, PRE>(I, w, h, tv, gx, gy, x, y, alpha, beta, max_iterations,
                                                          eps2, min_eigen, residual, iters, gr, 0, sv);
            }
        }
        if (l == 0) {
            status = (r == LVL_CONVERGED) ? LK_TRACKED
                   : (r == LVL_MAXITER) ? LK_NOT_CONVERGED
                   : (r == LVL_LEFT) ? LK_LEFT_IMAGE : LK_DIVERGED;
        } else {
            x = 2.f * x + 0.5f;
            y = 2.f * y + 0.5f;
        }
    }
    const float det = A[0] * A[3] - A[1] * A[2];
    if (!(isfinite(x) && isfinite(y) && isfinite(alpha) && isfinite(beta)) ||
        !(1.f + alpha > 0.2f && 1.f + alpha < 5.f) ||
        (AFFINE && !(isfinite(det) && det > AFFINE_DET_MIN && det < AFFINE_DET_MAX))) {
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
    LkGroup gr{nullptr, 0, 0, 0};             // one warp per feature: no group
    const int status = lk_point<MODE>(tmpl_levels, img_levels, w0, h0, n_levels, patch16_mask, tmpl_pos[f], p0,
                                      max_iterations, eps2, min_eigen, max_residual, x, y, alpha, beta, residual, iters,
                                      gr);
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
    { PDL_ENTRY(); IMPL<LK_MODE_TRANSLATION>(PASS); }                                             \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_offset(ARGS)             \
    { PDL_ENTRY(); IMPL<LK_MODE_OFFSET>(PASS); }                                                  \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_gain(ARGS)               \
    { PDL_ENTRY(); IMPL<LK_MODE_GAIN>(PASS); }                                                    \
    extern "C" __global__ void __launch_bounds__(32 * LK_WARPS) PREFIX##_gain_offset(ARGS)        \
    { PDL_ENTRY(); IMPL<LK_MODE_GAIN_OFFSET>(PASS); }

LK_KERNELS(lk_track, lk_track_impl, LK_ARGS, LK_PASS)

// ---------------------------------------------------------------------------------------------
// The frontend's LK launches (vilib_ros.frontend.gpu.frame), on the device-side track table:
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

// The rotation-only prediction: distort(M [xy, 1]) with `cam`, else `guess` (behind the camera).
__device__ __forceinline__ float2 predict(float2 guess, float2 q, const float* __restrict__ M,
                                         const float* __restrict__ cam)
{
    const float X = M[0] * q.x + M[1] * q.y + M[2];
    const float Y = M[3] * q.x + M[4] * q.y + M[5];
    const float Z = M[6] * q.x + M[7] * q.y + M[8];
    return Z > 1e-6f ? distort_norm(X / Z, Y / Z, cam) : guess;
}

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
    if (M != nullptr && M[9] != 0.f) p0 = predict(p0, xy[f], M, cam_pred);
    float x, y, alpha, beta, residual;
    int iters;
    LkGroup gr{nullptr, 0, 0, 0};             // one warp per feature: no group
    const int status = lk_point<MODE>(tmpl_levels, img_levels, w0, h0, n_levels, patch16_mask, tmpl_pos[f], p0,
                                      max_iterations, eps2, min_eigen, max_residual, x, y, alpha, beta, residual, iters,
                                      gr);
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


// ---------------------------------------------------------------------------------------------
// Stored templates (vilib_ros.frontend.reference.templates; tracker.template 'reference' or warp 'affine'):
// the template bank holds per bank row `levels` template levels of TPL_AREA floats (`bank`) and
// their validity (`bank_valid`); the track table names each track's row (`tslot`).
//
// lk_template_<warp>_<mode>: LK of table slot f (< *count) from its stored template (row
// tslot[f]) into the image pyramid, started at the rotation prediction of `xy` (where M[9] != 0,
// else `guess`) with the slot's illumination gain0 / offset0 (0..255) and (affine) warp affine0;
// outputs as lk_frontend's temporal use (undistorted position `out_xy` with `cam_out`, NaN unless
// tracked) plus residual, gain, offset and (affine) the warp. Thread mapping: LK_FEATURE_WARPS
// warps per slot (GpuLKTracker.template_launch; one as lk_track_*, or a group, above), forward
// and backward tracks alike.
template <int MODE, bool AFFINE>
__device__ void lk_template_impl(const float* __restrict__ bank, const uchar* __restrict__ bank_valid,
                                 const int* __restrict__ tslot, const float* __restrict__ gain0,
                                 const float* __restrict__ offset0, const float4* __restrict__ affine0,
                                 const unsigned long long* __restrict__ img_levels, int w0, int h0, int n_levels,
                                 int patch16_mask, const long long* __restrict__ count,
                                 const float2* __restrict__ guess, const float2* __restrict__ xy,
                                 const float* __restrict__ M, const float* __restrict__ cam_pred,
                                 const float* __restrict__ cam_out, int max_iterations, float eps2, float min_eigen,
                                 float max_residual, float2* __restrict__ out_pos, signed char* __restrict__ out_status,
                                 float2* __restrict__ out_xy, int* __restrict__ out_iters,
                                 float* __restrict__ out_residual, float* __restrict__ out_gain,
                                 float* __restrict__ out_offset, float4* __restrict__ out_affine,
                                 const unsigned long long* __restrict__ prev_levels, int fb_levels,
                                 float2* __restrict__ fb_pos, signed char* __restrict__ fb_status)
{
    constexpr int G = LK_FEATURE_WARPS;
#if LK_FEATURE_WARPS > 1
    static_assert(LK_WARPS % G == 0 && LK_WARPS / G <= 15, "LK_WARPS must be a multiple of LK_FEATURE_WARPS");
    __shared__ float xbuf[LK_WARPS / G][2 * G * LK_PX];
    const int f = blockIdx.x * (LK_WARPS / G) + (int)threadIdx.y / G;
    LkGroup gr{xbuf[threadIdx.y / G], (int)threadIdx.y % G, 1 + (int)threadIdx.y / G, 0};
    if (f >= (int)*count) return;             // group-uniform
    const int lane = (int)threadIdx.x | gr.part << 5;   // 0 only in part 0's lane 0 (the writer)
#else
    const int f = blockIdx.x * LK_WARPS + threadIdx.y;
    LkGroup gr{nullptr, 0, 0, 0};
    if (f >= (int)*count) return;             // warp-uniform
    const int lane = threadIdx.x;
#endif
    const float qnan = __int_as_float(0x7fc00000);
    float2 p0 = guess[f];
    if (M != nullptr && M[9] != 0.f) p0 = predict(p0, xy[f], M, cam_pred);
    const int row = tslot[f];
    float A[4] = {1.f, 0.f, 0.f, 1.f};
    if (AFFINE) {
        const float4 a = affine0[f];
        A[0] = a.x; A[1] = a.y; A[2] = a.z; A[3] = a.w;
    }
    float x, y, alpha = gain0[f] - 1.f, beta = offset0[f] / 255.f, residual;
    int iters;
    const int status = lk_point_stored<MODE, AFFINE, G>(bank + (size_t)row * n_levels * TPL_STRIDE,
                                                              bank_valid + (size_t)row * n_levels, img_levels, w0,
                                                              h0, n_levels, patch16_mask, p0, max_iterations, eps2,
                                                              min_eigen, max_residual, x, y, A, alpha, beta, residual,
                                                              iters, gr);
    if (prev_levels != nullptr) {
        // the forward-backward check, fused (lk_frontend's backward use, the same arithmetic): the
        // current frame's patch at the result, from the slot's old position `guess` into the
        // previous frame; INACTIVE (at `guess`) unless tracked
        float2 back = guess[f];
        int bst = LK_INACTIVE;
        if (status == LK_TRACKED) {           // warp-uniform
            float bx, by, ba, bb, br;
            int bi;
            bst = lk_point<MODE, G>(img_levels, prev_levels, w0, h0, fb_levels, patch16_mask, make_float2(x, y),
                                          back, max_iterations, eps2, min_eigen, max_residual, bx, by, ba, bb, br, bi,
                                          gr);
            back = make_float2(bx, by);
        }
        if (lane == 0) {
            fb_pos[f] = back;
            fb_status[f] = (signed char)bst;
        }
    }
    if (lane != 0) return;
    out_pos[f] = make_float2(x, y);
    out_status[f] = (signed char)status;
    out_xy[f] = (cam_out != nullptr && status == LK_TRACKED) ? undistort_px(x, y, cam_out) : make_float2(qnan, qnan);
    out_iters[f] = iters;
    out_residual[f] = residual;
    out_gain[f] = 1.f + alpha;
    out_offset[f] = beta * 255.f;
    if (out_affine != nullptr) out_affine[f] = make_float4(A[0], A[1], A[2], A[3]);
}

#define LKT_ARGS                                                                                  \
    const float* __restrict__ bank, const uchar* __restrict__ bank_valid, const int* __restrict__ tslot, \
    const float* __restrict__ gain0, const float* __restrict__ offset0, const float4* __restrict__ affine0, \
    const unsigned long long* __restrict__ img_levels, int w0, int h0, int n_levels, int patch16_mask, \
    const long long* __restrict__ count, const float2* __restrict__ guess, const float2* __restrict__ xy, \
    const float* __restrict__ M, const float* __restrict__ cam_pred, const float* __restrict__ cam_out, \
    int max_iterations, float eps2, float min_eigen, float max_residual, float2* __restrict__ out_pos, \
    signed char* __restrict__ out_status, float2* __restrict__ out_xy, int* __restrict__ out_iters, \
    float* __restrict__ out_residual, float* __restrict__ out_gain, float* __restrict__ out_offset, \
    float4* __restrict__ out_affine
#define LKT_PASS bank, bank_valid, tslot, gain0, offset0, affine0, img_levels, w0, h0, n_levels, patch16_mask, \
    count, guess, xy, M, cam_pred, cam_out, max_iterations, eps2, min_eigen, max_residual, out_pos, out_status, \
    out_xy, out_iters, out_residual, out_gain, out_offset, out_affine

template <int MODE> __device__ __forceinline__ void lk_template_translation_impl(LKT_ARGS)
{ lk_template_impl<MODE, false>(LKT_PASS, nullptr, 0, nullptr, nullptr); }
template <int MODE> __device__ __forceinline__ void lk_template_affine_impl(LKT_ARGS)
{ lk_template_impl<MODE, true>(LKT_PASS, nullptr, 0, nullptr, nullptr); }

LK_KERNELS(lk_template_translation, lk_template_translation_impl, LKT_ARGS, LKT_PASS)
LK_KERNELS(lk_template_affine, lk_template_affine_impl, LKT_ARGS, LKT_PASS)

// lk_template_fb_<warp>_<mode>: lk_template_<warp>_<mode> with the forward-backward check in the
// same warp (one launch fewer, and each warp's backward track follows its forward one at once):
// `prev_levels` the previous frame's pyramid, outputs fb_pos / fb_status as lk_frontend's
// backward use (gate = the forward status) writes them; the backward track runs on the
// `fb_levels` finest levels (1..n_levels, FrontendConfig.fb_levels): it starts at the slot's old
// position, where a good track ends, so the coarse levels only re-find it.
#define LKTF_ARGS LKT_ARGS, const unsigned long long* __restrict__ prev_levels, int fb_levels, \
    float2* __restrict__ fb_pos, signed char* __restrict__ fb_status
#define LKTF_PASS LKT_PASS, prev_levels, fb_levels, fb_pos, fb_status
template <int MODE> __device__ __forceinline__ void lk_template_fb_translation_impl(LKTF_ARGS)
{ lk_template_impl<MODE, false>(LKTF_PASS); }
template <int MODE> __device__ __forceinline__ void lk_template_fb_affine_impl(LKTF_ARGS)
{ lk_template_impl<MODE, true>(LKTF_PASS); }

LK_KERNELS(lk_template_fb_translation, lk_template_fb_translation_impl, LKTF_ARGS, LKTF_PASS)
LK_KERNELS(lk_template_fb_affine, lk_template_fb_affine_impl, LKTF_ARGS, LKTF_PASS)

// lk_extract_<mode>: the templates of the table slots f < *count with refresh[f] != 0 (every
// slot where `refresh` is null) at their positions uv[f] (level 0) in the image pyramid, into bank
// row tslot[f]: per level the (P + 2) x (P + 2) samples around the level position with the one
// bilinear fraction of template_from_image (so that LK on a stored template of the previous frame
// is LK from the previous frame's image), valid where the patch and its gradient ring fit; and
// the level's solver (affine_solver at gain 1 on those samples: TPL_SOLVER floats after them).
// Thread mapping: one warp per slot (blockDim = (32, LK_WARPS)); lane l fills samples l, l + 32,
// ... of each level, also into the warp's shared copy, from which the solver reads the template
// (template_from_bank's arithmetic); lane 0 writes the solver.
template <int P, int MODE>
__device__ __forceinline__ void level_solver(const float* __restrict__ S, float* __restrict__ out)
{
    constexpr int NA = AffInfo<MODE>::NA, NS = AffInfo<MODE>::NS;
    float tv[P * P / 32], gx[P * P / 32], gy[P * P / 32];
    template_from_bank<P>(S, tv, gx, gy);
    LkGroup gr{nullptr, 0, 0, 0};
    float Hsi[NS][NS], Hi[NA][NA];
    int fail = 0;
    const float lmin = affine_solver<P, MODE, 1>(tv, gx, gy, 1.f, 0, gr, Hsi, Hi, fail);
    if (threadIdx.x != 0) return;
    out[SLV_LMIN] = lmin;
    out[SLV_FAIL] = (float)fail;
#pragma unroll
    for (int i = 0; i < NS; ++i)
#pragma unroll
        for (int j = 0; j < NS; ++j) out[SLV_HS + i * NS + j] = Hsi[i][j];
    if (P == AFFINE_PATCH) {
#pragma unroll
        for (int i = 0; i < NA; ++i)
#pragma unroll
            for (int j = 0; j < NA; ++j) out[SLV_H + i * NA + j] = Hi[i][j];
    }
}

template <int MODE>
__device__ void lk_extract_impl(const unsigned long long* __restrict__ img_levels, int w0, int h0, int n_levels,
                                int patch16_mask, const long long* __restrict__ count, const float2* __restrict__ uv,
                                const int* __restrict__ tslot, const uchar* __restrict__ refresh,
                                float* __restrict__ bank, uchar* __restrict__ bank_valid)
{
    __shared__ float s_tpl[LK_WARPS][TPL_AREA];
    const int f = blockIdx.x * LK_WARPS + threadIdx.y;
    if (f >= (int)*count) return;             // warp-uniform
    if (refresh != nullptr && refresh[f] == 0) return;
    const int lane = threadIdx.x;
    float* st = s_tpl[threadIdx.y];
    const float2 p = uv[f];
    const int row = tslot[f];
    for (int l = 0; l < n_levels; ++l) {
        const int P = ((patch16_mask >> l) & 1) ? 16 : 8;
        const float half = 0.5f * (P - 1);
        const int w = w0 >> l, h = h0 >> l;
        const float s = 1.f / (float)(1 << l);
        const float tcx = (p.x + 0.5f) * s - 0.5f, tcy = (p.y + 0.5f) * s - 0.5f;
        const bool ok = isfinite(tcx) && isfinite(tcy) && fits(tcx, tcy, half + 1.f, w, h);
        if (lane == 0) bank_valid[(size_t)row * n_levels + l] = ok ? 1 : 0;
        if (!ok) continue;                    // warp-uniform
        const uchar* T = (const uchar*)img_levels[l];
        const float bx = tcx - half, by = tcy - half;
        const float fx = floorf(bx), fy = floorf(by);
        const float ax = bx - fx, ay = by - fy;
        const float w00 = (1.f - ax) * (1.f - ay), w10 = ax * (1.f - ay), w01 = (1.f - ax) * ay, w11 = ax * ay;
        const int SW = P + 2;
        float* out = bank + ((size_t)row * n_levels + l) * TPL_STRIDE;
        for (int i = lane; i < SW * SW; i += 32) {
            const int r = i / SW, c = i % SW;
            const uchar* q = T + (size_t)((int)fy - 1 + r) * w + (int)fx - 1 + c;
            const float v = w00 * __ldg(q) + w10 * __ldg(q + 1) + w01 * __ldg(q + w) + w11 * __ldg(q + w + 1);
            out[i] = v;
            st[i] = v;
        }
        __syncwarp();                         // the warp's samples in shared memory
        if (P == 16) level_solver<16, MODE>(st, out + TPL_AREA);
        else level_solver<8, MODE>(st, out + TPL_AREA);
        __syncwarp();                         // read before the next level overwrites them
    }
}

#define LKE_ARGS                                                                                  \
    const unsigned long long* __restrict__ img_levels, int w0, int h0, int n_levels, int patch16_mask, \
    const long long* __restrict__ count, const float2* __restrict__ uv, const int* __restrict__ tslot, \
    const uchar* __restrict__ refresh, float* __restrict__ bank, uchar* __restrict__ bank_valid
#define LKE_PASS img_levels, w0, h0, n_levels, patch16_mask, count, uv, tslot, refresh, bank, bank_valid

LK_KERNELS(lk_extract, lk_extract_impl, LKE_ARGS, LKE_PASS)
