"""Broken datasets through ``vilib-ros run``, table-driven: each is either a clear error naming the
problem (exit 2, ``vilib-ros run: error: ...``, no traceback, no output folder) or a counted skip
/ a warning with the run completing, every readable frame tracked and nothing else lost.

Bugs guarded: a corrupt, zero-byte or missing PNG in the middle of a sequence ending the player and
failing the run; a truncated bag that cannot be opened at all; a Python traceback for a user error; a
missing ``sensor.yaml`` silently replaced by EuRoC's calibration; NaN intrinsics accepted; malformed
calibration failing with ``KeyError`` or a reshape error; an empty ``data.csv`` starting every node
and ending "0/0 frames tracked"; an output folder created for a dataset that cannot be opened.

Every dataset is cut from the session's generated sequence: 8 frames (0.35 s), its IMU and
ground truth, written with plain file I/O and OpenCV.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vilib_ros.nodes.processes import popen

pytestmark = [pytest.mark.ros, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
N = 8


def _rows(path: Path) -> tuple[list[str], list[str]]:
    lines = path.read_text().splitlines()
    return [ln for ln in lines if ln.startswith("#")], [ln for ln in lines if ln.strip() and not ln.startswith("#")]


@pytest.fixture(scope="module")
def base(generated_sequence, tmp_path_factory) -> Path:
    """The first N frames of the generated sequence as their own ASL folder."""
    root = tmp_path_factory.mktemp("broken") / "base"
    src = generated_sequence / "mav0"
    head, rows = _rows(src / "cam0" / "data.csv")
    rows = rows[:N]
    t_last = int(rows[-1].split(",")[0])
    (root / "mav0" / "cam0" / "data").mkdir(parents=True)
    for r in rows:
        shutil.copy(src / "cam0" / "data" / r.split(",")[1], root / "mav0" / "cam0" / "data")
    (root / "mav0" / "cam0" / "data.csv").write_text("\n".join(head + rows) + "\n")
    shutil.copy(src / "cam0" / "sensor.yaml", root / "mav0" / "cam0")
    for sub in ("imu0", "state_groundtruth_estimate0"):
        (root / "mav0" / sub).mkdir()
        h, r = _rows(src / sub / "data.csv")
        (root / "mav0" / sub / "data.csv").write_text(
            "\n".join(h + [x for x in r if int(x.split(",")[0]) <= t_last]) + "\n")
    shutil.copy(src / "imu0" / "sensor.yaml", root / "mav0" / "imu0")
    return root


# ------------------------------------------------------------------------------- the breakages
def _frame(root, k) -> Path:
    return root / "mav0" / "cam0" / "data" / _rows(root / "mav0" / "cam0" / "data.csv")[1][k].split(",")[1]


def corrupt_png(root):
    _frame(root, 3).write_bytes(b"\x89PNG\r\n\x1a\n garbage")


def zero_byte_png(root):
    _frame(root, 3).write_bytes(b"")


def missing_png(root):
    _frame(root, 3).unlink()


def wrong_size_png(root):
    f = _frame(root, 4)
    cv2.imwrite(str(f), cv2.resize(cv2.imread(str(f), cv2.IMREAD_GRAYSCALE), (376, 240)))


def png_16bit(root):
    for k in range(N):
        f = _frame(root, k)
        cv2.imwrite(str(f), cv2.imread(str(f), cv2.IMREAD_GRAYSCALE).astype(np.uint16) * 257)


def png_rgb(root):
    for k in range(N):
        f = _frame(root, k)
        cv2.imwrite(str(f), cv2.cvtColor(cv2.imread(str(f), cv2.IMREAD_GRAYSCALE), cv2.COLOR_GRAY2BGR))


def _edit_csv(path: Path, fn):
    head, rows = _rows(path)
    path.write_text("\n".join(head + fn(rows)) + "\n")


def csv_garbage(root):
    _edit_csv(root / "mav0" / "cam0" / "data.csv", lambda r: r[:4] + ["not,a stamp"] + r[4:])


def duplicate_stamp(root):
    _edit_csv(root / "mav0" / "cam0" / "data.csv", lambda r: r[:4] + [r[3]] + r[4:])


def backward_stamp(root):
    _edit_csv(root / "mav0" / "cam0" / "data.csv", lambda r: r[:3] + [r[4], r[3]] + r[5:])


def nan_imu(root):
    def f(rows):
        parts = rows[20].split(",")
        parts[1] = "nan"
        return rows[:20] + [",".join(parts)] + rows[21:]
    _edit_csv(root / "mav0" / "imu0" / "data.csv", f)


def missing_imu(root):
    shutil.rmtree(root / "mav0" / "imu0")


def gap_of_seconds(root):
    """Frames 4.. and the IMU from frame 4's stamp on come 3 s later (a pause in the recording)."""
    t4 = int(_rows(root / "mav0" / "cam0" / "data.csv")[1][4].split(",")[0])

    def shift(rows):
        out = []
        for r in rows:
            t, rest = r.split(",", 1)
            out.append(f"{int(t) + 3_000_000_000 if int(t) >= t4 else int(t)},{rest}")
        return out
    for sub in ("cam0", "imu0", "state_groundtruth_estimate0"):
        _edit_csv(root / "mav0" / sub / "data.csv", shift)


