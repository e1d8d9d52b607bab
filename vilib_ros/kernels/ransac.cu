// Fundamental-matrix RANSAC on the device, inside the frame's CUDA graph (between LK / the
// forward-backward check and table_update): the algorithm of vilib_ros.frontend.ransac,
// operation for operation as its numba twin vilib_ros.frontend.compiled.ransac (float64; this module
// is compiled with -fmad=false so that no multiply-add is fused), so that both choose the same
// hypothesis and give the same mask.
//
// One kernel, ransac_frame (scratch preallocated by vilib_ros.frontend.gpu.ransac.GpuRansac):
// one block of RS_THREADS threads per hypothesis h = blockIdx.x.
//   1. Candidates, in every block: thread t owns the contiguous slots [t * per, (t + 1) * per)
//      and keeps a bit per slot that LK tracked, the forward-backward check passed and has
//      finite positions; a block scan gives each thread the rank of its first candidate (the
//      candidates in slot order, as the twin numbers them). Block 0 also writes them compacted
//      (slot, positions as double) for step 4, flags the candidates without finite positions
//      and clears the reject flags.
//   2. The sample: every thread draws row h of the fixed table (the same ranks); the thread
//      whose range holds a rank finds its slot. Warp 0 solves the normalised 8-point F by
//      elimination with full pivoting (lane c owning column c of the design matrix in shared
//      memory).
//   3. Every thread scores its own candidates against F (integer counts: a warp sum, then a
//      shared atomic; exact in any order) into count[h].
//   4. The last block to finish (a counter that wraps to 0 for the next frame; every block's
//      writes fenced before it counts) selects: the records among the counts (block max-scan,
//      ballot), thread 0 applies the adaptive rule at them in hypothesis order; then the LO
//      refits (warp 0: lane l sums the inliers l, l + 32, ... in registers, a butterfly adds the
//      lanes, lane 0 solves in registers); then the outliers into the reject flags
//      (table_update drops them and counts ransac_rejected). What other blocks wrote is read
//      through L2 (__ldcg).
// One launch instead of three (candidates, models, select): two kernel boundaries fewer on the
// frame's serial chain, and the candidates' scan runs in every block at once.
// Defines (vilib_ros.frontend.config.ransac_defines, one name for one thing): RS_HYPOTHESES,
// RS_SAMPLE, RS_MIN_INLIERS, RS_LO_ITERATIONS, RS_INVERSE_ITERATIONS, RS_LANES, RS_SQRT2 and the
// state slots RS_N (candidates), RS_BEST, RS_COUNT (final inliers), RS_EVALUATED; H_COUNT.
#include "pdl.cuh"
#include "table.cuh"

#define RS_THREADS 256           // ransac_frame's block (ransac_gpu.THREADS)
#define RS_MAX_PER 32            // slots per thread at most: capacity <= RS_MAX_PER * RS_THREADS
#define RS_HD __host__ __device__ __forceinline__

RS_HD void rs_denormalise(const double* f, double s1, double tx1, double ty1, double s2, double tx2, double ty2,
                          double* F)
{
    double g[9];
    for (int row = 0; row < 3; ++row) {
        g[row * 3] = f[row * 3] * s1;
        g[row * 3 + 1] = f[row * 3 + 1] * s1;
        g[row * 3 + 2] = f[row * 3] * tx1 + f[row * 3 + 1] * ty1 + f[row * 3 + 2];
    }
    for (int j = 0; j < 3; ++j) {
        F[j] = s2 * g[j];
        F[3 + j] = s2 * g[3 + j];
        F[6 + j] = tx2 * g[j] + ty2 * g[3 + j] + g[6 + j];
    }
}

RS_HD void rs_design_row(double u1, double v1, double u2, double v2, double* r)
{
    r[0] = u2 * u1; r[1] = u2 * v1; r[2] = u2;
    r[3] = v2 * u1; r[4] = v2 * v1; r[5] = v2;
    r[6] = u1; r[7] = v1; r[8] = 1.0;
}

