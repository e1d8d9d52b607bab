// The GPU frontend's track table (vilib_ros.frontend.gpu.frame): the device twin of
// vilib_ros.frontend.track_table.TrackTable, with the same decisions in the same order (the
// tests run both on the same frames and compare ids and positions).
//
// The table holds `count` live tracks in slots 0..count-1, compacted and oldest first, as
// structure-of-arrays of `capacity` slots (ids, uv, xy, vel, score, level, age). Its header
// hdr[H_*] and counters cnt[C_*] are int64; the indices are compile-time defines made from
// vilib_ros.frontend.config.HEADER and COUNTERS (one name for one thing).
//
// Per frame (one CUDA graph): pyramid_frame -> lk_frontend (temporal; lk_template_* with stored
// templates, lk_template_fb_* with the forward-backward check fused) [-> lk_frontend (backward),
// frame to frame] [-> ransac_frame] -> table_update ->
// fast_crf_levels -> nms_cell (both gated by hdr[H_DETECT]) -> finalize (new tracks, gated, and
// the result) [-> lk_extract: the templates due] [stereo frames: finalize without the result ->
// lk_frontend (stereo) -> pack_output].
//
// Stored templates (vilib_ros.frontend.reference.templates; tracker.template 'reference' or warp 'affine'):
// per slot also the template's bank row `tslot` (moved with the slot; bank rows stay put), the
// last LK illumination `gain` / `offset`, warp `affine` and mean |residual|, the template's age
// `tmpl_age`, and `refresh` (1: lk_extract takes the slot's template from this frame). Where
// `tslot` is null these columns are not touched (frame-to-frame tracking).
#include "pdl.cuh"
#include "camera.cuh"
#include "frame.cuh"
#include "table.cuh"

#define TT_PER_THREAD 4          // slots per thread: capacity <= 4096
#define TT_CELLS_PER_THREAD 8    // detector cells per thread: <= 8192 cells

