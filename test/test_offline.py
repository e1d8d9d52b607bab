"""``vilib-ros run --offline``: player, frontend and backend without ROS (vilib_ros.offline).

* The offline path and the ROS path (real nodes over Fast DDS) give the same trajectory on the
  same short generated sequence. Tolerance: both paths feed the same images, IMU and
  parameters to the same FeatureTracker and VioEstimator; the only difference is that the ROS
  frontend takes its gyro samples for the IMU-aided prediction from its own IMU subscription,
  whose messages may arrive a little after the image (fewer samples in the prediction window),
  which moves LK start points by a fraction of a pixel and the converged tracks by ~0.01 px.
  That is worth well under a millimetre of trajectory: positions must agree within 1 mm (max) and their ATEs against ground truth within 0.5 mm.
* Several datasets give one summary table; a dataset without IMU says so up front, in the
  console and the report ("no IMU: the backend cannot estimate; tracks only") and is tracked.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ros_domain  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DOMAIN = ros_domain("offline")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(args, timeout=600, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "vilib_ros", "run", *args], env=_env(), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


@pytest.fixture(scope="module")
def short_sequence(tmp_path_factory):
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    d = tmp_path_factory.mktemp("offline") / "seq"
    generate_sequence(d, SequenceConfig(duration_s=3.0, seed=0, name="seq"), progress=False, workers=1)
    return d


def _read_tum(path):
    from vilib_ros.datasets import read_tum

    g = read_tum(path)
    return g.t_ns, g.p, g.q_xyzw


def _ate(p, g):
    from vilib_ros.evaluation import ate_rmse

    return ate_rmse(p, g)


class TestOfflineRun:
    @pytest.mark.slow
    def test_outputs_and_accuracy(self, short_sequence, tmp_path):
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        out = tmp_path / "off"
        r = _run(["--offline", str(short_sequence), "--out", str(out), "--device", "cpu"])
        assert r.returncode == 0, r.stderr[-3000:]
        for f in ("report.md", "trajectory_tum.txt", "odometry_tum.txt", "trajectory.png", "timing.json",
                  "groundtruth_tum.txt", "recorded.jsonl"):
            assert (out / f).is_file() and (out / f).stat().st_size > 0, f
        assert (out / "tracks.mp4").is_file() or (out / "tracks.webm").is_file() or (out / "tracks.gif").is_file()
        n = len((short_sequence / "mav0" / "cam0" / "data.csv").read_text().splitlines()) - 1
        for f in ("trajectory_tum.txt", "odometry_tum.txt"):
            t, p, _ = _read_tum(out / f)
            assert len(t) == n
            from vilib_ros.datasets import open_dataset

            gt = open_dataset(short_sequence).groundtruth
            g, _, ok = gt.interpolate(t)
            assert ok.all() and _ate(p, g) < 0.03, f
        report = (out / "report.md").read_text()
        assert "frames/s" in report and "ATE (SE3, evo) of the causal trajectory" in report
        assert "params.yaml" not in report            # no node parameters offline: not listed
        assert "Time to the first frame: **" in report and "; replay " in report
        # which stage limited the run: each stage's busy seconds against the wall, and the verdict
        stages = next(ln for ln in report.splitlines() if ln.startswith("- stages, busy against the "))
        assert "reader " in stages and " decoder " in stages and "frontend " in stages and "backend " in stages
        assert "**limited by the " in stages or "no stage was busy 50 % of the wall" in stages
        # the bar starts with the first frame: no 0 % line whose rate (and ETA) counted the start-up
        assert "seq:   0%" not in r.stderr and "seq: 100%" in r.stderr

    @pytest.mark.ros
    @pytest.mark.slow
    def test_same_trajectory_as_the_ros_path(self, short_sequence, tmp_path):
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        a, b = tmp_path / "offline", tmp_path / "ros"
        r1 = _run(["--offline", str(short_sequence), "--out", str(a), "--device", "cpu", "--no-video"])
        assert r1.returncode == 0, r1.stderr[-3000:]
        r2 = _run([str(short_sequence), "--out", str(b), "--device", "cpu", "--no-video", "--domain-id", str(DOMAIN),
                   "--timeout", "500"])
        assert r2.returncode == 0, r2.stderr[-3000:]
        ta, pa, _ = _read_tum(a / "trajectory_tum.txt")
        tb, pb, _ = _read_tum(b / "trajectory_tum.txt")
        np.testing.assert_array_equal(ta, tb)
        d = np.linalg.norm(pa - pb, axis=1)
        from vilib_ros.datasets import open_dataset

        g, _, _ = open_dataset(short_sequence).groundtruth.interpolate(ta)
        print(f"\n[offline vs ROS] max position difference {1e3 * d.max():.3f} mm; ATE offline "
              f"{1e3 * _ate(pa, g):.2f} mm, ROS {1e3 * _ate(pb, g):.2f} mm")
        assert d.max() < 0.001
        assert abs(_ate(pa, g) - _ate(pb, g)) < 0.0005

    @pytest.mark.slow
    def test_several_datasets_summary_and_no_imu(self, short_sequence, tmp_path):
        """Regression (issue 12): a dataset without IMU must say so up front instead of giving
        an empty trajectory; several datasets give one summary table."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        no_imu = tmp_path / "seq_noimu"
        shutil.copytree(short_sequence, no_imu, ignore=shutil.ignore_patterns("imu0"))
        out = tmp_path / "multi"
        r = _run(["--offline", str(short_sequence), str(no_imu), "--out", str(out), "--device", "cpu",
                  "--max-frames", "12", "--no-video"])
        assert r.returncode == 0, r.stderr[-3000:]
        assert "seq_noimu: no IMU: the backend cannot estimate; tracks only" in r.stderr
        report = (out / "seq_noimu" / "report.md").read_text()
        assert "no IMU: the backend cannot estimate; tracks only" in report.split("##")[0]
        assert len([ln for ln in (out / "seq_noimu" / "recorded.jsonl").read_text().splitlines()
                    if '"tracks"' in ln]) == 12
        summary = (out / "summary.md").read_text()
        rows = [ln for ln in summary.splitlines() if ln.startswith("| seq ") or ln.startswith("| seq_")]
        assert len(rows) == 2 and "no IMU" in rows[1] and "no IMU" not in rows[0]
        assert "| seq | 12 | stereo |" in rows[0]
        assert "| limited by (busy s: reader / frontend / backend of the wall) |" in summary
        assert all(" s) |" in row.split("frames/s")[-1] for row in rows)      # each row's limit cell

    @pytest.mark.slow
    def test_parallel_jobs(self, short_sequence, tmp_path):
        """--jobs 2 runs two datasets at a time in worker processes: each gives the trajectory the
        sequence gives alone with --jobs 1 (the reference: the run in this process's order, no
        worker; identical, odometry and smoothed trajectory: the same frames and parameters in the
        same code, one OpenBLAS / numba thread each), so no cross-talk between the jobs; and the
        summary labels the batch's aggregate frames/s as the batch's, not a sequence's.
        Regression guard: the two parallel runs were compared only with each other, so a fault
        common to both workers (arguments lost in the pickling to the worker, a shared state
        between jobs that moved both alike) passed."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        b = tmp_path / "seq_b"
        shutil.copytree(short_sequence, b)
        common = ["--device", "cpu", "--max-frames", "30", "--no-video"]
        ref = tmp_path / "alone"
        r = _run(["--offline", str(short_sequence), "--out", str(ref), *common, "--jobs", "1"])
        assert r.returncode == 0, r.stderr[-3000:]
        assert "parallel jobs" not in r.stderr
        out = tmp_path / "jobs"
        r = _run(["--offline", str(short_sequence), str(b), "--out", str(out), *common, "--jobs", "2"])
        assert r.returncode == 0, r.stderr[-3000:]
        assert "2 datasets in 2 parallel jobs" in r.stderr
        for f in ("odometry_tum.txt", "trajectory_tum.txt"):
            t0, p0, q0 = _read_tum(ref / f)
            assert len(t0) == 30, f
            for name in ("seq", "seq_b"):
                t, p, q = _read_tum(out / name / f)
                np.testing.assert_array_equal(t, t0, err_msg=f"{name} {f}")
                np.testing.assert_array_equal(p, p0, err_msg=f"{name} {f}")
                np.testing.assert_array_equal(q, q0, err_msg=f"{name} {f}")
        summary = (out / "summary.md").read_text()
        assert "frames/s (while 2 ran in parallel)" in summary
        assert "aggregate" in summary and "not the speed of one sequence" in summary
        import json

        batch = json.loads((out / "summary.json").read_text())["batch"]
        assert batch["jobs"] == 2 and batch["frames"] == 60
        assert batch["aggregate_frames_per_s"] == pytest.approx(60 / batch["wall_s"])


class _SlowReader:
    """A real dataset whose images take ``delay_s`` each to read (a slow disk)."""

    def __init__(self, path, delay_s):
        from vilib_ros.datasets import open_dataset

        self.ds, self.delay_s = open_dataset(path), delay_s

    def __getattr__(self, k):
        return getattr(self.ds, k)

    def load_image(self, cam, index):
        import time

        time.sleep(self.delay_s)
        return self.ds.load_image(cam, index)


class TestLimitingStage:
    def test_a_slow_reader_is_named_the_limit(self, short_sequence):
        """A reader that takes 0.1 s per image (frontend: a few ms per frame) is the stage that
        limits the run: busy nearly the whole wall, the frontend waiting for it."""
        from vilib_ros.offline import process, stages_line

        r = process(_SlowReader(short_sequence, 0.1), "cpu", stereo=False, max_frames=20, backend=False, readers=1)
        st = r["stages"]
        assert r["reader"] == {**r["reader"], "kind": "threads", "workers": 1, "preloaded": False}
        assert st["limit"] == "reader" and st["share"] > 0.8, st
        assert st["busy_s"]["reader"] >= 20 * 0.1 * 0.99 and st["reader_wait_s"] > st["busy_s"]["frontend"], st
        assert "**limited by the reader** (busy " in stages_line(r)

    def test_bench_table_takes_the_runners_stages(self, short_sequence):
        """``vilib-ros bench``'s whole-VIO rows: the runner's measured reader busy time and its limit
        (a reader of 0.1 s per image: the reader, in both modes)."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.benchmark import markdown, whole_vio

        vio = whole_vio(_SlowReader(short_sequence, 0.1), "cpu")
        for mode in ("stereo", "mono"):
            row = vio[mode]
            assert row["limit"] == "reader" and row["reader_busy_s"] > 0.8 * row["wall_s"], row
        res = {"machine": {"cpu": "x", "cores": 2}, "date": "d", "version": "v", "frames": 61,
               "per_frame": {k: {"impl": k, "median_us": 1.0, "p90_us": 1.0, "p99_us": 1.0, "tracks_per_frame": 1.0}
                             for k in ("default", "opencv_job", "opencv")}, "vio": vio}
        md = markdown(res)
        r = vio["stereo"]
        assert (f"| {r['reader_busy_s']:.1f} s ({r['reader']}) | {r['frontend_busy_s']:.1f} s ({r['process_s']:.1f} s) | "
                f"{r['backend_busy_s']:.1f} s | reader ({100 * r['limit_share']:.0f} %) |") in md

    def test_the_busiest_stage_against_the_wall(self):
        """stage_times on hand-made figures: the busiest stage of the wall is the limit, none below half."""
        from vilib_ros.offline import stage_times

        def run(reader_busy, reader_wait, backend_wait, backend_busy, process_s=(0.001,) * 1000, wall=10.0):
            return {"wall_s": wall, "frontend_s": list(process_s), "backend_wait_s": backend_wait,
                    "reader": {"busy_s": reader_busy, "wait_s": reader_wait}, "backend": {"busy_s": backend_busy}}

        st = stage_times(run(9.5, 6.0, 0.2, 3.0))
        assert st["limit"] == "reader" and st["share"] == pytest.approx(0.95)
        assert st["busy_s"]["frontend"] == pytest.approx(10 - 6 - 0.2) and st["process_s"] == pytest.approx(1.0)
        st = stage_times(run(2.0, 0.1, 7.0, 9.8))
        assert st["limit"] == "backend" and st["share"] == pytest.approx(0.98)
        st = stage_times(run(2.0, 0.5, 0.3, 3.0))
        assert st["limit"] == "frontend" and st["busy_s"]["frontend"] == pytest.approx(9.2)
        st = stage_times(run(4.0, 3.0, 3.5, 4.5))        # nobody busy half the wall
        assert st["limit"] is None and st["share"] == pytest.approx(0.45)

    @pytest.mark.parametrize("decoders", ["processes", "threads"])
    def test_unreadable_frames_are_skipped_and_counted(self, short_sequence, tmp_path, decoders):
        """A corrupt left image and a missing right one: both frames skipped (counted under their
        reasons), every other frame tracked, in order; the run goes on."""
        from vilib_ros.datasets import open_dataset
        from vilib_ros.offline import process

        bad = tmp_path / "bad"
        shutil.copytree(short_sequence, bad)
        left = sorted((bad / "mav0" / "cam0" / "data").glob("*.png"))
        right = sorted((bad / "mav0" / "cam1" / "data").glob("*.png"))
        left[5].write_bytes(b"not a png")
        right[9].unlink()
        ds = open_dataset(bad)
        r = process(ds, "cpu", stereo=True, max_frames=14, backend=False, decoders=decoders)
        assert r["reader"]["kind"] == decoders and r["skipped"] == {"corrupt": 1, "missing_file": 1}
        stamps = np.asarray(ds.image_stamps(0))[:14]
        assert [int(fr.stamp_ns) for fr in r["tracks"]] == [int(t) for k, t in enumerate(stamps) if k not in (5, 9)]


