// Benchmark helper: keep the GPU busy for `cycles` clock cycles (one thread), so that the
// host can enqueue a whole sequence behind it and CUDA events then time pure GPU execution
// without host launch gaps.
#include "pdl.cuh"
extern "C" __global__ void gpu_spin(long long cycles)
{
    PDL_ENTRY();
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Benchmark helper (bench-link): copy n 16-byte words from `src` to `dst`, as the frame pyramid's
// first step reads a page-locked frame over PCIe. Thread mapping: one thread per 16-byte word,
// blocks of 256 (every thread one load: all of the frame's reads in flight at once).
extern "C" __global__ void read_words(const uint4* __restrict__ src, uint4* __restrict__ dst, int n)
{
    PDL_ENTRY();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

// Benchmark helper (bench/streamed_upload_probe.py): thread 0 of each block makes one strong
// load at system scope of flags[stride_words * (blockIdx.x / share)], as the pyramid's blocks
// poll their flags in a streamed upload (share blocks read one word; stride 32 words = one
// 128-byte line apart). Thread mapping: one block of 32 threads per pyramid tile.
extern "C" __global__ void poll_flags(const unsigned int* flags, int stride_words, int share, unsigned int* out)
{
    PDL_ENTRY();
    if (threadIdx.x != 0) return;
    unsigned int v;
    const unsigned int* p = flags + (long long)stride_words * (blockIdx.x / share);
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    out[blockIdx.x] = v;
}

// Benchmark helper (bench/pdl_probe.py): one link of a chain of dependent launches. Thread 0
// reads x[0], records it in trace[step] and writes it plus one: a launch that ran before its
// predecessor finished would record a stale value. Thread mapping: one block, only thread 0 works.
extern "C" __global__ void chain_step(int* x, int* trace, int step)
{
    PDL_ENTRY();
    if (threadIdx.x != 0) return;
    const int v = x[0];
    trace[step] = v;
    x[0] = v + 1;
}
