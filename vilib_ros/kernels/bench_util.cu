// Benchmark helper: keep the GPU busy for `cycles` clock cycles (one thread), so that the
// host can enqueue a whole sequence behind it and CUDA events then time pure GPU execution
// without host launch gaps.
extern "C" __global__ void gpu_spin(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Benchmark helper (bench-link): copy n 16-byte words from `src` to `dst`, as the frame pyramid's
// first step reads a page-locked frame over PCIe. Thread mapping: one thread per 16-byte word,
// blocks of 256 (every thread one load: all of the frame's reads in flight at once).
extern "C" __global__ void read_words(const uint4* __restrict__ src, uint4* __restrict__ dst, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