// After LK: keep the tracked slots (forward-backward and RANSAC rejects dropped), compact them to
// the front in their order, update position, undistorted position, velocity and age; mark the
// detector cells that hold a live track; set the redetection flag (live == 0 or live <
// detect_below = min_track_fraction * target); count the outcomes.
// Thread mapping: one block; thread t owns the contiguous slots [t * per, (t + 1) * per).
extern "C" __global__ void __launch_bounds__(TT_THREADS) table_update(
    long long* __restrict__ hdr, long long* __restrict__ cnt,
    long long* __restrict__ ids, float2* __restrict__ uv, float2* __restrict__ xy, float2* __restrict__ vel,
    float* __restrict__ score, int* __restrict__ level, int* __restrict__ age,
    const float2* __restrict__ lk_pos, const signed char* __restrict__ lk_status,
    const float2* __restrict__ lk_xy, const int* __restrict__ lk_iters,
    const float2* __restrict__ fb_pos, const signed char* __restrict__ fb_status, float fb_threshold,
    const signed char* __restrict__ reject, const FrameParams* __restrict__ prm,
    unsigned char* __restrict__ occ, int cell_w, int cell_h, int rows, int cols, double detect_below,
    int* __restrict__ tslot, float* __restrict__ gain, float* __restrict__ offset, float4* __restrict__ affine,
    float* __restrict__ residual, int* __restrict__ tmpl_age, unsigned char* __restrict__ refresh,
    const float* __restrict__ lk_residual, const float* __restrict__ lk_gain, const float* __restrict__ lk_offset,
    const float4* __restrict__ lk_affine, int refresh_all, float refresh_residual, int max_age)
{
    PDL_ENTRY();
    __shared__ unsigned int s_cnt[8];
    const int t = threadIdx.x;
    if (t < 8) s_cnt[t] = 0u;
    __shared__ unsigned int s_ref;
    if (t == 0) s_ref = 0u;
    for (int c = t; c < rows * cols; c += TT_THREADS) occ[c] = 0;
    const int n = (int)hdr[H_COUNT];
    const float dt = prm->dt;
    const int per = (n + TT_THREADS - 1) / TT_THREADS;
    const int i0 = t * per;
    long long r_id[TT_PER_THREAD];
    float2 r_uv[TT_PER_THREAD], r_xy[TT_PER_THREAD], r_vel[TT_PER_THREAD];
    float r_score[TT_PER_THREAD];
    int r_level[TT_PER_THREAD], r_age[TT_PER_THREAD];
    bool r_keep[TT_PER_THREAD];
    // stored templates: bank row, illumination, warp, residual, template age, refresh flag
    const bool tpl = tslot != nullptr;
    int r_tslot[TT_PER_THREAD], r_tage[TT_PER_THREAD];
    float r_gain[TT_PER_THREAD], r_off[TT_PER_THREAD], r_res[TT_PER_THREAD];
    float4 r_aff[TT_PER_THREAD];
    bool r_ref[TT_PER_THREAD];
    unsigned int c_left = 0, c_div = 0, c_nc = 0, c_fb = 0, c_rs = 0, c_tr = 0, c_it = 0, c_ref = 0, kept = 0;
    __syncthreads();                      // s_cnt zeroed
#pragma unroll
    for (int j = 0; j < TT_PER_THREAD; ++j) {
        const int i = i0 + j;
        r_keep[j] = false;
        if (j >= per || i >= n) continue;
        // every load first, unconditionally (one memory latency, not a chain of them)
        const int st = lk_status[i], it = lk_iters[i];
        const float2 xn = lk_xy[i], xo = xy[i], p = lk_pos[i], u = uv[i], v0 = vel[i];
        r_id[j] = ids[i];
        r_score[j] = score[i];
        r_level[j] = level[i];
        r_age[j] = age[i] + 1;
        c_left += st == ST_LEFT_IMAGE;
        c_div += st == ST_DIVERGED;
        c_nc += st == ST_NOT_CONVERGED;
        bool keep = st == ST_TRACKED;
        if (keep) { ++c_tr; c_it += (unsigned int)it; }
        if (keep && fb_status != nullptr) {
            const float2 a = fb_pos[i];
            const float dx = a.x - u.x, dy = a.y - u.y;
            if (!(fb_status[i] == ST_TRACKED && sqrtf(dx * dx + dy * dy) < fb_threshold)) { ++c_fb; keep = false; }
        }
        if (keep && reject != nullptr && reject[i] != 0) { ++c_rs; keep = false; }
        if (!keep) continue;
        r_keep[j] = true;
        r_uv[j] = p;
        r_xy[j] = xn;
        r_vel[j] = dt > 0.f ? make_float2((xn.x - xo.x) / dt, (xn.y - xo.y) / dt) : v0;
        if (tpl) {      // the template is taken again where due (TrackTable.update, then CpuPipeline._refresh_templates)
            r_tslot[j] = tslot[i];
            r_tage[j] = tmpl_age[i] + 1;
            r_res[j] = lk_residual[i];
            const bool due = refresh_all != 0 || (refresh_residual > 0.f && r_res[j] > refresh_residual) ||
                             (max_age > 0 && r_tage[j] >= max_age);
            r_ref[j] = due;
            c_ref += due;
            if (due) {
                r_tage[j] = 0; r_gain[j] = 1.f; r_off[j] = 0.f; r_aff[j] = make_float4(1.f, 0.f, 0.f, 1.f);
            } else {
                r_gain[j] = lk_gain[i]; r_off[j] = lk_offset[i];
                r_aff[j] = lk_affine != nullptr ? lk_affine[i] : make_float4(1.f, 0.f, 0.f, 1.f);
            }
        }
        ++kept;
    }
    int total;
    int pos = block_exclusive_scan((int)kept, &total);   // ends with __syncthreads: every read is done
#pragma unroll
    for (int j = 0; j < TT_PER_THREAD; ++j) {
        if (!r_keep[j]) continue;
        ids[pos] = r_id[j]; uv[pos] = r_uv[j]; xy[pos] = r_xy[j]; vel[pos] = r_vel[j];
        score[pos] = r_score[j]; level[pos] = r_level[j]; age[pos] = r_age[j];
        if (tpl) {
            tslot[pos] = r_tslot[j]; tmpl_age[pos] = r_tage[j]; residual[pos] = r_res[j]; gain[pos] = r_gain[j];
            offset[pos] = r_off[j]; affine[pos] = r_aff[j]; refresh[pos] = r_ref[j] ? 1 : 0;
        }
        const int r = min(max((int)floorf(r_uv[j].y / (float)cell_h), 0), rows - 1);
        const int c = min(max((int)floorf(r_uv[j].x / (float)cell_w), 0), cols - 1);
        occ[r * cols + c] = 1;
        ++pos;
    }
    block_count(&s_cnt[0], c_left);
    block_count(&s_cnt[1], c_div);
    block_count(&s_cnt[2], c_nc);
    block_count(&s_cnt[3], c_fb);
    block_count(&s_cnt[4], c_rs);
    block_count(&s_cnt[5], c_tr);
    block_count(&s_cnt[6], c_it);
    block_count(&s_ref, c_ref);
    __syncthreads();
    if (t == 0) {
        cnt[C_LOST_LEFT_IMAGE] += (long long)s_cnt[0];
        cnt[C_LOST_DIVERGED] += (long long)s_cnt[1];
        cnt[C_LOST_NOT_CONVERGED] += (long long)s_cnt[2];
        cnt[C_FB_REJECTED] += (long long)s_cnt[3];
        cnt[C_RANSAC_REJECTED] += (long long)s_cnt[4];
        cnt[C_TRACKED_TOTAL] += (long long)s_cnt[5];
        cnt[C_ITERATIONS_TOTAL] += (long long)s_cnt[6];
        cnt[C_TRACKS_LOST] += (long long)(n - total);
        cnt[C_TEMPLATES_REFRESHED] += (long long)s_ref;
        hdr[H_COUNT] = total;
        hdr[H_DETECT] = (total == 0 || (double)total < detect_below) ? 1 : 0;
        hdr[H_NEW] = 0;
    }
}

