"""recorder_node: write what arrives on a set of topics to a JSON-lines file.

A test and command-line helper: one line per received message, flushed at once, so a
test or ``vilib-ros run`` can read the file while the node is still running.

Each line: ``{"topic", "type", "count" (per topic, from 1), "stamp_ns" (header stamp),
"recv_ns" (wall clock, time.time_ns), "recv_mono_ns" (monotonic clock)}`` plus a small
per-type summary:

* ``sensor_msgs/PointCloud`` (tracks): ``n``, and with ``record_points`` the lists
  ``ids``, ``u``, ``v`` (from the ``id_of_point``, ``u_of_point``, ``v_of_point`` channels);
* ``nav_msgs/Odometry``: ``p`` (3), ``q_xyzw`` (4);
* ``sensor_msgs/Image``: ``width``, ``height``, ``encoding``, ``step``, ``crc32`` (of the data);
* ``diagnostic_msgs/DiagnosticArray``: ``status`` = {name: {key: value}};
* ``std_msgs/Bool``: ``data``; ``nav_msgs/Path``: ``n``; ``visualization_msgs/MarkerArray``: ``n``.

Subscribed
----------
  each entry of ``topics`` (``"name:package/msg/Type"``; relative names, remap freely)

Published
---------
  nothing

Parameters
----------
Parameters: ``python -m vilib_ros.nodes.recorder_node --print-parameters``, or docs/parameters.md;
all read-only.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np
from rclpy.node import Node
from rclpy.qos import HistoryPolicy

from vilib_ros.nodes._common import exit_main, reliable_qos, sensor_qos, take_pending
from vilib_ros.nodes.conversions import stamp_to_ns
from vilib_ros.nodes.params import ParamSpec, declare_all

DEFAULT_TOPICS = ["tracks:sensor_msgs/msg/PointCloud", "odometry:nav_msgs/msg/Odometry"]


def parameter_table() -> list[ParamSpec]:
    return [
        ParamSpec("output", "recorder.jsonl", "file to write (JSON lines; parent folders are created)",
                  read_only=True),
        ParamSpec("topics", list(DEFAULT_TOPICS), "topics to record as name:package/msg/Type", read_only=True),
        ParamSpec("record_points", True, "store ids/u/v of every tracks message", read_only=True),
        ParamSpec("reliable", True, "reliable keep-all QoS, nothing lost (else best-effort sensor-data QoS; a "
                  "reliable subscription does not match a best-effort publisher)", read_only=True),
        ParamSpec("queue_size", 100, "subscription queue depth", range=(1, 10000), read_only=True),
    ]


def _import_type(type_name: str):
    parts = type_name.replace("::", "/").split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"message type must look like package/msg/Type, got {type_name!r}")
    try:
        module = importlib.import_module(f"{parts[0]}.{parts[1]}")
    except ImportError as exc:
        raise ValueError(f"message type {type_name!r}: {parts[0]}.{parts[1]} does not import here ({exc})") from exc
    msg_type = getattr(module, parts[2], None)
    if not isinstance(msg_type, type):
        raise ValueError(f"message type {type_name!r}: {parts[0]}.{parts[1]} has no message {parts[2]!r}")
    return msg_type


def summarise(msg, record_points: bool = True) -> dict:
    name = type(msg).__name__
    out: dict = {}
    if name == "PointCloud":
        out["n"] = len(msg.points)
        if record_points:
            ch = {c.name: np.asarray(c.values, dtype=np.float64) for c in msg.channels}
            for key, chan in (("ids", "id_of_point"), ("u", "u_of_point"), ("v", "v_of_point"),
                              ("age", "age_of_point")):
                if chan in ch:
                    vals = ch[chan]
                    out[key] = np.rint(vals).astype(np.int64).tolist() if key in ("ids", "age") else \
                        np.round(vals, 3).tolist()
    elif name == "Odometry":
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        out["p"] = [p.x, p.y, p.z]
        out["q_xyzw"] = [q.x, q.y, q.z, q.w]
    elif name == "Image":
        out.update(width=msg.width, height=msg.height, encoding=msg.encoding, step=msg.step,
                   crc32=zlib.crc32(np.asarray(msg.data, dtype=np.uint8).tobytes()))
    elif name == "DiagnosticArray":
        out["status"] = {s.name: {kv.key: kv.value for kv in s.values} for s in msg.status}
    elif name == "Bool":
        out["data"] = bool(msg.data)
    elif name == "Path":
        out["n"] = len(msg.poses)
    elif name == "MarkerArray":
        out["n"] = len(msg.markers)
        out["points"] = sum(len(m.points) for m in msg.markers)
    return out


class RecorderNode(Node):
    def __init__(self):
        super().__init__("recorder_node")
        self.specs = parameter_table()
        self.p = declare_all(self, self.specs)
        topics = []             # every entry checked before the output file is created
        for entry in self.p["topics"]:
            topic, _, type_name = entry.rpartition(":")
            if not topic:
                raise ValueError(f"topics entry must be name:package/msg/Type, got {entry!r}")
            topics.append((topic, type_name, _import_type(type_name)))
        path = Path(self.p["output"])
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "w", buffering=1)
        self.counts: dict[str, int] = {}
        self._subs = []
        for topic, type_name, msg_type in topics:
            if self.p["reliable"]:
                # keep all: a slow recorder slows the publisher down (flow control) instead of losing data
                qos = reliable_qos(self.p["queue_size"])
                qos.history = HistoryPolicy.KEEP_ALL
            else:
                qos = sensor_qos(self.p["queue_size"])
            self.counts[topic] = 0
            self._subs.append((self.create_subscription(
                msg_type, topic, lambda m, t=topic, tn=type_name: self._on_msg(t, tn, m), qos), topic, type_name))
        self.get_logger().info(f"recording {len(self._subs)} topics to {path}")

    def _on_msg(self, topic: str, type_name: str, msg) -> None:
        self.counts[topic] += 1
        rec = {"topic": topic, "type": type_name, "count": self.counts[topic],
               "recv_ns": time.time_ns(), "recv_mono_ns": time.monotonic_ns()}
        header = getattr(msg, "header", None)
        rec["stamp_ns"] = stamp_to_ns(header.stamp) if header is not None else None
        try:
            rec.update(summarise(msg, self.p["record_points"]))
        except Exception as exc:  # noqa: BLE001 - a recorder never dies on a message
            rec["error"] = str(exc)
        self._file.write(json.dumps(rec) + "\n")

    def close(self) -> None:
        """The messages already received but not yet handed to a callback (the stop came first)
        are written too, then the file is closed."""
        if not self._file.closed:
            for sub, topic, type_name in self._subs:
                for msg in take_pending(sub):
                    self._on_msg(topic, type_name, msg)
            self._file.close()
        print("recorder_node: recorded " + ", ".join(f"{t}: {n}" for t, n in self.counts.items()), file=sys.stderr)


def main(args=None):
    exit_main(RecorderNode, args, parameter_table)


if __name__ == "__main__":
    main()
