"""Write a ROS 1 bag in the layout of the official EuRoC bags with Debian's ROS 1 ``rosbag``.

Run with the system interpreter (``/usr/bin/python3``, where ``apt-get install python3-rosbag
python3-sensor-msgs python3-geometry-msgs`` put the ROS 1 Python packages); it needs no NumPy
or OpenCV. Input: a JSON manifest ``{"images": [[cam, stamp_ns, width, height, raw_path], ...],
"imu": [[stamp_ns, wx, wy, wz, ax, ay, az], ...], "groundtruth": [[stamp_ns, x, y, z, qx, qy, qz,
qw], ...]}`` with each image as raw 8-bit grey bytes. Output: ``/cam{i}/image_raw``
(sensor_msgs/Image mono8, frame ``cam{i}``), ``/imu0`` (sensor_msgs/Imu, frame ``imu4``) and the
Vicon pose ``/vicon/firefly_sbx/firefly_sbx`` (geometry_msgs/TransformStamped), no camera_info
and no tf -- as in the bags the EuRoC authors published -- bag time = header stamp.

Usage: python3 write_euroc_bag_rosbag1.py MANIFEST.json OUT.bag
"""
import json
import sys

import genpy
import rosbag
from geometry_msgs.msg import TransformStamped
from sensor_msgs.msg import Image, Imu


def stamp(t_ns):
    return genpy.Time(int(t_ns) // 1_000_000_000, int(t_ns) % 1_000_000_000)


def main(manifest_path, out_path):
    with open(manifest_path) as f:
        m = json.load(f)
    events = [(int(r[1]), 1, "image", r) for r in m["images"]] + [(int(r[0]), 0, "imu", r) for r in m["imu"]]
    events += [(int(r[0]), 2, "gt", r) for r in m.get("groundtruth", [])]
    events.sort(key=lambda e: (e[0], e[1]))
    seq = {}
    with rosbag.Bag(out_path, "w") as bag:
        for t, _, kind, r in events:
            if kind == "image":
                cam, _, w, h, raw = r
                msg = Image()
                msg.header.seq = seq.setdefault(cam, 0)
                seq[cam] += 1
                msg.header.stamp = stamp(t)
                msg.header.frame_id = f"cam{cam}"
                msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step = h, w, "mono8", 0, w
                with open(raw, "rb") as g:
                    msg.data = g.read()
                bag.write(f"/cam{cam}/image_raw", msg, stamp(t))
            elif kind == "imu":
                msg = Imu()
                msg.header.stamp = stamp(t)
                msg.header.frame_id = "imu4"
                msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = r[1:4]
                msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = r[4:7]
                bag.write("/imu0", msg, stamp(t))
            else:
                msg = TransformStamped()
                msg.header.stamp = stamp(t)
                msg.header.frame_id = "world"
                msg.child_frame_id = "firefly_sbx/firefly_sbx"
                tr, q = msg.transform.translation, msg.transform.rotation
                tr.x, tr.y, tr.z = r[1:4]
                q.x, q.y, q.z, q.w = r[4:8]
                bag.write("/vicon/firefly_sbx/firefly_sbx", msg, stamp(t))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
