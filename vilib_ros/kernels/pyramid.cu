// Image pyramid: one level halving step.
// Thread mapping: one thread per OUTPUT pixel (x, y) of the smaller level; block 32x8.
// dst(x, y) = (src(2x,2y) + src(2x+1,2y) + src(2x,2y+1) + src(2x+1,2y+1) + 2) >> 2.
extern "C" __global__ void pyramid_halve(const unsigned char* __restrict__ src, int src_pitch,
                                         unsigned char* __restrict__ dst, int dst_pitch,
                                         int dst_w, int dst_h)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dst_w || y >= dst_h) return;
    const unsigned char* r0 = src + (long long)(2 * y) * src_pitch + 2 * x;
    const unsigned char* r1 = r0 + src_pitch;
    const unsigned int s = (unsigned int)__ldg(r0) + __ldg(r0 + 1) + __ldg(r1) + __ldg(r1 + 1) + 2u;
    dst[(long long)y * dst_pitch + x] = (unsigned char)(s >> 2);
}
