"""The tracks video of ``vilib-ros run``: a format browsers play where OpenCV's writer has one
(H.264, else VP8 WebM), else MPEG-4 Part 2 said to be unplayable in a browser, else PNG + GIF.

Guards: a video always in MPEG-4 Part 2 (``mp4v``), which browsers do not play, without a word.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from test_euroc import make_asl


@pytest.fixture()
def small(tmp_path, generated_frames):
    from vilib_ros.datasets import open_dataset

    ds = open_dataset(make_asl(tmp_path / "seq", generated_frames[:6], calibration=True))
    tracks = [{"stamp_ns": int(t), "ids": [1, 2], "u": [100.0 + k, 300.0], "v": [200.0, 250.0 + k]}
              for k, t in enumerate(ds.image_stamps(0))]
    return ds, tracks


def _frames(path) -> int:
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    return n


def test_the_first_format_browsers_play(small, tmp_path, capfd):
    from vilib_ros.pipeline_report import render_tracks_video

    ds, tracks = small
    out = tmp_path / "out"
    out.mkdir()
    kind, path = render_tracks_video(ds, tracks, out, 20.0)
    assert kind in ("H.264 MP4", "VP8 WebM"), kind      # both in every OpenCV wheel with FFmpeg: VP8 at least
    assert path.suffix == (".mp4" if kind == "H.264 MP4" else ".webm") and _frames(path) == 6
    assert "FFMPEG" not in capfd.readouterr().err      # the failed encoder probes stay off the console


def test_a_format_browsers_do_not_play_is_said(small, tmp_path, monkeypatch):
    from vilib_ros import pipeline_report
    from vilib_ros.pipeline_report import render_tracks_video

    ds, tracks = small
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(pipeline_report, "VIDEO_WRITERS", (("mp4v", "tracks.mp4", "MPEG-4 Part 2 MP4", False),))
    kind, path = render_tracks_video(ds, tracks, out, 20.0)
    assert kind == "MPEG-4 Part 2 MP4 (browsers do not play it)" and _frames(path) == 6
    monkeypatch.setattr(pipeline_report, "VIDEO_WRITERS", ())
    kind, path = render_tracks_video(ds, tracks, out, 20.0)
    assert kind == "gif" and path.name == "tracks.gif" and len(list((out / "tracks_frames").glob("*.png"))) == 6
    np.testing.assert_array_equal(cv2.imread(str(out / "tracks_frames" / "00000.png")).shape, (480, 752, 3))
