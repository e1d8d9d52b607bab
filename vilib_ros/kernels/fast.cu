// FAST corner response (CRF) with the paper's bit-packed 8 KB segment-test table.
// Thread mapping: one thread per pixel (x, y) of a pyramid level (blockIdx.z = level); block 32x8,
// so a warp reads one 32-pixel line segment (coalesced). Pixels inside the map but within `border`
// of its edge get score 0; every pixel x < w, y < h is written (no pre-zeroing needed).
// Compile-time defines: FAST_N (arc length 9..12), FAST_SCORE (0 SAD-B, 1 SAD-A, 2 MT).
// MT is found by binary search with the LUT here and by sliding-window minima in the NumPy
// reference: two independent formulations of one definition.
// Definitions match vilib_ros/frontend/reference/detector.py (fast_score_cpu) bit for bit.
#include "pdl.cuh"
#ifndef FAST_N
#define FAST_N 10
#endif
#ifndef FAST_SCORE
#define FAST_SCORE 1
#endif

__device__ __forceinline__ unsigned int rotr16(unsigned int m, int k)
{
    return ((m >> k) | (m << (16 - k))) & 0xFFFFu;
}

__device__ __forceinline__ unsigned int rotl16(unsigned int m, int k)
{
    return ((m << k) | (m >> (16 - k))) & 0xFFFFu;
}

// Table lookup: the upper 11 bits pick the 32-bit word, the lower 5 bits pick the bit.
__device__ __forceinline__ unsigned int lut_bit(const unsigned int* __restrict__ lut, unsigned int idx)
{
    return (__ldg(lut + (idx >> 5)) >> (idx & 31u)) & 1u;
}

// Bits of m lying in a circular run of >= FAST_N set bits.
__device__ __forceinline__ unsigned int arc_coverage(unsigned int m)
{
    unsigned int w = m;
#pragma unroll
    for (int k = 1; k < FAST_N; ++k) w &= rotr16(m, k);
    unsigned int c = w;
#pragma unroll
    for (int k = 1; k < FAST_N; ++k) c |= rotl16(w, k);
    return c;
}

// Segment test at threshold t: a circular run of >= FAST_N all-darker or all-brighter pixels.
__device__ __forceinline__ unsigned int segment_test(const unsigned int* __restrict__ lut, const int* d, int t)
{
    unsigned int dark = 0u, bright = 0u;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        dark |= (unsigned int)(d[i] < -t) << i;
        bright |= (unsigned int)(d[i] > t) << i;
    }
    return lut_bit(lut, dark) | lut_bit(lut, bright);
}

// Corner response of pixel (x, y) of one level (0 outside the border, or where the test fails).
__device__ __forceinline__ float crf_pixel(const unsigned char* __restrict__ img, int img_pitch, int w, int h,
                                           int x, int y, const unsigned int* __restrict__ lut, int threshold,
                                           int border)
{
    float out = 0.0f;
    if (x >= border && y >= border && x < w - border && y < h - border) {
        const unsigned char* p = img + (long long)y * img_pitch + x;
        const int c = __ldg(p);
        // circle pixel i at (dx, dy), clockwise from straight above (fast_lut.CIRCLE)
        const int dxs[16] = {0, 1, 2, 3, 3, 3, 2, 1, 0, -1, -2, -3, -3, -3, -2, -1};
        const int dys[16] = {-3, -3, -2, -1, 0, 1, 2, 3, 3, 3, 2, 1, 0, -1, -2, -3};
        int d[16];
        unsigned int dark = 0u, bright = 0u;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            d[i] = (int)__ldg(p + dys[i] * img_pitch + dxs[i]) - c;
            dark |= (unsigned int)(d[i] < -threshold) << i;
            bright |= (unsigned int)(d[i] > threshold) << i;
        }
        if (lut_bit(lut, dark) | lut_bit(lut, bright)) {
#if FAST_SCORE == 0
            int s = 0;
#pragma unroll
            for (int i = 0; i < 16; ++i) s += abs(d[i]);
            out = (float)s;
#elif FAST_SCORE == 1
            const unsigned int cov = arc_coverage(dark) | arc_coverage(bright);
            int s = 0;
#pragma unroll
            for (int i = 0; i < 16; ++i) s += ((cov >> i) & 1u) ? abs(d[i]) : 0;
            out = (float)s;
#else
            // MT: the largest integer threshold at which the segment test still passes,
            // by binary search over [threshold, 254] with the same LUT (it passes at
            // `threshold`; no |difference| exceeds 255, so nothing passes at 255).
            int lo = threshold, hi = 254;
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (segment_test(lut, d, mid)) lo = mid; else hi = mid - 1;
            }
            out = (float)lo;
#endif
        }
    }
    return out;
}

// Every detection level in one launch: blockIdx.z = level k, grid sized for level 0 (blocks
// outside level k's map exit); a block covers rows y = blockIdx.y * 8 + threadIdx.y + i *
// gridDim.y * 8 (a grid-stride loop: the frontend launches few block rows, so that a launch
// whose gate is off costs few blocks). Level descriptors, 4 long longs per level:
//   img_desc[4k..]   = [uint8 image pointer, pitch (bytes), width, height]
//   score_desc[4k..] = [float score map pointer, pitch (floats), width, height]
// `gate` (nullable): a device flag; when it is 0 the kernel does nothing (the frontend's
// redetection runs only on frames whose live tracks fell below the fraction).
extern "C" __global__ void fast_crf_levels(const long long* __restrict__ img_desc,
                                           const long long* __restrict__ score_desc, int levels,
                                           const unsigned int* __restrict__ lut, int threshold, int border,
                                           const long long* __restrict__ gate)
{
    PDL_ENTRY();
    const int k = blockIdx.z;
    if (k >= levels) return;
    if (gate != nullptr && *gate == 0) return;
    const int w = (int)img_desc[4 * k + 2], h = (int)img_desc[4 * k + 3];
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= w) return;
    const unsigned char* img = reinterpret_cast<const unsigned char*>(img_desc[4 * k]);
    float* score = reinterpret_cast<float*>(score_desc[4 * k]);
    const int img_pitch = (int)img_desc[4 * k + 1], score_pitch = (int)score_desc[4 * k + 1];
    for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < h; y += gridDim.y * blockDim.y)
        score[(long long)y * score_pitch + x] = crf_pixel(img, img_pitch, w, h, x, y, lut, threshold, border);
}
