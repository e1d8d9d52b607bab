// Per-frame parameters of the GPU frontend (vilib_ros.frontend.gpu_pipeline.FRAME_PARAMS is the
// same layout on the host). The host writes one struct per ring slot into page-locked memory;
// the first kernel of the frame (pyramid_frame) reads it there (zero-copy) and copies it to the
// device for the kernels after it.
#pragma once

struct FrameParams {
    unsigned long long src[2];   // device-accessible address of the left / right uint8 frame (0 = none)
    unsigned long long out;      // device-accessible address of this frame's output slot
    float M[12];                 // rotation prediction: M[0..8] row-major, applied when M[9] != 0
    float dt;                    // seconds since the previous accepted frame (0: none)
    int stereo;                  // 1: the right frame is given (stereo matching runs)
    int pad[12];                 // 128 bytes in all
};
