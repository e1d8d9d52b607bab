// Image pyramid: one level halving step.
// Thread mapping: one thread per OUTPUT pixel (x, y) of the smaller level; block 32x8.
// dst(x, y) = (src(2x,2y) + src(2x+1,2y) + src(2x,2y+1) + src(2x+1,2y+1) + 2) >> 2.
#include "pdl.cuh"
extern "C" __global__ void pyramid_halve(const unsigned char* __restrict__ src, int src_pitch,
                                         unsigned char* __restrict__ dst, int dst_pitch,
                                         int dst_w, int dst_h)
{
    PDL_ENTRY();
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dst_w || y >= dst_h) return;
    const unsigned char* r0 = src + (long long)(2 * y) * src_pitch + 2 * x;
    const unsigned char* r1 = r0 + src_pitch;
    const unsigned int s = (unsigned int)__ldg(r0) + __ldg(r0 + 1) + __ldg(r1) + __ldg(r1 + 1) + 2u;
    dst[(long long)y * dst_pitch + x] = (unsigned char)(s >> 2);
}

// ---------------------------------------------------------------------------------------------
// The frontend's frame pyramid in one launch: the level-0 frame is read where the host left it
// (page-locked host memory, read directly by the kernel = the upload; or a device array), copied
// into level 0 of the ring slot's pyramid, and levels 1..n_fused (<= 5) are built from it.
//
// Thread mapping: one block of 256 threads per 128x32 level-0 tile and camera (camera = cam_base +
// blockIdx.z: 0 = left, 1 = right; a stereo frame launches both at once, or each camera alone). Level 0: thread t loads 16 bytes of tile row t / 8 (8 threads per 128-byte
// row: one coalesced 128-byte request per row). Level k+1 of the tile ((128 >> k+1) x (32 >> k+1)
// pixels) is made from level k in shared memory, the same rounding as pyramid_halve, so every
// level equals the level-by-level build bit for bit. A level-k pixel inside the level's image
// only depends on level-0 pixels inside the image, so tiles need no apron.
// Block (0, 0, 0) of the left camera also copies the frame parameters to the device for the
// kernels after it.
// A streamed upload (FrameParams.ready != 0, left camera): thread 0 of each block first waits
// until the host has released the block's tile (the host stores ready_base + 1 into the tile's
// flag after copying the band of rows holding it), then the block reads the tile. A host that
// never finishes the copy (a crashed process) cannot hang the device: after PF_STREAM_TIMEOUT_NS
// the block goes on and stores 1 into the flag line after the last tile's, which the host counts
// as a timed-out frame.
#include "frame.cuh"

#define PF_STREAM_TIMEOUT_NS 1000000000ull
#define PF_FLAG_WORDS 32                // one 128-byte line per tile flag

