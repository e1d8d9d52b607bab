"""The per-frame table's report (``bench.frontend.markdown``) from the committed result, and from
that result with the rows a newer benchmark added taken out: the report must read results of
earlier runs (the next run is compared with the committed one), and it names its uploads from one
list."""
import copy
import json
from pathlib import Path

import pytest

from bench.frontend import markdown

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads((RESULTS / "frontend_per_frame.json").read_text())


def _without(res: dict, *prefixes: str) -> dict:
    """``res`` as a run from before the rows named by ``prefixes`` existed."""
    old = copy.deepcopy(res)
    for k in [k for k in old if k.startswith(prefixes)]:
        del old[k]
    old["verdicts"] = [v for v in old["verdicts"] if "already on the device" not in v]
    return old


class TestMarkdown:
    def test_committed_result_renders(self, committed):
        res = committed
        md = markdown(res)
        assert md.startswith("## Frontend per frame")
        assert f"| mono process(), upload='{res['upload_default']}' (default) | {res['mono']['p50_us']:.1f} |" in md
        # the targets are set for the H100 machine; the line names the run's own device
        assert f"Targets (the issue's, set for the H100 machine; this run: {res['device']}):" in md
        assert all(v in md for v in res["verdicts"])

    def test_host_steps_and_stereo_per_upload(self, committed):
        md = markdown(committed)
        steps = committed["host_steps"]["mapped"]
        row = "| mapped | " + " | ".join(f"{steps[k]['p50_us']:.1f}" for k in steps) + " |"
        assert row in md
        s = committed["stereo_mapped_upload"]
        assert f"| stereo process(), upload='mapped' | {s['p50_us']:.1f} | {s['p90_us']:.1f} | {s['p99_us']:.1f} |" in md

    def test_fresh_frame_rows(self, committed):
        """The rows of frames written just before process() (a fresh message): the table, the host-step
        row and the verdicts name them beside the looped frames."""
        md = markdown(committed)
        r = committed["mono_fresh_input"]
        assert f"each frame written just before (a fresh message) | {r['p50_us']:.1f} | {r['p90_us']:.1f} |" in md
        fresh = [k for k in committed["host_steps"] if k.endswith(", fresh frame")][0]
        assert f"| {fresh} | {committed['host_steps'][fresh]['checks']['p50_us']:.1f} |" in md
        assert any(v.startswith("mono process() p50, frame written just before") for v in committed["verdicts"])


class TestOriginalWork:
    def test_tracker_does_the_originals_work(self, sequence_path):
        """The like-for-like row: translation only, no FB check, no RANSAC, at most 100 tracks
        (the original's FeatureTrackerGPU::track), on the EuRoC frames (the generated sequence's where the
        real ones are absent)."""
        from bench.frontend import original_work_tracker
        from vilib_ros.datasets import open_dataset

        ds = open_dataset(sequence_path)
        ft = original_work_tracker("cpu")
        c = ft.config
        assert (c.tracker.warp, c.fb_check, c.ransac, ft.target) == ("translation", False, False, 100)
        counts = [len(ft.process(ds.load_image(0, i), 1_000_000_000 + i * 50_000_000)) for i in range(10)]
        assert 50 <= max(counts) <= 100, counts


class TestDeviceInputRows:
    def test_device_input_row_and_verdict(self, committed):
        """The rows of frames already in device memory: the compute's floor, beside the original's work
        from the same frames; a result without them still renders."""
        res = committed
        md = markdown(res)
        r, o = res["mono_device_input"], res["mono_original_work_device_input"]
        assert (f"mono process() from CuPy frames already on the device (no host copy, no PCIe): p50 {r['p50_us']:.1f} us"
                in md)
        assert f"doing the original's work: p50 {o['p50_us']:.1f} us" in md
        assert any(v.startswith("mono process() p50 from a frame already on the device") for v in res["verdicts"])
        old = _without(res, "mono_device_input", "mono_original_work_device_input", "process_device_input",
                       "original_work_process_device_input")
        assert "already on the device" not in markdown(old)