// Candidates of row h of the sample table: i_j = u_j mod n, moved on while it repeats. 32-bit
// unsigned arithmetic: u_j < 2^32 and 0 < n, so u_j mod n is the int64 modulo of the numba twin,
// and (v + 1) mod n with v < n is v + 1 or 0 (no second division).
RS_HD void rs_sample(const unsigned int* table, int h, int n, int* idx)
{
    const unsigned int un = (unsigned int)n;
    for (int j = 0; j < RS_SAMPLE; ++j) {
        unsigned int v = table[h * RS_SAMPLE + j] % un;
        bool again = true;
        while (again) {
            again = false;
            for (int i = 0; i < j; ++i)
                if (idx[i] == (int)v) { v = v + 1 == un ? 0u : v + 1; again = true; break; }
        }
        idx[j] = (int)v;
    }
}

// The normalising similarities of the sample idx (cpu_ransac.hypothesis: centroids, mean
// distances); false without spread.
RS_HD bool rs_normalise(const double2* x1, const double2* x2, const int* idx, double* s1, double* tx1, double* ty1,
                        double* s2, double* tx2, double* ty2)
{
    double cx1 = 0.0, cy1 = 0.0, cx2 = 0.0, cy2 = 0.0;
    for (int j = 0; j < RS_SAMPLE; ++j) {
        const int k = idx[j];
        cx1 += x1[k].x; cy1 += x1[k].y; cx2 += x2[k].x; cy2 += x2[k].y;
    }
    cx1 = cx1 / 8.0; cy1 = cy1 / 8.0; cx2 = cx2 / 8.0; cy2 = cy2 / 8.0;
    double d1 = 0.0, d2 = 0.0;
    for (int j = 0; j < RS_SAMPLE; ++j) {
        const int k = idx[j];
        double dx = x1[k].x - cx1, dy = x1[k].y - cy1;
        d1 += sqrt(dx * dx + dy * dy);
        dx = x2[k].x - cx2; dy = x2[k].y - cy2;
        d2 += sqrt(dx * dx + dy * dy);
    }
    d1 = d1 / 8.0; d2 = d2 / 8.0;
    if (!(d1 > 1e-300 && d2 > 1e-300)) return false;
    *s1 = RS_SQRT2 / d1; *s2 = RS_SQRT2 / d2;
    *tx1 = -*s1 * cx1; *ty1 = -*s1 * cy1; *tx2 = -*s2 * cx2; *ty2 = -*s2 * cy2;
    return true;
}

// OpenCV FM_RANSAC's error of one pair (the larger squared point-line distance) within thr2.
RS_HD bool rs_inlier(const double* F, double X1, double Y1, double X2, double Y2, double thr2)
{
    double a = F[0] * X1 + F[1] * Y1 + F[2];
    double b = F[3] * X1 + F[4] * Y1 + F[5];
    double c = F[6] * X1 + F[7] * Y1 + F[8];
    double d = X2 * a + Y2 * b + c;
    const double e2 = d * d / (a * a + b * b);
    a = F[0] * X2 + F[3] * Y2 + F[6];
    b = F[1] * X2 + F[4] * Y2 + F[7];
    c = F[2] * X2 + F[5] * Y2 + F[8];
    d = X1 * a + Y1 * b + c;
    const double e1 = d * d / (a * a + b * b);
    return e1 <= thr2 && e2 <= thr2;
}

