// What the track-table kernels (frontend.cu, ransac.cu) share: the track status codes and the
// block-wide helpers of their kernels (warp sums, shared counters, an exclusive scan over a block).
#pragma once

#define TT_THREADS 1024          // table kernels: one block of 1024 threads
#define FULL_MASK 0xffffffffu
#define ST_TRACKED 0             // vilib_ros.types.TrackStatus
#define ST_LEFT_IMAGE 1
#define ST_DIVERGED 2
#define ST_NOT_CONVERGED 3

__device__ __forceinline__ unsigned int warp_sum_u32(unsigned int v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Add a per-thread count to a shared counter: a warp sum first, then one atomic per warp (many
// threads adding to one address would serialise).
__device__ __forceinline__ void block_count(unsigned int* counter, unsigned int v)
{
    v = warp_sum_u32(v);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(counter, v);
}

// Exclusive prefix sum of `v` over a block of THREADS threads (thread order; a multiple of 32, at
// most 1024: the table kernels' TT_THREADS by default, ransac_frame's RS_THREADS); *total = sum.
template <int THREADS = TT_THREADS>
__device__ __forceinline__ int block_exclusive_scan(int v, int* total)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 32 of them");
    constexpr int WARPS = THREADS / 32;
    __shared__ int warp_sums[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < WARPS ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL_MASK, w, o);
            if (lane >= o) w += y;
        }
        if (lane < WARPS) warp_sums[lane] = w;
    }
    __syncthreads();
    const int excl = x - v + (warp > 0 ? warp_sums[warp - 1] : 0);
    *total = warp_sums[WARPS - 1];
    __syncthreads();                      // warp_sums may be reused by the next scan
    return excl;
}
