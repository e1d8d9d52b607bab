"""Imported first by nodes whose matrices are small: one OpenBLAS thread, set before NumPy (and SciPy's
OpenBLAS) load. A thread pool never speeds up the backend's 3x3 to ~120x120 algebra, and its idle
threads spin after each call: 2.8 ms of CPU per frame beside the backend node's 2.4-2.9 ms of work on
a 16-core host, gone with one thread at the same frames/s (2026-11-25,
bench/results/backend_node_profile.md). A value the user set (``OPENBLAS_NUM_THREADS``) wins."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