// Inverse iteration on the pivoted LU of the 9x9 a (overwritten) from all-ones, each step scaled
// by its largest |entry| (the first); false where it gives no finite vector. Fully unrolled, the
// pivot rows swapped by predicated moves, so that a stays in registers (cpu_ransac's arithmetic).
RS_HD bool rs_smallest_eigenvector(double* a, double* x)
{
    int piv[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        int p = i;
        double big = fabs(a[i * 9 + i]);
#pragma unroll
        for (int r = i + 1; r < 9; ++r) {
            const double v = fabs(a[r * 9 + i]);
            if (v > big) { big = v; p = r; }
        }
        piv[i] = p;
#pragma unroll
        for (int r = i + 1; r < 9; ++r)
            if (r == p) {
#pragma unroll
                for (int c = 0; c < 9; ++c) { const double t = a[i * 9 + c]; a[i * 9 + c] = a[r * 9 + c]; a[r * 9 + c] = t; }
            }
        const double d = a[i * 9 + i];
#pragma unroll
        for (int r = i + 1; r < 9; ++r) {
            const double m = a[r * 9 + i] / d;
            a[r * 9 + i] = m;
#pragma unroll
            for (int c = i + 1; c < 9; ++c) a[r * 9 + c] = a[r * 9 + c] - m * a[i * 9 + c];
        }
    }
#pragma unroll
    for (int i = 0; i < 9; ++i) x[i] = 1.0;
#pragma unroll
    for (int it = 0; it < RS_INVERSE_ITERATIONS; ++it) {
#pragma unroll
        for (int i = 0; i < 9; ++i)
#pragma unroll
            for (int r = i + 1; r < 9; ++r)
                if (r == piv[i]) { const double t = x[i]; x[i] = x[r]; x[r] = t; }
#pragma unroll
        for (int i = 0; i < 9; ++i)
#pragma unroll
            for (int j = 0; j < i; ++j) x[i] = x[i] - a[i * 9 + j] * x[j];
#pragma unroll
        for (int i = 8; i >= 0; --i) {
#pragma unroll
            for (int j = i + 1; j < 9; ++j) x[i] = x[i] - a[i * 9 + j] * x[j];
            x[i] = x[i] / a[i * 9 + i];
        }
        double mx = 0.0;
#pragma unroll
        for (int i = 0; i < 9; ++i)
            if (fabs(x[i]) > fabs(mx)) mx = x[i];
        if (!(fabs(mx) > 0.0 && isfinite(mx))) return false;
#pragma unroll
        for (int i = 0; i < 9; ++i) x[i] = x[i] / mx;
    }
    return true;
}

// OpenCV's RANSACUpdateNumIters for 8-point models (ransac.update_hypotheses).
RS_HD int rs_update(double confidence, int inliers, int n, int current)
{
    const double w = (double)inliers / (double)n;
    const double w2 = w * w, w4 = w2 * w2;
    double denom = 1.0 - w4 * w4;
    double num = 1.0 - confidence;
    if (denom <= 0.0) return 0;
    num = log(num);
    denom = log(denom);
    if (denom >= 0.0 || -num >= (double)current * -denom) return current;
    return (int)(num / denom + 0.5);
}
#ifdef __CUDACC__
// The normalised 8-point F of a sample (its 8 pairs in p1 / p2, in draw order) by one warp
// (cpu_ransac.hypothesis, the same arithmetic): the 8x9 design matrix in the warp's shared rows `a` (lane j < 8 fills row j), then
// elimination with full pivoting, lane c (< 9) owning column c: the pivot is the first largest
// |a[r][c]| in row-major order over r >= i, c >= i (each lane its column's first largest, then a
// butterfly keeps the largest, ties to the smaller (row, column): every lane ends with the same
// pivot), rows then columns swapped in place (the permutation in perm, warp-uniform), the
// multipliers a[r][i] / piv read by every lane before lanes i..8 update their columns. The back
// substitution and the denormalisation in every lane (the same values), F into `G`. False (every
// lane) without a model.
__device__ bool rs_hypothesis_warp(const double2* p1, const double2* p2, double* a, double* G)
{
    const int lane = threadIdx.x & 31;
    const int idx[RS_SAMPLE] = {0, 1, 2, 3, 4, 5, 6, 7};
    double s1, tx1, ty1, s2, tx2, ty2;
    if (!rs_normalise(p1, p2, idx, &s1, &tx1, &ty1, &s2, &tx2, &ty2)) return false;
    if (lane < RS_SAMPLE)
        rs_design_row(s1 * p1[lane].x + tx1, s1 * p1[lane].y + ty1, s2 * p2[lane].x + tx2, s2 * p2[lane].y + ty2,
                      a + 9 * lane);
    __syncwarp();
    int perm[9];
#pragma unroll
    for (int c = 0; c < 9; ++c) perm[c] = c;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        double big = -2.0;                // lanes without a column of the search: below any |x| and -1
        int key = 0x7fffffff;             // (row << 4) | column of the lane's pivot candidate
        if (lane >= i && lane < 9) {
            big = -1.0;
            int br = i;
            for (int r = i; r < 8; ++r) {
                const double x = fabs(a[r * 9 + lane]);
                if (x > big) { big = x; br = r; }
            }
            key = (br << 4) | lane;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const double ob = __shfl_xor_sync(FULL_MASK, big, o);
            const int ok = __shfl_xor_sync(FULL_MASK, key, o);
            if (ob > big || (ob == big && ok < key)) { big = ob; key = ok; }
        }
        if (!(big > 1e-12)) return false;  // warp-uniform
        const int br = key >> 4, bc = key & 15;
        if (br != i && lane < 9) {
            const double t = a[i * 9 + lane]; a[i * 9 + lane] = a[br * 9 + lane]; a[br * 9 + lane] = t;
        }
        __syncwarp();
        if (bc != i && lane < 8) {
            const double t = a[lane * 9 + i]; a[lane * 9 + i] = a[lane * 9 + bc]; a[lane * 9 + bc] = t;
        }
#pragma unroll
        for (int c = i + 1; c < 9; ++c)
            if (c == bc) { const int t = perm[i]; perm[i] = perm[c]; perm[c] = t; }
        __syncwarp();
        const double piv = a[i * 9 + i];
        double m[8];
#pragma unroll
        for (int r = i + 1; r < 8; ++r) m[r] = a[r * 9 + i] / piv;
        __syncwarp();                     // column i read by every lane before lane i writes it
        if (lane >= i && lane < 9) {
#pragma unroll
            for (int r = i + 1; r < 8; ++r) a[r * 9 + lane] = a[r * 9 + lane] - m[r] * a[i * 9 + lane];
        }
        __syncwarp();
    }
    double fl[9];
    fl[8] = 1.0;
