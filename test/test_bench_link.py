"""``vilib-ros bench-link``: the frame's way over PCIe (vilib_ros.bench.link)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cuda() -> bool:
    from vilib_ros._cuda import cuda_available

    return cuda_available()


class TestBenchLink:
    def test_runs_where_there_is_a_gpu_and_says_why_not_elsewhere(self, tmp_path):
        r = subprocess.run([sys.executable, "-m", "vilib_ros", "bench-link", "--reps", "10", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
        if not _cuda():
            assert r.returncode == 2 and "needs a CUDA device" in r.stderr and "Traceback" not in r.stderr
            return
        assert r.returncode == 0, r.stderr[-2000:]
        res = json.loads((tmp_path / "link_probe.json").read_text())
        rows = {x["what"]: x for x in res["rows"]}
        assert all(x["gpu_p50_us"] > 0 for x in rows.values())
        # a transfer's fixed cost: one frame moves at a lower rate than 128 MB does
        assert rows["DMA, one frame (360,960 B), untouched"]["gb_per_s"] < rows["DMA, 128 MB, untouched"]["gb_per_s"]
        assert "host_copy_p50_us" in rows["DMA, one frame, plain buffer, written just before from a cold source"]
