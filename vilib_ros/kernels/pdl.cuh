// Programmatic dependent launch (Hopper and later; vilib_ros._cuda.launch with pdl on): a kernel
// launched with the programmatic-serialisation attribute may be scheduled while the kernel before
// it on the stream still runs, so its launch latency hides behind that kernel's work. Every
// kernel of the package opens with PDL_ENTRY: griddepcontrol.wait blocks until the grid before it
// has completed and its writes are visible (a no-op where the launch had no such dependency), so
// nothing is read or written early; then griddepcontrol.launch_dependents lets the next launch be
// scheduled now (one level ahead: the next one waits in its own PDL_ENTRY). The wait comes first
// and unconditionally, before any early return, so that completion stays transitive along a chain.
#pragma once
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define PDL_ENTRY()                                              \
    do {                                                         \
        asm volatile("griddepcontrol.wait;" ::: "memory");       \
        asm volatile("griddepcontrol.launch_dependents;" :::);   \
    } while (0)
#else
#define PDL_ENTRY() ((void)0)
#endif