def missing_sensor_yaml(root):
    (root / "mav0" / "cam0" / "sensor.yaml").unlink()


def missing_imu_sensor_yaml(root):
    (root / "mav0" / "imu0" / "sensor.yaml").unlink()


def nonsense_sensor_yaml(root):
    (root / "mav0" / "cam0" / "sensor.yaml").write_text("intrinsics: [this, is, not, calibration]\n")


def nan_intrinsics(root):
    p = root / "mav0" / "cam0" / "sensor.yaml"
    lines = [("intrinsics: [.nan, 458.0, 367.0, 248.0]" if ln.startswith("intrinsics") else ln)
             for ln in p.read_text().splitlines()]
    p.write_text("\n".join(lines) + "\n")


def _edit_yaml(root, fn):
    import yaml

    p = root / "mav0" / "cam0" / "sensor.yaml"
    d = yaml.safe_load("\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("%YAML")))
    fn(d)
    p.write_text(yaml.safe_dump(d))


def t_bs_15_numbers(root):
    _edit_yaml(root, lambda d: d["T_BS"].update(data=d["T_BS"]["data"][:15]))


def unknown_distortion(root):
    _edit_yaml(root, lambda d: d.update(distortion_model="kannala-brandt-9000"))


def empty_data_csv(root):
    (root / "mav0" / "cam0" / "data.csv").write_text("#timestamp [ns],filename\n")


def _bag(root, kind, keep: float | None, drop_metadata: bool = False):
    from vilib_ros.datasets.bag_writer import write_bag

    tmp = root.parent / (root.name + "_src")
    root.rename(tmp)
    out = write_bag(tmp, root.parent / (root.name + ("_ros1.bag" if kind == "ros1" else "_ros2")), kind=kind)
    shutil.rmtree(tmp)
    if keep is not None:
        f = out if out.is_file() else next(out.glob("*.db3"))
        data = f.read_bytes()
        f.write_bytes(data[:int(len(data) * keep)])
    if drop_metadata:
        (out / "metadata.yaml").unlink()
    return out


def truncated_ros1_bag(root):
    return _bag(root, "ros1", 0.6)


def truncated_ros2_bag(root):
    return _bag(root, "ros2", 0.6)


def ros2_bag_without_metadata(root):
    return _bag(root, "ros2", None, drop_metadata=True)


def text_file_named_bag(root):
    p = root.parent / "notes.bag"
    p.write_text("these are my notes, not a bag\n")
    shutil.rmtree(root)
    return p


def empty_folder(root):
    shutil.rmtree(root)
    root.mkdir()


def missing_path(root):
    shutil.rmtree(root)
    return root.parent / "no_such_dataset"


# kind -> (breakage, expectation, what the console / report must say, frames the player must send)
SKIP, WARN, ERROR = "counted skip", "warning", "error"
CASES = {
    "corrupt_png": (corrupt_png, SKIP, "corrupt", N - 1),
    "zero_byte_png": (zero_byte_png, SKIP, "empty_file", N - 1),
    "missing_png": (missing_png, SKIP, "missing_file", N - 1),
    "wrong_size_png": (wrong_size_png, SKIP, "size_mismatch", N - 1),
    "png_16bit": (png_16bit, SKIP, None, N),
    "png_rgb": (png_rgb, SKIP, None, N),
    "csv_garbage": (csv_garbage, ERROR, "data.csv:6: bad timestamp", None),
    "duplicate_stamp": (duplicate_stamp, WARN, "stamp repeats or goes back", N),
    "backward_stamp": (backward_stamp, WARN, "stamp repeats or goes back", N - 1),
    "nan_imu": (nan_imu, WARN, "non-finite", N),
    "missing_imu": (missing_imu, WARN, "no IMU", N),
    "gap_of_seconds": (gap_of_seconds, SKIP, None, N),
    "missing_sensor_yaml": (missing_sensor_yaml, ERROR, "no calibration for mav0/cam0 (no mav0/cam0/sensor.yaml): "
                            "give --calibration camchain-imucam.yaml (Kalibr)", None),
    "missing_imu_sensor_yaml": (missing_imu_sensor_yaml, ERROR, "no IMU noise for mav0/imu0 (no mav0/imu0/sensor.yaml)",
                                None),
    "nonsense_sensor_yaml": (nonsense_sensor_yaml, ERROR, "key 'intrinsics' must hold 4 numbers", None),
    "nan_intrinsics": (nan_intrinsics, ERROR, "key 'intrinsics' has a non-finite value", None),
    "t_bs_15_numbers": (t_bs_15_numbers, ERROR, "key 'T_BS' must hold 16 numbers, got 15", None),
    "unknown_distortion": (unknown_distortion, ERROR, "key 'distortion_model' must be one of", None),
    "empty_data_csv": (empty_data_csv, ERROR, "lists no images", None),
    "empty_folder": (empty_folder, ERROR, "not an EuRoC ASL folder", None),
    "missing_path": (missing_path, ERROR, "dataset not found", None),
    "text_file_named_bag": (text_file_named_bag, ERROR, "not a ROS 1 bag, an MCAP file or an sqlite3", None),
    "truncated_ros1_bag": (truncated_ros1_bag, WARN, "read front to back; stopped at byte", None),
    "truncated_ros2_bag": (truncated_ros2_bag, WARN, "the database is cut short", None),
    "ros2_bag_without_metadata": (ros2_bag_without_metadata, WARN, "no metadata.yaml: read front to back", N),
}


def _run(dataset: Path, out: Path, domain: int) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # a namespace of its own: another test run on the same domain id (another seed, another
    # checkout) cannot mix its messages into this one
    proc = popen([sys.executable, "-m", "vilib_ros", "run", str(dataset), "--out", str(out), "--domain-id",
                  str(domain), "--namespace", f"broken_{os.getpid()}", "--no-video", "--timeout", "300"],
                 env=env, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("kind", list(CASES))
def test_broken_dataset(kind, ros_graph, base, tmp_path):
    breakage, expect, needle, frames_sent = CASES[kind]
    root = tmp_path / "ds"
    shutil.copytree(base, root)
    dataset = breakage(root) or root
    out = tmp_path / "out"
    r = _run(dataset, out, ros_graph.domain)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    if expect == ERROR:
        assert r.returncode == 2, r.stderr[-3000:]
        assert "vilib-ros run: error: " in r.stderr and needle in r.stderr, r.stderr[-2000:]
        assert not out.exists(), "an output folder was created for a dataset that cannot be opened"
        return
    assert r.returncode == 0, r.stderr[-4000:]
    report = (out / "report.md").read_text()
    if needle:
        assert needle in report and needle in r.stderr, (report, r.stderr[-2000:])
    import json

    player = json.loads((out / "player_stats.json").read_text())
    sent = player["images"][0]
    if frames_sent is not None:
        assert sent == frames_sent, player
    else:
        assert 0 < sent < N, player            # a truncated bag: the readable part
    if expect == SKIP and needle:
        assert player["skipped"] == {needle: 1}, player
        assert f"skipped unreadable frames: {needle} 1" in r.stderr
    # nothing else lost: every frame sent was tracked and recorded, every IMU sample received
    tracks = [ln for ln in (out / "recorded.jsonl").read_text().splitlines() if '"topic": "tracks"' in ln]
    assert len(tracks) == sent, (len(tracks), sent)
    fe = json.loads((out / "frontend_stats.json").read_text())
    assert fe["images_received"] == sent and fe["imu_received"] == player["imu"]
    assert "lost" not in r.stderr.split("frames tracked")[-1], r.stderr[-1500:]