__device__ __forceinline__ unsigned int pf_load_relaxed_sys(const unsigned int* p)
{
    unsigned int v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long pf_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Thread 0 waits until the host has released this block's tile (its flag, word 0 of the block's
// own 128-byte line: strong loads of one address from many blocks are served one after the other
// over PCIe, where loads of distinct lines overlap); the block then goes
// on. The flag follows the host's band copy, so the tile's bytes are in page-locked memory before.
__device__ __forceinline__ void pf_wait_tile(const FrameParams* __restrict__ hp)
{
    if (threadIdx.x == 0) {
        unsigned int* flags = reinterpret_cast<unsigned int*>(hp->ready);
        const unsigned int tile = blockIdx.y * gridDim.x + blockIdx.x;
        const unsigned int target = hp->ready_base + 1u;
        const unsigned long long t0 = pf_globaltimer();
        while ((int)(pf_load_relaxed_sys(flags + PF_FLAG_WORDS * tile) - target) < 0) {
            if (pf_globaltimer() - t0 > PF_STREAM_TIMEOUT_NS) {
                *reinterpret_cast<volatile unsigned int*>(flags + PF_FLAG_WORDS * hp->timeout_tile) = 1u;
                break;
            }
        }
    }
    __syncthreads();
}

#define PF_TW 128
#define PF_TH 32
#define PF_THREADS 256

template <int W, int H>
__device__ __forceinline__ void pf_halve(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                         unsigned char* __restrict__ gdst, int gx0, int gy0, int gw, int gh)
{
    constexpr int W2 = W / 2, H2 = H / 2;
    for (int p = threadIdx.x; p < W2 * H2; p += PF_THREADS) {
        const int r = p / W2, c = p % W2;
        const unsigned char* a = src + (2 * r) * W + 2 * c;
        const unsigned int s = (unsigned int)a[0] + a[1] + a[W] + a[W + 1] + 2u;
        const unsigned char v = (unsigned char)(s >> 2);
        dst[p] = v;
        const int gx = gx0 + c, gy = gy0 + r;
        if (gx < gw && gy < gh) gdst[(long long)gy * gw + gx] = v;
    }
}

extern "C" __global__ void __launch_bounds__(PF_THREADS) pyramid_frame(
    const FrameParams* __restrict__ hp, FrameParams* __restrict__ dp,
    const unsigned long long* __restrict__ levels, int max_levels, int w0, int h0, int n_fused, int cam_base)
{
    PDL_ENTRY();
    __shared__ __align__(16) unsigned char t0[PF_TH * PF_TW];
    __shared__ unsigned char t1[(PF_TH / 2) * (PF_TW / 2)];
    __shared__ unsigned char t2[(PF_TH / 4) * (PF_TW / 4)];
    __shared__ unsigned char t3[(PF_TH / 8) * (PF_TW / 8)];
    __shared__ unsigned char t4[(PF_TH / 16) * (PF_TW / 16)];
    __shared__ unsigned char t5[(PF_TH / 32) * (PF_TW / 32)];
    const int cam = cam_base + blockIdx.z, tid = threadIdx.x;
    if (cam == 0 && blockIdx.x == 0 && blockIdx.y == 0 && tid < (int)(sizeof(FrameParams) / 4))
        reinterpret_cast<int*>(dp)[tid] = reinterpret_cast<const int*>(hp)[tid];
    const unsigned long long s = hp->src[cam];
    if (s == 0ull) return;                                   // no right frame this time: whole block
    const unsigned char* src = reinterpret_cast<const unsigned char*>(s);
    unsigned char* L0 = reinterpret_cast<unsigned char*>(levels[cam * max_levels]);
    const bool copy0 = src != L0;
    const int x0 = blockIdx.x * PF_TW, y0 = blockIdx.y * PF_TH;
    if (cam == 0 && hp->ready != 0ull) pf_wait_tile(hp);
    {
        const int r = tid >> 3, c = (tid & 7) * 16;
        const int y = y0 + r, x = x0 + c;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (y < h0) {
            const long long o = (long long)y * w0 + x;
            if ((w0 & 15) == 0 && (s & 15ull) == 0 && x + 16 <= w0) {
                v = *reinterpret_cast<const uint4*>(src + o);
                if (copy0) *reinterpret_cast<uint4*>(L0 + o) = v;
            } else {
                unsigned char b[16];
#pragma unroll
                for (int k = 0; k < 16; ++k) {
                    b[k] = (x + k < w0) ? src[o + k] : (unsigned char)0;
                    if (copy0 && x + k < w0) L0[o + k] = b[k];
                }
                v = *reinterpret_cast<const uint4*>(b);
            }
        }
        *reinterpret_cast<uint4*>(t0 + r * PF_TW + c) = v;
    }
    __syncthreads();
    if (n_fused < 1) return;
    unsigned char* const* L = reinterpret_cast<unsigned char* const*>(levels + cam * max_levels);
    pf_halve<PF_TW, PF_TH>(t0, t1, L[1], x0 >> 1, y0 >> 1, w0 >> 1, h0 >> 1);
    __syncthreads();
    if (n_fused < 2) return;
    pf_halve<PF_TW / 2, PF_TH / 2>(t1, t2, L[2], x0 >> 2, y0 >> 2, w0 >> 2, h0 >> 2);
    __syncthreads();
    if (n_fused < 3) return;
    pf_halve<PF_TW / 4, PF_TH / 4>(t2, t3, L[3], x0 >> 3, y0 >> 3, w0 >> 3, h0 >> 3);
    __syncthreads();
    if (n_fused < 4) return;
    pf_halve<PF_TW / 8, PF_TH / 8>(t3, t4, L[4], x0 >> 4, y0 >> 4, w0 >> 4, h0 >> 4);
    __syncthreads();
    if (n_fused < 5) return;
    pf_halve<PF_TW / 16, PF_TH / 16>(t4, t5, L[5], x0 >> 5, y0 >> 5, w0 >> 5, h0 >> 5);
}
