"""The per-frame table's report (``vilib_ros.bench.frontend.markdown``) from committed results:
the one before the host-step marks and per-upload stereo rows (19:25 UTC) and the one with them
(20:58 UTC) both render. Regression guarded: the report must read results of earlier runs (the
next run is compared with the committed one), and it names its uploads from one list."""
import json
from pathlib import Path

import pytest

from vilib_ros.bench.frontend import markdown

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


class TestMarkdown:
    @pytest.mark.parametrize("name", ["frontend_per_frame.json", "frontend_per_frame_run_1925.json", "frontend_per_frame_run_2058.json",
                                      "frontend_per_frame_run_2122.json", "frontend_per_frame_run_2200.json",
                                      "frontend_per_frame_run_0618.json", "frontend_per_frame_run_0645.json",
                                      "frontend_per_frame_run_1304.json", "frontend_per_frame_run_0354.json",
                                      "frontend_per_frame_run_0408.json", "frontend_per_frame_run_0946.json",
                                      "frontend_per_frame_run_0025.json", "frontend_per_frame_run_0228.json"])
    def test_committed_results_render(self, name):
        res = json.loads((RESULTS / name).read_text())
        md = markdown(res)
        assert md.startswith("## Frontend per frame")
        assert f"| mono process(), upload='{res['upload_default']}' (default) | {res['mono']['p50_us']:.1f} |" in md
        # the targets are the issue's, set for the H100 machine; the line names the run's own device
        assert f"Targets (the issue's, set for the H100 machine; this run: {res['device']}):" in md
        assert all(v in md for v in res["verdicts"])

    def test_host_steps_and_stereo_per_upload(self):
        res = json.loads((RESULTS / "frontend_per_frame_run_2058.json").read_text())
        md = markdown(res)
        steps = res["host_steps"]["mapped"]
        row = "| mapped | " + " | ".join(f"{steps[k]['p50_us']:.1f}" for k in steps) + " |"
        assert row in md
        s = res["stereo_mapped_upload"]
        assert f"| stereo process(), upload='mapped' | {s['p50_us']:.1f} | {s['p90_us']:.1f} | {s['p99_us']:.1f} |" in md

    def test_fresh_frame_rows(self):
        """The rows of frames written just before process() (a fresh message, 21:22 UTC run on):
        the table, the host-step row and the verdicts name them beside the looped frames."""
        res = json.loads((RESULTS / "frontend_per_frame_run_2122.json").read_text())
        md = markdown(res)
        r = res["mono_fresh_input"]
        assert f"each frame written just before (a fresh message) | {r['p50_us']:.1f} | {r['p90_us']:.1f} |" in md
        assert f"| mapped, fresh frame | {res['host_steps']['mapped, fresh frame']['checks']['p50_us']:.1f} |" in md
        assert any(v.startswith("mono process() p50, frame written just before") for v in res["verdicts"])


class TestOriginalWork:
    def test_tracker_does_the_originals_work(self, euroc_path):
        """The like-for-like row: translation only, no FB check, no RANSAC, at most 100 tracks
        (the original's FeatureTrackerGPU::track), on real frames."""
        from vilib_ros.bench.frontend import original_work_tracker
        from vilib_ros.datasets import open_dataset

        ds = open_dataset(euroc_path)
        ft = original_work_tracker("cpu")
        c = ft.config
        assert (c.tracker.warp, c.fb_check, c.ransac, ft.target) == ("translation", False, False, 100)
        counts = [len(ft.process(ds.load_image(0, i), 1_000_000_000 + i * 50_000_000)) for i in range(10)]
        assert 50 <= max(counts) <= 100, counts


class TestDeviceInputRows:
    def test_device_input_row_and_verdict(self):
        """The rows of frames already in device memory (2026-11-29 on): the compute's floor, beside
        the original's work from the same frames; earlier results (without them) still render."""
        res = json.loads((RESULTS / "frontend_per_frame_run_0025.json").read_text())
        md = markdown(res)
        r, o = res["mono_device_input"], res["mono_original_work_device_input"]
        assert (f"mono process() from CuPy frames already on the device (no host copy, no PCIe): p50 {r['p50_us']:.1f} us"
                in md)
        assert f"doing the original's work: p50 {o['p50_us']:.1f} us" in md
        assert any(v.startswith("mono process() p50 from a frame already on the device") for v in res["verdicts"])
        old = json.loads((RESULTS / "frontend_per_frame_run_0946.json").read_text())
        assert "already on the device" not in markdown(old)