#pragma unroll
    for (int i = 7; i >= 0; --i) {
        double acc = 0.0;
#pragma unroll
        for (int c = i + 1; c < 9; ++c) acc += a[i * 9 + c] * fl[c];
        fl[i] = -acc / a[i * 9 + i];
    }
    double f[9];
#pragma unroll
    for (int j = 0; j < 9; ++j)
#pragma unroll
        for (int c = 0; c < 9; ++c)
            if (perm[c] == j) f[j] = fl[c];
    rs_denormalise(f, s1, tx1, ty1, s2, tx2, ty2, G);
    return true;
}

__device__ __forceinline__ double rs_butterfly(double v)
{
#pragma unroll
    for (int o = RS_LANES / 2; o > 0; o >>= 1) v = v + __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// The LO refit's sums by one warp (cpu_ransac.refit): lane l adds rows l, l + 32, ...
// of the inliers in order, into registers (centroids, then distances, then the 45 entries of the
// normal matrix), a butterfly adds the lanes; every lane ends with the same sums. Lane 0 then
// solves (rs_smallest_eigenvector) and writes F to G; false where the refit fails.
__device__ __forceinline__ bool rs_refit_warp(const double2* x1, const double2* x2, const signed char* inl, int n,
                                              int cur, double* G)
{
    const int lane = threadIdx.x & 31;
    double c0 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;
    for (int k = lane; k < n; k += RS_LANES) {
        if (!inl[k]) continue;
        const double2 p = __ldcg(x1 + k), q = __ldcg(x2 + k);
        c0 += p.x; c1 += p.y; c2 += q.x; c3 += q.y;
    }
    const double cx1 = rs_butterfly(c0) / (double)cur, cy1 = rs_butterfly(c1) / (double)cur;
    const double cx2 = rs_butterfly(c2) / (double)cur, cy2 = rs_butterfly(c3) / (double)cur;
    double e1 = 0.0, e2 = 0.0;
    for (int k = lane; k < n; k += RS_LANES) {
        if (!inl[k]) continue;
        const double2 p = __ldcg(x1 + k), q = __ldcg(x2 + k);
        double dx = p.x - cx1, dy = p.y - cy1;
        e1 += sqrt(dx * dx + dy * dy);
        dx = q.x - cx2; dy = q.y - cy2;
        e2 += sqrt(dx * dx + dy * dy);
    }
    const double d1 = rs_butterfly(e1) / (double)cur, d2 = rs_butterfly(e2) / (double)cur;
    if (!(d1 > 1e-300 && d2 > 1e-300)) return false;
    const double s1 = RS_SQRT2 / d1, s2 = RS_SQRT2 / d2;
    const double tx1 = -s1 * cx1, ty1 = -s1 * cy1, tx2 = -s2 * cx2, ty2 = -s2 * cy2;
    double acc[45];
#pragma unroll
    for (int e = 0; e < 45; ++e) acc[e] = 0.0;
    for (int k = lane; k < n; k += RS_LANES) {
        if (!inl[k]) continue;
        const double2 p = __ldcg(x1 + k), q = __ldcg(x2 + k);
        double r[9];
        rs_design_row(s1 * p.x + tx1, s1 * p.y + ty1, s2 * q.x + tx2, s2 * q.y + ty2, r);
        int e = 0;
#pragma unroll
        for (int pi = 0; pi < 9; ++pi)
#pragma unroll
            for (int qi = pi; qi < 9; ++qi) acc[e++] += r[pi] * r[qi];
    }
    double a[81];
    int e = 0;
#pragma unroll
    for (int pi = 0; pi < 9; ++pi)
#pragma unroll
        for (int qi = pi; qi < 9; ++qi) {
            const double v = rs_butterfly(acc[e++]);
            a[pi * 9 + qi] = v;
            a[qi * 9 + pi] = v;
        }
    bool ok = false;
    if (lane == 0) {
        double f[9];
        ok = rs_smallest_eigenvector(a, f);
        if (ok) rs_denormalise(f, s1, tx1, ty1, s2, tx2, ty2, G);
    }
    return ok;
}

// The inliers of F into inl[0..n); returns their count (block-wide; the last block of ransac_frame).
__device__ __forceinline__ int rs_mark(const double* F, const double2* x1, const double2* x2, int n, double thr2,
                                       signed char* inl, bool write, unsigned int* s_cnt)
{
    __syncthreads();                      // every thread has read the last count
    if (threadIdx.x == 0) *s_cnt = 0u;
    __syncthreads();
    unsigned int c = 0;
    for (int k = threadIdx.x; k < n; k += RS_THREADS) {
        const double2 p = __ldcg(x1 + k), q = __ldcg(x2 + k);
        const bool in = rs_inlier(F, p.x, p.y, q.x, q.y, thr2);
        if (write) inl[k] = in ? 1 : 0;
        c += in;
    }
    block_count(s_cnt, c);
    __syncthreads();
    return (int)*s_cnt;
}

// Step 4 of ransac_frame, by its last block (n candidates).
__device__ __forceinline__ void rs_select(const long long* __restrict__ hdr, const double2* x1, const double2* x2,
                                          const int* cand, const signed char* flag, const double* F, const int* count,
                                          int n, double thr2, double confidence, signed char* inl,
                                          signed char* reject, int* state)
{
    __shared__ int s_best, s_wmax[RS_THREADS / 32];
    __shared__ unsigned int s_cnt, s_rec[RS_THREADS / 32];
    __shared__ double s_F[9], s_G[9];
    __shared__ bool s_ok;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = RS_THREADS / 32;
    if (n < RS_SAMPLE) return;            // block-uniform: no RANSAC, no rejects
    {   // The adaptive rule reads the counts in order and acts only at a record (more inliers than
        // every earlier hypothesis, at least RS_MIN_INLIERS): the records by a block max-scan and
        // a ballot, then thread 0 walks them (a handful) instead of every count.
        const int c = t < RS_HYPOTHESES ? __ldcg(count + t) : -1;
        int m = c;                                    // inclusive max over the warp's lanes
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL_MASK, m, o);
            if (lane >= o) m = max(m, y);
        }
        if (lane == 31) s_wmax[warp] = m;
        int before = __shfl_up_sync(FULL_MASK, m, 1);
        if (lane == 0) before = -1;
        __syncthreads();
        for (int w = 0; w < warp; ++w) before = max(before, s_wmax[w]);
        const unsigned int rec = __ballot_sync(FULL_MASK, c >= RS_MIN_INLIERS && c > before);
        if (lane == 0) s_rec[warp] = rec;
        __syncthreads();
        if (t == 0) {
            int best = -1, k = RS_HYPOTHESES;
            for (int w = 0; w < warps && w * 32 < k; ++w) {
                unsigned int bits = s_rec[w];
                while (bits) {
                    const int h = w * 32 + __ffs(bits) - 1;
                    bits &= bits - 1;
                    if (h >= k) break;
                    best = h;
                    k = rs_update(confidence, __ldcg(count + h), n, k);
                }
            }
            s_best = best;
            state[RS_BEST] = best;
            state[RS_EVALUATED] = best < 0 ? RS_HYPOTHESES : max(k, best + 1);   // the hypotheses the rule read
        }
    }
    __syncthreads();
    const int best = s_best;
    if (best < 0) return;                 // block-uniform: no model, no rejects
    if (t < 9) s_F[t] = __ldcg(F + 9 * best + t);
    __syncthreads();
    int cur = rs_mark(s_F, x1, x2, n, thr2, inl, true, &s_cnt);
    for (int it = 0; it < RS_LO_ITERATIONS; ++it) {
        if (warp == 0) {                  // the refit by warp 0 (cpu_ransac.refit)
            const bool ok = rs_refit_warp(x1, x2, inl, n, cur, s_G);
            if (t == 0) s_ok = ok;
        }
        __syncthreads();
        if (!s_ok) break;                 // block-uniform
        const int c = rs_mark(s_G, x1, x2, n, thr2, inl, false, &s_cnt);
        if (c < cur) break;               // block-uniform
        cur = rs_mark(s_G, x1, x2, n, thr2, inl, true, &s_cnt);
        __syncthreads();                  // every flag written before the next sums read them
    }
    for (int k = t; k < n; k += RS_THREADS)
        if (!inl[k]) reject[__ldcg(cand + k)] = 1;
    const int slots = (int)hdr[H_COUNT];
    for (int i = t; i < slots; i += RS_THREADS)
        if (__ldcg(flag + i)) reject[i] = 1;
    if (t == 0) state[RS_COUNT] = cur;
}