// Template bank rows for the k new tracks in slots n_live.. : the k lowest rows that no live track
// (slots 0..n_live-1) names, in order (as TrackTable.add). A bitmap of the used rows in shared
// memory; thread t owns rows [t * TT_PER_THREAD, (t + 1) * TT_PER_THREAD); the free ones are ranked
// by a block scan. (A device function of `new_tracks`; capacity <= TT_THREADS * TT_PER_THREAD.)
__device__ __forceinline__ void free_rows(int* tslot, int n_live, int k, int capacity)
{
    __shared__ unsigned int used[TT_THREADS * TT_PER_THREAD / 32];
    const int t = threadIdx.x;
    for (int i = t; i < TT_THREADS * TT_PER_THREAD / 32; i += TT_THREADS) used[i] = 0u;
    __syncthreads();
    for (int i = t; i < n_live; i += TT_THREADS) {
        const int r = tslot[i];
        atomicOr(&used[r >> 5], 1u << (r & 31));
    }
    __syncthreads();
    const int r0 = t * TT_PER_THREAD;
    int nf = 0;
#pragma unroll
    for (int j = 0; j < TT_PER_THREAD; ++j) {
        const int r = r0 + j;
        nf += r < capacity && !((used[r >> 5] >> (r & 31)) & 1u);
    }
    int total;
    int rank = block_exclusive_scan(nf, &total);
#pragma unroll
    for (int j = 0; j < TT_PER_THREAD; ++j) {
        const int r = r0 + j;
        if (r < capacity && !((used[r >> 5] >> (r & 31)) & 1u)) {
            if (rank < k) tslot[n_live + rank] = r;
            ++rank;
        }
    }
}