class TestRunFolders:
    """Each run its own folder. Regression: every run of a sequence wrote into one folder, an offline
    run overwrote a ROS run's report, trajectory and video and left its params.yaml and logs, and
    logs appended across runs; a reused generated sequence was not announced."""

    COMMON = ["--offline", "--device", "cpu", "--max-frames", "4", "--no-video", "--no-backend"]

    def test_default_folder_is_new_per_run(self, short_sequence, tmp_path):
        firsts = []
        for _ in range(2):
            r = _run([str(short_sequence), *self.COMMON], cwd=tmp_path)
            assert r.returncode == 0, r.stderr[-3000:]
            start = next(ln for ln in r.stderr.splitlines() if "output folder " in ln).split("output folder ")[1]
            end = r.stderr.strip().splitlines()[-1]
            assert end.endswith(f"outputs in {start}"), end
            firsts.append(Path(start))
        assert firsts[0] != firsts[1] and firsts[0].parent == firsts[1].parent == tmp_path / "vilib_ros_output" / "seq"
        assert all((f / "report.md").is_file() for f in firsts)
        assert (firsts[0].parent / "latest").resolve() == firsts[1].resolve()

    def test_out_must_be_new_or_empty_unless_overwrite(self, short_sequence, tmp_path):
        out = tmp_path / "out"
        out.mkdir()
        (out / "stale.txt").write_text("from an earlier run")
        r = _run([str(short_sequence), *self.COMMON, "--out", str(out)], cwd=tmp_path)
        assert r.returncode == 2, r.stderr[-3000:]
        assert (f"vilib-ros run: error: --out {out} exists and is not empty: give --overwrite to replace what is in "
                "it, or another --out") in r.stderr
        assert (out / "stale.txt").is_file()
        r = _run([str(short_sequence), *self.COMMON, "--out", str(out), "--overwrite"], cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert not (out / "stale.txt").exists() and (out / "report.md").is_file()

    @pytest.mark.slow
    def test_generated_sequence_lives_apart_and_its_reuse_is_said(self, tmp_path):
        args = ["--offline", "--duration", "0.5", "--device", "cpu", "--max-frames", "3", "--no-video",
                "--no-backend"]
        gen = Path("vilib_ros_output") / "generated" / "synthetic_0.5s"
        r = _run(args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"generating a 0.5 s synthetic stereo sequence in {gen}" in r.stderr
        r = _run(args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"reusing the sequence generated in {gen} (same settings)" in r.stderr
        assert "generating" not in r.stderr
        runs = [p for p in (tmp_path / "vilib_ros_output" / "synthetic").iterdir() if p.name != "latest"]
        assert len(runs) == 2 and not any((p / "dataset").exists() for p in runs)


class TestReplayBackend:
    def test_backend_alone_on_the_runs_tracks_gives_the_runs_estimate(self, short_sequence):
        """bench-vio's "alone on the same tracks" row (replay_backend) must measure the backend on
        exactly what it got in the run: the same messages give the same estimate, frame by frame,
        and the timing breakdown covers every frame and keyframe."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.datasets import open_dataset
        from vilib_ros.offline import KF_PARTS, process, replay_backend

        ds = open_dataset(short_sequence)
        r = process(ds, "cpu", stereo=True, preload=True)
        solo = replay_backend(ds, r["tracks"], True, {"mode": "stereo"})
        run = r["backend"]
        assert run["stats"]["keyframes"] > 5 and solo["stats"]["keyframes"] == run["stats"]["keyframes"]
        for key in ("causal", "smoothed"):
            np.testing.assert_array_equal(solo[key][0], run[key][0])
            np.testing.assert_allclose(solo[key][1], run[key][1], rtol=0, atol=1e-12)
        for res in (run, solo):
            assert len(res["frame_s"]) == len(res["frame_kf"]) == r["frames"]
            # frames held back during the initialisation come out together: only the last is flagged
            assert 0 < sum(res["frame_kf"]) <= len(res["kf_ms"])
            for p in KF_PARTS:
                assert len(res["kf_parts_ms"][p]) == len(res["factors"]) > 0
            assert res["cpu_s"] > 0 and res["busy_s"] > 0

    def test_batched_child_equals_an_estimator_in_this_process(self, short_sequence):
        """Frames cross to the backend child in batches, and the child ends with ``os._exit`` once
        its result is handed over: the estimate equals a VioEstimator fed frame by frame in this
        process, with a batch that does not divide the frame count (the last, partial batch must
        be flushed: every frame is counted)."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.backend import BackendConfig, VioEstimator
        from vilib_ros.datasets import open_dataset
        from vilib_ros.offline import process, replay_backend

        ds = open_dataset(short_sequence)
        tracks = process(ds, "cpu", stereo=True, backend=False, preload=True)["tracks"]
        assert len(tracks) % 7, "the batch below must not divide the frame count"
        child = replay_backend(ds, tracks, True, {"mode": "stereo"}, batch=7)
        est = VioEstimator(BackendConfig(mode="stereo"), ds.cameras[0], ds.cameras[1], ds.imu_noise)
        ist, idata = np.asarray(ds.imu_stamps, np.int64), np.asarray(ds.imu_data, float)
        j = 0
        for fr in tracks:
            j1 = max(j, int(np.searchsorted(ist, int(fr.stamp_ns), side="right")))
            if j1 > j:
                est.add_imu_batch(ist[j:j1], idata[j:j1])
            est.add_frame(fr)
            j = j1
        assert len(child["frame_s"]) == len(tracks)
        assert child["stats"]["keyframes"] == est.stats["keyframes"] > 5
        for smoothed, key in ((False, "causal"), (True, "smoothed")):
            t, p, q = est.trajectory(smoothed=smoothed)
            np.testing.assert_array_equal(child[key][0], t)
            np.testing.assert_allclose(child[key][1], p, rtol=0, atol=1e-12)
            np.testing.assert_allclose(child[key][2], q, rtol=0, atol=1e-12)


@pytest.mark.slow
class TestBenchVioVariant:
    def test_a_variant_runs_after_the_defaults_and_is_not_the_target(self, tmp_path):
        """``python -m bench vio --variant``: each mode again with backend parameters, labelled and kept out of the target line."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        out = tmp_path / "out"
        r = subprocess.run([sys.executable, "-m", "bench", "vio", "--device", "cpu", "--duration", "6",
                            "--modes", "mono", "--variant", "mono_solver=schur", "--cache", str(tmp_path / "cache"),
                            "--out", str(out)], env=_env(), capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        import json

        res = json.loads((out / "vio_bench.json").read_text())
        assert [x["label"] for x in res["runs"]] == ["mono", "mono, mono_solver=schur"]
        assert res["runs"][0]["backend_config"] == {"mode": "mono"} and not res["runs"][0].get("variant")
        assert res["runs"][1]["backend_config"] == {"mode": "mono", "mono_solver": "schur"} and res["runs"][1]["variant"]
        assert res["frames_per_s"] == res["runs"][0]["frames_per_s"]          # the defaults' run is the headline
        for x in res["runs"]:
            assert x["frames"] == 121 and np.isfinite(x["ate_causal_m"]) and x["ate_causal_m"] < 0.2
        md = (out / "vio_bench.md").read_text()
        assert "mono: solver isam2; mono, mono_solver=schur: solver schur" in md

