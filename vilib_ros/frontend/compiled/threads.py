"""Threads of the compiled CPU stages.

The compiled loops are parallel (``prange`` over rows, cells, features), and
``VILIB_ROS_CPU_THREADS`` (default 1; 0 = every core numba sees) sets how many threads each
detector / tracker uses, per call, whichever thread calls it. One is the default because a
frame is small work: each parallel region waits for a core, and on a loaded machine the cores
are held by the player and the backend; one thread leaves the other cores to the backend.
"""
from __future__ import annotations

import os

THREADS_ENV = "VILIB_ROS_CPU_THREADS"


def cpu_threads() -> int:
    """Threads for the compiled stages: ``$VILIB_ROS_CPU_THREADS`` (default 1; 0 = all cores)."""
    import numba

    raw = (os.environ.get(THREADS_ENV) or "1").strip()
    top = int(numba.config.NUMBA_NUM_THREADS)
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{THREADS_ENV} must be an integer (0 = all {top} cores), got {raw!r}") from None
    if not 0 <= n <= top:
        raise ValueError(f"{THREADS_ENV} must be in 0..{top} (0 = all cores), got {n}")
    return n or top
