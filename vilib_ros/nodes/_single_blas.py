"""Imported first by nodes whose matrices are small: one OpenBLAS thread, set before NumPy (and SciPy's
OpenBLAS) load. A thread pool never speeds up the backend's 3x3 to ~120x120 algebra, and its idle
threads spin after each call: 2.8 ms of CPU per frame beside the backend node's 2.4-2.9 ms of work on
a 16-core host, gone with one thread at the same frames/s (2026-11-25,
bench/results/backend_node_profile.md). A value the user set (``OPENBLAS_NUM_THREADS``) wins."""
import os
import sys

# Only where NumPy has not loaded yet (a node's or a CLI command's own process). Imported later, into a
# process that already runs NumPy (a test importing a node module for its documentation, a tool), the setting
# would not reach this process's OpenBLAS but every process it starts afterwards: they would compute with one
# thread where this process computes with its pool (regression: a test comparing an estimator in a child
# process with one in the test process, bit for bit, failed once a node module had been imported before it).
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
