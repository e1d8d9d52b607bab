"""``python -m bench cpu``'s frontend rows on a few frames (not a speed test).

Guards: the bench reading a FeatureTracker attribute the facade over the CPU / GPU pipelines does
not have, and failing before measuring anything.
"""
from __future__ import annotations

import pytest

from bench.cpu import bench_frontend, same_job_config


@pytest.mark.slow
class TestBenchFrontend:
    @pytest.mark.parametrize("kind, impl", [("numba", "NumbaFastDetector + NumbaLKTracker"),
                                            ("numba-default", "NumbaFastDetector + NumbaLKTracker"),
                                            ("numpy", "CpuFastDetector + CpuLKTracker"), ("opencv", "opencv")])
    def test_rows(self, generated_frames, kind, impl):
        """Each row measures the implementation it names (guards: a row whose VILIB_ROS_CPU_IMPL is not
        taken measures the other twin under its name)."""
        pytest.importorskip("numba", reason="numba not installed")
        r = bench_frontend(generated_frames[:4], kind, 1)
        assert r["impl"] == impl
        assert r["frames"] == 4 and r["median_ms"] > 0 and r["tracks_per_frame"] > 0

    def test_same_job_is_frame_to_frame_without_outlier_rejection(self):
        c = same_job_config()
        assert (c.tracker.template, c.tracker.warp, c.fb_check, c.ransac) == ("previous", "translation", False, False)
