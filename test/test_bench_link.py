"""``python -m bench link``: the frame's way over PCIe (bench.link)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _bench_link(tmp_path, *extra):
    return subprocess.run([sys.executable, "-m", "bench", "link", "--out", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


class TestBenchLink:
    def test_without_a_gpu_it_says_why(self, tmp_path):
        from vilib_ros._cuda import cuda_available

        if cuda_available():
            pytest.skip("a CUDA device exists here: the GPU test below runs the probe")
        r = _bench_link(tmp_path)
        assert r.returncode == 2 and "needs a CUDA device" in r.stderr and "Traceback" not in r.stderr

    @pytest.mark.gpu
    def test_probe_rows_on_the_gpu(self, tmp_path):
        r = _bench_link(tmp_path, "--reps", "10")
        assert r.returncode == 0, r.stderr[-2000:]
        res = json.loads((tmp_path / "link_probe.json").read_text())
        rows = {x["what"]: x for x in res["rows"]}
        assert all(x["gpu_p50_us"] > 0 for x in rows.values())
        # a transfer's fixed cost: one frame moves at a lower rate than 128 MB does
        assert rows["DMA, one frame (360,960 B), untouched"]["gb_per_s"] < rows["DMA, 128 MB, untouched"]["gb_per_s"]
        assert rows["DMA, one frame, plain buffer, written just before from a cold source"]["host_copy_p50_us"] > 0
