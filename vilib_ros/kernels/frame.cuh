// Per-frame parameters of the GPU frontend (vilib_ros.frontend.gpu.pipeline writes the same
// layout on the host: its FrameParams word offsets; gpu.frame.PARAMS_BYTES). The host writes one struct per ring slot into page-locked memory;
// the first kernel of the frame (pyramid_frame) reads it there (zero-copy) and copies it to the
// device for the kernels after it.
#pragma once

struct FrameParams {
    unsigned long long src[2];   // device-accessible address of the left / right uint8 frame (0 = none)
    unsigned long long out;      // device-accessible address of this frame's output slot
    float M[12];                 // rotation prediction: M[0..8] row-major, applied when M[9] != 0
    float dt;                    // seconds since the previous accepted frame (0: none)
    int stereo;                  // 1: the right frame is given (stereo matching runs)
    // A streamed upload (vilib_ros.frontend.gpu.streamed_upload): the host copies the left frame into
    // its page-locked slot in bands of rows AFTER launching the frame, and after each band stores
    // ready_base + 1 into the flag of every pyramid tile (32 x 128 pixels) of the band: word 0 of
    // the tile's 128-byte line at `ready`, tiles row-major. ready == 0: the frame is complete
    // before the launch.
    unsigned long long ready;    // device-accessible address of the tile flags (0 = none)
    unsigned int ready_base;     // the flags' value before this frame
    int timeout_tile;            // the line after the last tile's: set to 1 by a block that gave up waiting
    int pad[8];                  // 128 bytes in all
};