// Redetection (only where hdr[H_DETECT] is set): the detector's cell winners (cells with a live
// track were masked by the occupancy) become new tracks. Where there are more than free slots,
// the strongest win (score, then lower cell index). New tracks are appended after the live ones
// in cell order, with id = next_id + cell index; next_id then advances by the number of cells,
// so ids never repeat and a track's id does not depend on the other cells.
// Thread mapping: one block; thread t owns the contiguous cells [t * per, (t + 1) * per).
// (A device function of `finalize`.)
__device__ __forceinline__ void new_tracks(
    long long* hdr, long long* cnt,
    long long* ids, float2* uv, float2* xy, float2* vel, float* score, int* level, int* age,
    const float* __restrict__ cell_x, const float* __restrict__ cell_y, const float* __restrict__ cell_score,
    const int* __restrict__ cell_level, int n_cells, const float* __restrict__ cam, int capacity,
    int* tslot, float* gain, float* offset, float4* affine, float* residual, int* tmpl_age, unsigned char* refresh)
{
    const int t = threadIdx.x;
    const int n_live = (int)hdr[H_COUNT];
    const long long base_id = hdr[H_NEXT_ID];
    const int free_slots = capacity - n_live;
    const int per = (n_cells + TT_THREADS - 1) / TT_THREADS;
    const int c0 = t * per;
    bool take[TT_CELLS_PER_THREAD];
    int nv = 0;
#pragma unroll
    for (int j = 0; j < TT_CELLS_PER_THREAD; ++j) {
        const int c = c0 + j;
        take[j] = j < per && c < n_cells && cell_level[c] >= 0 && isfinite(cell_x[c]) && isfinite(cell_y[c]);
        nv += take[j];
    }
    int n_valid;
    block_exclusive_scan(nv, &n_valid);
    if (n_valid > free_slots) {           // block-uniform: keep the free_slots strongest
        nv = 0;
#pragma unroll
        for (int j = 0; j < TT_CELLS_PER_THREAD; ++j) {
            if (!take[j]) continue;
            const int c = c0 + j;
            const float s = cell_score[c];
            int rank = 0;
            for (int q = 0; q < n_cells; ++q) {
                if (cell_level[q] < 0 || !isfinite(cell_x[q]) || !isfinite(cell_y[q])) continue;
                const float sq = cell_score[q];
                rank += (sq > s) || (sq == s && q < c);
            }
            take[j] = rank < free_slots;
            nv += take[j];
        }
    }
    int k;
    int pos = n_live + block_exclusive_scan(nv, &k);
#pragma unroll
    for (int j = 0; j < TT_CELLS_PER_THREAD; ++j) {
        if (!take[j]) continue;
        const int c = c0 + j;
        const float u = cell_x[c], v = cell_y[c];
        ids[pos] = base_id + c;
        uv[pos] = make_float2(u, v);
        xy[pos] = undistort_px(u, v, cam);
        vel[pos] = make_float2(0.f, 0.f);
        score[pos] = cell_score[c];
        level[pos] = cell_level[c];
        age[pos] = 0;
        if (tslot != nullptr) {           // a template to take (lk_extract), relative to which nothing has changed yet
            gain[pos] = 1.f; offset[pos] = 0.f; affine[pos] = make_float4(1.f, 0.f, 0.f, 1.f);
            residual[pos] = 0.f; tmpl_age[pos] = 0; refresh[pos] = 1;
        }
        ++pos;
    }
    if (tslot != nullptr)                 // block-uniform
        free_rows(tslot, n_live, k, capacity);
    __syncthreads();                      // every thread has read hdr before it changes
    if (t == 0) {
        hdr[H_COUNT] = n_live + k;
        hdr[H_NEW] = k;
        if (k > 0) hdr[H_NEXT_ID] = base_id + n_cells;
        cnt[C_DETECTION_RUNS] += 1;
        cnt[C_TRACKS_NEW] += k;
        cnt[C_REDETECTIONS] += k > 0 ? 1 : 0;
    }
    __syncthreads();                      // the new count is seen by every thread
}

// The frame's result into its output slot (page-locked host memory, written directly:
// zero-copy), the layout of vilib_ros.frontend.gpu.frame.result_layout (byte offsets as
// arguments): header and counters, then per live track id, uv, xy and velocity (as double), score,
// level, age, and on stereo frames the right-image position (NaN where not matched).
// Thread mapping: slot i by thread i (rows i, i + blockDim.x * gridDim.x, ...); block 0 also writes
// header and counters.
// (No __restrict__ on the table: in `finalize` the same block has just written it, and restrict
// would allow loads through the non-coherent read-only cache.)
#define PACK_ARGS                                                                                 \
    const long long* hdr, const long long* cnt, const FrameParams* __restrict__ prm,              \
    const long long* ids, const float2* uv, const float2* xy, const float2* vel, const float* score,  \
    const int* level, const int* age, const float2* __restrict__ st_pos, const float2* __restrict__ st_xy, \
    int n_hdr, int n_cnt, int o_hdr, int o_cnt, int o_ids, int o_uv, int o_xy, int o_vel, int o_score, \
    int o_level, int o_age, int o_uvr, int o_xyr
