// Non-maxima suppression with per-cell maximum selection (NMS-C), and the full-map
// baseline (Foerstner spiral NMS writing a suppressed map + a separate cell selection).
//
// Level descriptors: `desc` holds 4 long longs per detection level k:
//   [score map device pointer (float*), pitch (floats), width, height].
//
// nms_cell (combined, the paper's kernel). Thread mapping: one block per grid cell,
// blockDim = (32, M): M warps per cell. On level k the cell is (cell_w>>k) x (cell_h>>k)
// level-k pixels; its pixels are walked in raster order with stride 32*M, so for cells at
// least 32 wide a warp takes a 32-pixel cell line segment (thread = column) and consecutive
// warps take consecutive lines; narrower cells put several lines into one warp. Each thread
// tests its pixel against its (2n+1)^2 Moore neighbourhood in spiral order (ring by ring,
// early exit) and keeps its best (score, key) in registers, key = level<<28 | y<<14 | x.
// Warp: shuffle-down reduction; warps: shared memory; thread 0 writes the cell's winner.
// Order: higher score, then lower key (lower level, then lower y, then lower x).
//
// Suppression rule (radius n = NMS_R): survive iff s > 0, no neighbour > s, and no
// neighbour == s that comes earlier in raster order (dy < 0, or dy == 0 and dx < 0).
#include "pdl.cuh"
#ifndef NMS_R
#define NMS_R 1
#endif

// The ring walk below is written out in both tests on purpose: with a shared __device__ helper
// for the ring offsets, the offsets would not fold to constants and NMS-C would slow down at large n.
// Spiral test, ring by ring (Foerstner): ring r = 1..NMS_R is walked clockwise from its
// top-left corner; the 8r loads of one ring are issued together (no branch between them, so
// they overlap), and the test exits early after the first ring that suppresses the pixel.
__device__ __forceinline__ bool nms_suppressed(const float* __restrict__ map, int pitch, int w, int h,
                                               int x, int y, float s)
{
#pragma unroll
    for (int r = 1; r <= NMS_R; ++r) {
        bool sup = false;
#pragma unroll
        for (int j = 0; j < 8 * r; ++j) {
            int dx, dy;
            if (j < 2 * r)      { dx = -r + j;           dy = -r; }
            else if (j < 4 * r) { dx = r;                dy = -r + (j - 2 * r); }
            else if (j < 6 * r) { dx = r - (j - 4 * r);  dy = r; }
            else                { dx = -r;               dy = r - (j - 6 * r); }
            const int xx = x + dx, yy = y + dy;
            const bool inside = xx >= 0 && yy >= 0 && xx < w && yy < h;
            const float q = inside ? __ldg(map + (long long)yy * pitch + xx) : 0.0f;
            // a greater neighbour, or an equal one earlier in raster order, suppresses
            sup |= (q > s) || (q == s && (dy < 0 || (dy == 0 && dx < 0)));
        }
        if (sup) return true;
    }
    return false;
}

// The same test on a shared-memory tile holding the cell plus an NMS_R apron (0 outside the
// map), so no bounds checks: (tx, ty) are the pixel's tile coordinates, tw the tile width.
__device__ __forceinline__ bool nms_suppressed_tile(const float* tile, int tw, int tx, int ty, float s)
{
#pragma unroll
    for (int r = 1; r <= NMS_R; ++r) {
        bool sup = false;
#pragma unroll
        for (int j = 0; j < 8 * r; ++j) {
            int dx, dy;
            if (j < 2 * r)      { dx = -r + j;           dy = -r; }
            else if (j < 4 * r) { dx = r;                dy = -r + (j - 2 * r); }
            else if (j < 6 * r) { dx = r - (j - 4 * r);  dy = r; }
            else                { dx = -r;               dy = r - (j - 6 * r); }
            const float q = tile[(ty + dy) * tw + tx + dx];
            sup |= (q > s) || (q == s && (dy < 0 || (dy == 0 && dx < 0)));
        }
        if (sup) return true;
    }
    return false;
}

