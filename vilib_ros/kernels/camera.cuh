// Camera models on the device: the same models and iterations as vilib_ros.camera.CameraModel.
// Camera parameters (cam[10], float): fx, fy, cx, cy, k1, k2, p1|k3, p2|k4, model, unused, with
// model 0 = none, 1 = radial-tangential (k1 k2 p1 p2), 2 = equidistant (k1 k2 k3 k4)
// (vilib_ros.frontend.stereo.cam_params builds the array).
#pragma once

#define CAM_NONE 0
#define CAM_RADTAN 1
#define CAM_EQUI 2

__device__ __forceinline__ float2 distort_norm(float x, float y, const float* __restrict__ c)
{
    const int model = (int)c[8];
    float xd = x, yd = y;
    if (model == CAM_RADTAN) {
        const float k1 = c[4], k2 = c[5], p1 = c[6], p2 = c[7];
        const float r2 = x * x + y * y, rad = 1.f + k1 * r2 + k2 * r2 * r2;
        xd = x * rad + 2.f * p1 * x * y + p2 * (r2 + 2.f * x * x);
        yd = y * rad + p1 * (r2 + 2.f * y * y) + 2.f * p2 * x * y;
    } else if (model == CAM_EQUI) {
        const float r = sqrtf(x * x + y * y);
        if (r > 1e-12f) {
            const float th = atanf(r), t2 = th * th;
            const float thd = th * (1.f + c[4] * t2 + c[5] * t2 * t2 + c[6] * t2 * t2 * t2 + c[7] * t2 * t2 * t2 * t2);
            xd = x * thd / r; yd = y * thd / r;
        }
    }
    return make_float2(c[0] * xd + c[2], c[1] * yd + c[3]);
}

__device__ __forceinline__ float2 undistort_px(float u, float v, const float* __restrict__ c)
{
    const int model = (int)c[8];
    const float xd = (u - c[2]) / c[0], yd = (v - c[3]) / c[1];
    if (model == CAM_RADTAN) {
        const float k1 = c[4], k2 = c[5], p1 = c[6], p2 = c[7];
        float x = xd, y = yd;
        for (int i = 0; i < 10; ++i) {   // Gauss-Newton on the forward model
            const float r2 = x * x + y * y, rad = 1.f + k1 * r2 + k2 * r2 * r2;
            const float fx = x * rad + 2.f * p1 * x * y + p2 * (r2 + 2.f * x * x) - xd;
            const float fy = y * rad + p1 * (r2 + 2.f * y * y) + 2.f * p2 * x * y - yd;
            const float drad = 2.f * k1 + 4.f * k2 * r2;
            const float j11 = rad + x * x * drad + 2.f * p1 * y + 6.f * p2 * x;
            const float j12 = x * y * drad + 2.f * p1 * x + 2.f * p2 * y;
            const float j22 = rad + y * y * drad + 6.f * p1 * y + 2.f * p2 * x;
            const float det = j11 * j22 - j12 * j12;
            x -= (j22 * fx - j12 * fy) / det;
            y -= (-j12 * fx + j11 * fy) / det;
        }
        return make_float2(x, y);
    } else if (model == CAM_EQUI) {
        const float rd = sqrtf(xd * xd + yd * yd);
        float th = rd;
        for (int i = 0; i < 20; ++i) {
            const float t2 = th * th;
            const float f = th * (1.f + c[4] * t2 + c[5] * t2 * t2 + c[6] * t2 * t2 * t2 + c[7] * t2 * t2 * t2 * t2) - rd;
            const float df = 1.f + 3.f * c[4] * t2 + 5.f * c[5] * t2 * t2 + 7.f * c[6] * t2 * t2 * t2 + 9.f * c[7] * t2 * t2 * t2 * t2;
            th -= f / df;
        }
        const float s = rd > 1e-12f ? tanf(th) / rd : 1.f;
        return make_float2(xd * s, yd * s);
    }
    return make_float2(xd, yd);
}