#define PACK_PASS hdr, cnt, prm, ids, uv, xy, vel, score, level, age, st_pos, st_xy, n_hdr, n_cnt, o_hdr, \
    o_cnt, o_ids, o_uv, o_xy, o_vel, o_score, o_level, o_age, o_uvr, o_xyr

__device__ __forceinline__ void pack(PACK_ARGS)
{
    char* out = reinterpret_cast<char*>(prm->out);
    const int t = threadIdx.x;
    if (blockIdx.x == 0) {
        if (t < n_hdr) reinterpret_cast<long long*>(out + o_hdr)[t] = hdr[t];
        if (t < n_cnt) reinterpret_cast<long long*>(out + o_cnt)[t] = cnt[t];
    }
    const int n = (int)hdr[H_COUNT];
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) {
        reinterpret_cast<long long*>(out + o_ids)[i] = ids[i];
        reinterpret_cast<float2*>(out + o_uv)[i] = uv[i];
        const float2 q = xy[i], v = vel[i];
        reinterpret_cast<double2*>(out + o_xy)[i] = make_double2(q.x, q.y);
        reinterpret_cast<double2*>(out + o_vel)[i] = make_double2(v.x, v.y);
        reinterpret_cast<float*>(out + o_score)[i] = score[i];
        reinterpret_cast<int*>(out + o_level)[i] = level[i];
        reinterpret_cast<int*>(out + o_age)[i] = age[i];
        if (prm->stereo) {
            const float2 p = st_pos[i], r = st_xy[i];
            reinterpret_cast<float2*>(out + o_uvr)[i] = p;
            reinterpret_cast<double2*>(out + o_xyr)[i] = make_double2(r.x, r.y);
        }
    }
}

// Stereo frames: the result after the stereo match (blocks of 256 threads).
extern "C" __global__ void pack_output(PACK_ARGS)
{
    PDL_ENTRY();
    pack(PACK_PASS);
}

// The end of the frame: redetection (only where hdr[H_DETECT] is set) and, unless the frame is a
// stereo one (pack_output comes after the stereo match), the result. One block of TT_THREADS.
extern "C" __global__ void __launch_bounds__(TT_THREADS) finalize(
    long long* hdr_w, long long* cnt_w, long long* ids_w, float2* uv_w, float2* xy_w, float2* vel_w,
    float* score_w, int* level_w, int* age_w,
    const float* __restrict__ cell_x, const float* __restrict__ cell_y, const float* __restrict__ cell_score,
    const int* __restrict__ cell_level, int n_cells, const float* __restrict__ cam, int capacity, int do_pack,
    const FrameParams* __restrict__ prm, const float2* __restrict__ st_pos, const float2* __restrict__ st_xy,
    int n_hdr, int n_cnt, int o_hdr, int o_cnt, int o_ids, int o_uv, int o_xy, int o_vel, int o_score,
    int o_level, int o_age, int o_uvr, int o_xyr,
    int* tslot, float* gain, float* offset, float4* affine, float* residual, int* tmpl_age, unsigned char* refresh)
{
    PDL_ENTRY();
    if (hdr_w[H_DETECT] != 0)             // block-uniform
        new_tracks(hdr_w, cnt_w, ids_w, uv_w, xy_w, vel_w, score_w, level_w, age_w, cell_x, cell_y, cell_score,
                   cell_level, n_cells, cam, capacity, tslot, gain, offset, affine, residual, tmpl_age, refresh);
    if (do_pack)
        pack(hdr_w, cnt_w, prm, ids_w, uv_w, xy_w, vel_w, score_w, level_w, age_w, st_pos, st_xy, n_hdr, n_cnt,
             o_hdr, o_cnt, o_ids, o_uv, o_xy, o_vel, o_score, o_level, o_age, o_uvr, o_xyr);
}
