"""``python -m bench throughput`` (the GPU machine's run) where it can run without a GPU:

* the paper's harness output is read as its ``print_stat`` writes it (a hand-written sample in
  that format), the figures taken from the lines named, not from neighbouring ones;
* the whole command on the CPU, with a stand-in for the paper's harness (a build script that
  writes a benchmark printing fixed figures): the sequence rendered, the whole VIO stereo and
  mono with decoder processes and with decoder threads, A and B in turns, and the JSON's headline
  figures equal to the medians of its runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bench.throughput import parse_seed

REPO = Path(__file__).resolve().parents[1]


def _stat(label, n, median, p90):
    # vilib_bench.cpp's print_stat: "%-50s n=%6zu median=%9.2f p90=%9.2f mean=%9.2f min=%9.2f max=%9.2f"
    return f"{label:<50s} n={n:6d} median={median:9.2f} p90={p90:9.2f} mean={0:9.2f} min={0:9.2f} max={0:9.2f}"


SAMPLE = "\n".join([
    "device: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs), runtime 13000, driver 13000",
    _stat("fast_L1 end-to-end [us/frame]", 1900, 70.25, 80.5),
    _stat("fast_L2 end-to-end [us/frame]", 1900, 91.75, 101.0),
    _stat("fast_L2 end-to-end, pinned host src [us/frame]", 1900, 60.0, 66.0),
    "fast_L2 conformance: PASS",
    _stat("track all frames [us/frame]", 1900, 123.45, 140.5),
    _stat("track frames w/o redetection (i>0) [us]", 1500, 110.0, 120.0),
    _stat("total features /frame", 1900, 101.0, 110.0),
    "fast_L1 conformance: PASS",
])


class TestParseSeed:
    def test_the_lines_named(self):
        r = parse_seed(SAMPLE)
        assert r == {"track_n": 1900, "track_us": 123.45, "track_p90_us": 140.5, "detect_l2_us": 91.75,
                     "features_per_frame": 101.0, "conformance": "PASS",
                     "device": "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs), runtime 13000, driver 13000"}

    def test_a_failed_check_and_a_missing_line(self):
        r = parse_seed(SAMPLE.replace("fast_L1 conformance: PASS", "fast_L1 conformance: FAIL").replace(
            "track all frames", "track none"))
        assert r["conformance"] == "FAIL" and "track_us" not in r


@pytest.mark.slow
class TestOnTheCpu:
    def test_the_whole_command_with_a_stand_in_harness(self, tmp_path):
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        vilib = tmp_path / "vilib"
        (vilib / "src" / "visual_lib").mkdir(parents=True)
        (vilib / "debs").mkdir()
        (vilib / "harness").mkdir()
        (vilib / "harness" / "build.sh").write_text(textwrap.dedent(f"""\
            mkdir -p "$BUILD"
            printf '#!/bin/sh\\ncat <<EOF\\n{SAMPLE}\\nEOF\\n' > "$BUILD/vilib_bench"
            chmod +x "$BUILD/vilib_bench"
        """))
        (vilib / "harness" / "run.sh").write_text('test -d "$FRAMES_DIR" && "$BUILD/vilib_bench" --frames "$RAW"\n')
        frames = tmp_path / "euroc" / "mav0" / "cam0" / "data"
        frames.mkdir(parents=True)
        import cv2

        rng = np.random.default_rng(0)
        base = cv2.GaussianBlur(rng.integers(0, 256, (520, 800)).astype(np.uint8), (5, 5), 0)
        for k in range(5):
            cv2.imwrite(str(frames / f"{k}.png"), base[k:k + 480, k:k + 752])
        out = tmp_path / "out"
        r = subprocess.run([sys.executable, "-m", "bench", "throughput", "--device", "cpu", "--frames", "100",
                            "--data", str(tmp_path / "seq"), "--workers", "1", "--vio-rounds", "1", "--rounds", "2",
                            "--ours-frames", "10", "--vilib", str(vilib), "--build", str(tmp_path / "b" / "build"),
                            "--euroc", str(tmp_path / "euroc"), "--out", str(out)],
                           capture_output=True, text=True, timeout=900, cwd=REPO,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.returncode == 0, r.stderr[-3000:]
        res = json.loads((out / "throughput.json").read_text())
        assert res["frames"] == 101
        vio = res["runs"]["vio"]
        assert [(x["mode"], x["decoders"]) for x in vio] == [("stereo", "processes"), ("stereo", "threads"),
                                                             ("mono", "processes"), ("mono", "threads")]
        assert all(x["frames"] == 101 for x in vio)
        assert res["whole_vio_fps"] == vio[0]["frames_per_s"] and res["mono_whole_vio_fps"] == vio[2]["frames_per_s"]
        assert res["whole_vio_fps_threads"] == vio[1]["frames_per_s"]
        assert all(x["limit"] in ("reader", "frontend", "backend", None) and x["busy_s"]["backend"] > 0 for x in vio)
        assert [x["who"] for x in res["runs"]["ab"]] == ["seed", "ours", "seed", "ours"]
        assert res["seed_track_us"] == 123.45
        assert res["equal_work_us"] == pytest.approx(np.median([x["process_us"] for x in res["runs"]["ab"]
                                                                if x["who"] == "ours"]))
        md = (out / "throughput.md").read_text()
        assert "| the paper's code, `track all frames` (95 real EuRoC frames) | 123.5 us |" in md
