"""CUDA kernels that only the benchmarks use (not installed with the package): ``bench_util.cu``
(``gpu_spin``, ``read_words``, ``poll_flags``, ``chain_step``), loaded by
:func:`vilib_ros._cuda.get_module` from this folder; its ``#include "pdl.cuh"`` comes from the
package's kernel folder."""
from __future__ import annotations

from pathlib import Path

from vilib_ros._cuda import get_module

KERNEL_DIR = Path(__file__).resolve().parent


def bench_util():
    """The compiled ``bench_util.cu`` for the current device (cached)."""
    return get_module("bench_util", kernel_dir=KERNEL_DIR)
