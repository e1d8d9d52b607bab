// Per-frame parameters of the GPU frontend (vilib_ros.frontend.gpu_pipeline.FRAME_PARAMS is the
// same layout on the host). The host writes one struct per ring slot into page-locked memory;
// the first kernel of the frame (pyramid_frame) reads it there (zero-copy) and copies it to the
// device for the kernels after it.
#pragma once

#define BAND_FLAGS 16              // band flags per camera (vilib_ros.frontend.gpu_pipeline.BAND_FLAGS)

struct FrameParams {
    unsigned long long src[2];   // device-accessible address of the left / right uint8 frame (0 = none)
    unsigned long long out;      // device-accessible address of this frame's output slot
    float M[12];                 // rotation prediction: M[0..8] row-major, applied when M[9] != 0
    float dt;                    // seconds since the previous accepted frame (0: none)
    int stereo;                  // 1: the right frame is given (stereo matching runs)
    unsigned long long bands;    // upload 'mapped_bands': device-accessible address of the band flags
                                 // (unsigned int [2][BAND_FLAGS], page-locked), else unused
    unsigned int seq[2];         // left / right: != 0: the host copies that frame after the launch, band
                                 // by band, and writes seq into a band's flag once the band is in place
    int band_rows;               // rows per band (a multiple of 32, the pyramid's tile height)
    int pad[7];                  // 128 bytes in all
};
