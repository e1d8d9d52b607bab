"""Imported first by nodes whose matrices are small: one OpenBLAS thread, set before NumPy (and SciPy's
OpenBLAS) load. A thread pool never speeds up the backend's small matrices (3x3 up to about 120x120),
and its idle threads spin after each call, burning about as much CPU as the backend's own work on a
many-core host; one thread runs at the same frame rate. A value the user set
(``OPENBLAS_NUM_THREADS``) wins."""
import os
import sys

# Only where NumPy has not loaded yet (a node's or a CLI command's own process). Imported later, into a
# process that already runs NumPy (a test importing a node module for its documentation, a tool), the setting
# would not reach this process's OpenBLAS but every process it starts afterwards: they would compute with one
# thread where this process computes with its pool, and an estimator in a child process would no longer
# match one in this process bit for bit.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