__device__ __forceinline__ bool better(float s, unsigned int k, float bs, unsigned int bk)
{
    return s > bs || (s == bs && k < bk);
}

#define MAX_WARPS 32
#define PIX 4
#define TILE_BATCH 8

// Compile-time geometry (the detector passes its config as -D defines; 0 = take the kernel
// arguments): with the cell size and the level count known, the level loop unrolls and every
// pixel-index division / modulo by the (per level) cell or tile width becomes a shift or a
// multiply: otherwise most of the per-thread instructions of these short kernels.
#ifndef NMS_CW
#define NMS_CW 0
#endif
#ifndef NMS_CH
#define NMS_CH 0
#endif
#ifndef NMS_LEVELS
#define NMS_LEVELS 0
#endif
// largest block (32 * warps per cell) the cell kernels are launched with (register budget)
#ifndef NMS_MAX_THREADS
#define NMS_MAX_THREADS 512
#endif

template <bool DO_NMS, bool SMEM>
__device__ __forceinline__ void cell_kernel(const long long* __restrict__ desc, int levels,
                                            int cell_w, int cell_h, int cols,
                                            const unsigned char* __restrict__ occupancy, int use_occupancy,
                                            float* __restrict__ out_x, float* __restrict__ out_y,
                                            float* __restrict__ out_score, int* __restrict__ out_level,
                                            const long long* __restrict__ gate)
{
    if (gate != nullptr && *gate == 0) return;   // whole block: redetection not needed this frame
    __shared__ float sh_s[MAX_WARPS];
    __shared__ unsigned int sh_k[MAX_WARPS];
    if (NMS_CW > 0) cell_w = NMS_CW;
    if (NMS_CH > 0) cell_h = NMS_CH;
    if (NMS_LEVELS > 0) levels = NMS_LEVELS;
    const int cell = blockIdx.y * cols + blockIdx.x;
    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    const int tid = warp * 32 + lane;
    const int nthreads = 32 * blockDim.y;
    if (use_occupancy && occupancy[cell]) {
        if (tid == 0) { out_x[cell] = -1.0f; out_y[cell] = -1.0f; out_score[cell] = 0.0f; out_level[cell] = -1; }
        return;
    }
    extern __shared__ float tile[];
    if (SMEM) {
        // Stage every level's cell + apron in shared memory, levels back to back in one
        // flattened index space: the loads of a batch (TILE_BATCH per thread, coalesced along
        // tile rows) are issued together, so all levels usually cost one memory latency.
        int total = 0;
        for (int k = 0; k < levels; ++k)
            total += ((cell_w >> k) + 2 * NMS_R) * ((cell_h >> k) + 2 * NMS_R);
        for (int b = 0; b < total; b += TILE_BATCH * nthreads) {
            float v[TILE_BATCH];
#pragma unroll
            for (int j = 0; j < TILE_BATCH; ++j) {
                const int i = b + tid + j * nthreads;
                int li = i, k = 0;
                int tw = cell_w + 2 * NMS_R, th = cell_h + 2 * NMS_R;
                while (k + 1 < levels && li >= tw * th) {   // which level's tile holds index i
                    li -= tw * th;
                    ++k;
                    tw = (cell_w >> k) + 2 * NMS_R;
                    th = (cell_h >> k) + 2 * NMS_R;
                }
                const float* map = reinterpret_cast<const float*>(desc[4 * k]);
                const int pitch = (int)desc[4 * k + 1], w = (int)desc[4 * k + 2], h = (int)desc[4 * k + 3];
                const int gy = blockIdx.y * (cell_h >> k) - NMS_R + (int)((unsigned)li / (unsigned)tw);
                const int gx = blockIdx.x * (cell_w >> k) - NMS_R + (int)((unsigned)li % (unsigned)tw);
                const bool ok = i < total && gx >= 0 && gy >= 0 && gx < w && gy < h;
                v[j] = ok ? __ldg(map + (long long)gy * pitch + gx) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < TILE_BATCH; ++j) {
                const int i = b + tid + j * nthreads;
                if (i < total) tile[i] = v[j];
            }
        }
        __syncthreads();
    }
    float best_s = 0.0f;
    unsigned int best_k = 0xFFFFFFFFu;
    int toff = 0;
#pragma unroll
    for (int k = 0; k < (NMS_LEVELS > 0 ? NMS_LEVELS : 4); ++k) {
        if (k >= levels) break;
        const float* map = reinterpret_cast<const float*>(desc[4 * k]);
        const int pitch = (int)desc[4 * k + 1], w = (int)desc[4 * k + 2], h = (int)desc[4 * k + 3];
        const int cw = cell_w >> k, ch = cell_h >> k;
        const int x0 = blockIdx.x * cw, y0 = blockIdx.y * ch;
        const int npx = cw * ch;
        const int tw = cw + 2 * NMS_R;
        const float* t = tile + toff;
        if (SMEM) toff += tw * (ch + 2 * NMS_R);
        // PIX pixels per thread per step, loaded together; a thread's visiting order
        // (i, i + nthreads, ...) is raster order, so its keys only increase.
        // The loop bound is warp-uniform (the vote below needs the whole warp).
        for (int wbase = warp * 32; wbase < npx; wbase += PIX * nthreads) {
            const int base = wbase + lane;
            float sv[PIX];
            int xs[PIX], ys[PIX];
#pragma unroll
            for (int j = 0; j < PIX; ++j) {
                const int i = base + j * nthreads;
                ys[j] = y0 + (int)((unsigned)i / (unsigned)cw);
                xs[j] = x0 + (int)((unsigned)i % (unsigned)cw);
                const bool ok = i < npx && xs[j] < w && ys[j] < h;
                if (SMEM)
                    sv[j] = ok ? t[(ys[j] - y0 + NMS_R) * tw + xs[j] - x0 + NMS_R] : 0.0f;
                else
                    sv[j] = ok ? __ldg(map + (long long)ys[j] * pitch + xs[j]) : 0.0f;
            }
            // Candidates: pixels with a score above the thread's best. The warp tests one
            // candidate per lane per round (in j order within a lane), so the rounds are the
            // most candidates any lane has, not the sum over j.
            unsigned int pending = 0u;
#pragma unroll
            for (int j = 0; j < PIX; ++j) pending |= (sv[j] > best_s ? 1u : 0u) << j;
            while (__any_sync(0xFFFFFFFFu, pending != 0u)) {
                float s = 0.0f;
                int x = 0, y = 0;
                if (pending) {
                    const int j = __ffs(pending) - 1;
                    pending &= pending - 1u;
#pragma unroll
                    for (int q = 0; q < PIX; ++q)
                        if (q == j) { s = sv[q]; x = xs[q]; y = ys[q]; }
                }
                // only a strictly higher score can beat the thread's best so far
                bool cand = s > best_s;
                if (cand && DO_NMS) {
                    if (SMEM)
                        cand = !nms_suppressed_tile(t, tw, x - x0 + NMS_R, y - y0 + NMS_R, s);
                    else
                        cand = !nms_suppressed(map, pitch, w, h, x, y, s);
                }
                if (cand) {
                    best_s = s;
                    best_k = ((unsigned int)k << 28) | ((unsigned int)y << 14) | (unsigned int)x;
                }
            }
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float os = __shfl_down_sync(0xFFFFFFFFu, best_s, off);
        const unsigned int ok = __shfl_down_sync(0xFFFFFFFFu, best_k, off);
        if (better(os, ok, best_s, best_k)) { best_s = os; best_k = ok; }
    }
    if (lane == 0) { sh_s[warp] = best_s; sh_k[warp] = best_k; }
    __syncthreads();
    if (tid == 0) {
        for (int wi = 1; wi < (int)blockDim.y; ++wi)
            if (better(sh_s[wi], sh_k[wi], best_s, best_k)) { best_s = sh_s[wi]; best_k = sh_k[wi]; }
        if (best_s > 0.0f) {
            const int k = (int)(best_k >> 28);
            out_x[cell] = (float)((int)(best_k & 0x3FFFu) << k);
            out_y[cell] = (float)((int)((best_k >> 14) & 0x3FFFu) << k);
            out_score[cell] = best_s;
            out_level[cell] = k;
        } else {
            out_x[cell] = -1.0f; out_y[cell] = -1.0f; out_score[cell] = 0.0f; out_level[cell] = -1;
        }
    }
}

// Combined NMS + cell maximum (NMS-C). grid = (cols, rows), block = (32, M). `gate` (nullable):
// when the device flag is 0 every block returns at once (the frontend's redetection gate).
extern "C" __global__ void __launch_bounds__(NMS_MAX_THREADS) nms_cell(const long long* __restrict__ desc, int levels, int cell_w, int cell_h,
                                    int cols, const unsigned char* __restrict__ occupancy, int use_occupancy,
                                    float* out_x, float* out_y, float* out_score, int* out_level, const long long* gate)
{
    PDL_ENTRY();
    cell_kernel<true, false>(desc, levels, cell_w, cell_h, cols, occupancy, use_occupancy, out_x, out_y, out_score, out_level, gate);
}

// NMS-C with the cell (+ apron) staged in shared memory first. Same grid and block; dynamic
// shared memory = 4 * sum_k (cell_w/2^k + 2 NMS_R) * (cell_h/2^k + 2 NMS_R) bytes.
extern "C" __global__ void __launch_bounds__(NMS_MAX_THREADS) nms_cell_smem(const long long* __restrict__ desc, int levels, int cell_w, int cell_h,
                                         int cols, const unsigned char* __restrict__ occupancy, int use_occupancy,
                                         float* out_x, float* out_y, float* out_score, int* out_level, const long long* gate)
{
    PDL_ENTRY();
    cell_kernel<true, true>(desc, levels, cell_w, cell_h, cols, occupancy, use_occupancy, out_x, out_y, out_score, out_level, gate);
}

// Baseline step 2: cell maximum of already suppressed maps (no neighbourhood test).
extern "C" __global__ void __launch_bounds__(NMS_MAX_THREADS) cell_select(const long long* __restrict__ desc, int levels, int cell_w, int cell_h,
                                       int cols, const unsigned char* __restrict__ occupancy, int use_occupancy,
                                       float* out_x, float* out_y, float* out_score, int* out_level, const long long* gate)
{
    PDL_ENTRY();
    cell_kernel<false, false>(desc, levels, cell_w, cell_h, cols, occupancy, use_occupancy, out_x, out_y, out_score, out_level, gate);
}

// Baseline step 1: full-map spiral NMS (Foerstner). Thread mapping: one thread per pixel of
// level blockIdx.z (block 32x8, grid sized for level 0; threads outside a level's map exit).
// Writes the suppressed map: the score where the pixel survives, else 0.
extern "C" __global__ void nms_full(const long long* __restrict__ desc_in, const long long* __restrict__ desc_out)
{
    PDL_ENTRY();
    const int k = blockIdx.z;
    const float* map = reinterpret_cast<const float*>(desc_in[4 * k]);
    float* out = reinterpret_cast<float*>(desc_out[4 * k]);
    const int pitch = (int)desc_in[4 * k + 1], w = (int)desc_in[4 * k + 2], h = (int)desc_in[4 * k + 3];
    const int opitch = (int)desc_out[4 * k + 1];
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const float s = __ldg(map + (long long)y * pitch + x);
    const bool keep = s > 0.0f && !nms_suppressed(map, pitch, w, h, x, y, s);
    out[(long long)y * opitch + x] = keep ? s : 0.0f;
}
