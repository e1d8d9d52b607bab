// Benchmark helper: keep the GPU busy for `cycles` clock cycles (one thread), so that the
// host can enqueue a whole sequence behind it and CUDA events then time pure GPU execution
// without host launch gaps.
extern "C" __global__ void gpu_spin(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