// A slot's part in the RANSAC (as table_update reads the check): 0 none, 1 a candidate, 2 a
// candidate without finite positions (an outlier where a model is found).
__device__ __forceinline__ int rs_slot(int i, const signed char* __restrict__ lk_status, const float2* __restrict__ uv,
                                       const float2* __restrict__ fb_pos, const signed char* __restrict__ fb_status,
                                       float fb_threshold, const float2* __restrict__ xy,
                                       const float2* __restrict__ lk_xy)
{
    if (lk_status[i] != ST_TRACKED) return 0;
    if (fb_status != nullptr) {
        const float2 a = fb_pos[i], u = uv[i];
        const float dx = a.x - u.x, dy = a.y - u.y;
        if (!(fb_status[i] == ST_TRACKED && sqrtf(dx * dx + dy * dy) < fb_threshold)) return 0;
    }
    const float2 p = xy[i], q = lk_xy[i];
    return (isfinite(p.x) && isfinite(p.y) && isfinite(q.x) && isfinite(q.y)) ? 1 : 2;
}

static_assert(RS_HYPOTHESES <= RS_THREADS, "the selection holds one count per thread");
static_assert(RS_MAX_PER <= 32, "a thread's candidates are bits of one word");

extern "C" __global__ void __launch_bounds__(RS_THREADS) ransac_frame(
    const long long* __restrict__ hdr, const signed char* __restrict__ lk_status, const float2* __restrict__ uv,
    const float2* __restrict__ xy, const float2* __restrict__ lk_xy, const float2* __restrict__ fb_pos,
    const signed char* __restrict__ fb_status, float fb_threshold, int capacity, const unsigned int* __restrict__ table,
    double thr2, double confidence, int* cand, double2* x1, double2* x2, signed char* flag, double* F,
    signed char* valid, int* count, signed char* inl, signed char* reject, int* state, unsigned int* done)
{
    PDL_ENTRY();
    __shared__ int s_slot[RS_SAMPLE];
    __shared__ double2 s_p1[RS_SAMPLE], s_p2[RS_SAMPLE];
    __shared__ double s_a[8 * 9], s_G[9];
    __shared__ int s_ok;
    __shared__ unsigned int s_cnt;
    __shared__ bool s_last;
    const int t = threadIdx.x, lane = t & 31, h = blockIdx.x;
    const int slots = (int)hdr[H_COUNT];
    const int per = (slots + RS_THREADS - 1) / RS_THREADS;      // <= RS_MAX_PER (GpuRansac checks the capacity)
    const int i0 = t * per;
    // 1. the candidates: a bit per own slot, the rank of the first by a block scan
    unsigned int take = 0u;
    int nv = 0;
    for (int j = 0; j < per; ++j) {
        const int i = i0 + j;
        if (i >= slots) break;
        const int k = rs_slot(i, lk_status, uv, fb_pos, fb_status, fb_threshold, xy, lk_xy);
        if (k == 1) { take |= 1u << j; ++nv; }
        if (h == 0) flag[i] = k == 2 ? 1 : 0;
    }
    int n;
    const int base = block_exclusive_scan<RS_THREADS>(nv, &n);
    if (h == 0) {                         // compacted for the selection; the flags of this frame
        int pos = base;
        for (int j = 0; j < per; ++j) {
            if (!((take >> j) & 1u)) continue;
            const int i = i0 + j;
            const float2 p = xy[i], q = lk_xy[i];
            cand[pos] = i;
            x1[pos] = make_double2(p.x, p.y);
            x2[pos] = make_double2(q.x, q.y);
            ++pos;
        }
        for (int i = t; i < capacity; i += RS_THREADS) {
            reject[i] = 0;
            if (i >= slots) flag[i] = 0;
        }
        if (t == 0) {
            state[RS_N] = n;
            state[RS_BEST] = -1;
            state[RS_COUNT] = 0;
            state[RS_EVALUATED] = 0;
        }
    }
    // 2. the sample's slots, then F by warp 0
    if (t == 0) { s_ok = 0; s_cnt = 0u; }
    if (n >= RS_SAMPLE) {                 // block-uniform
        int idx[RS_SAMPLE];
        rs_sample(table, h, n, idx);
#pragma unroll
        for (int j = 0; j < RS_SAMPLE; ++j) {
            int r = idx[j] - base;
            if (r < 0 || r >= nv) continue;
            for (int b = 0; b < per; ++b) {
                if (!((take >> b) & 1u)) continue;
                if (r == 0) { s_slot[j] = i0 + b; break; }
                --r;
            }
        }
        __syncthreads();
        if (t < RS_SAMPLE) {
            const float2 p = xy[s_slot[t]], q = lk_xy[s_slot[t]];
            s_p1[t] = make_double2(p.x, p.y);
            s_p2[t] = make_double2(q.x, q.y);
        }
        __syncthreads();
        if (t < 32) {                     // warp-uniform
            double G[9];
            const bool ok = rs_hypothesis_warp(s_p1, s_p2, s_a, G);
            if (lane == 0) {
                s_ok = ok ? 1 : 0;
                if (ok) {
#pragma unroll
                    for (int j = 0; j < 9; ++j) { F[9 * h + j] = G[j]; s_G[j] = G[j]; }
                }
            }
        }
    }
    __syncthreads();
    // 3. the score of F over every thread's own candidates
    if (s_ok) {                           // block-uniform
        double G[9];
#pragma unroll
        for (int j = 0; j < 9; ++j) G[j] = s_G[j];
        unsigned int c = 0;
        for (int j = 0; j < per; ++j) {
            if (!((take >> j) & 1u)) continue;
            const float2 p = xy[i0 + j], q = lk_xy[i0 + j];
            c += rs_inlier(G, (double)p.x, (double)p.y, (double)q.x, (double)q.y, thr2);
        }
        block_count(&s_cnt, c);
    }
    __syncthreads();
    // 4. the last block selects
    if (t == 0) {
        valid[h] = s_ok ? 1 : 0;
        count[h] = s_ok ? (int)s_cnt : 0;
    }
    __threadfence();                      // this block's writes (block 0: the candidates) before it counts
    __syncthreads();
    if (t == 0) s_last = atomicInc(done, RS_HYPOTHESES - 1) == RS_HYPOTHESES - 1;   // wraps to 0
    __syncthreads();
    if (!s_last) return;                  // block-uniform
    __threadfence();
    rs_select(hdr, x1, x2, cand, flag, F, count, n, thr2, confidence, inl, reject, state);
}
#endif
