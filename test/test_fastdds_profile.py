"""The project's Fast DDS profile (vilib_ros/nodes/fastdds_profile.xml) and where it applies.

Guards: a stereo pair of 752x480 images does not fit Fast DDS's default 512 KB shared-memory
segment; reliable QoS repairs the sample after a heartbeat and the IMU queued behind it comes as
late, so the frontend's IMU wait times out on nearly every stereo frame at backpressure. The
real-DDS side of it is asserted in test_bench_node.py (stereo at backpressure, IMU on time).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from vilib_ros.nodes.processes import FASTDDS_PROFILE, ros_env, with_fastdds_profile

NS = {"f": "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"}
STEREO_PAIR_BYTES = 2 * 752 * 480


class TestProfileFile:
    def test_segment_holds_several_stereo_pairs(self):
        root = ET.parse(FASTDDS_PROFILE).getroot()
        shm = [t for t in root.iterfind(".//f:transport_descriptor", NS) if t.findtext("f:type", namespaces=NS) == "SHM"]
        assert len(shm) == 1
        assert int(shm[0].findtext("f:segment_size", namespaces=NS)) >= 8 * STEREO_PAIR_BYTES
        part = root.find(".//f:participant", NS)
        assert part.get("is_default_profile") == "true"
        used = [e.text for e in part.iterfind(".//f:userTransports/f:transport_id", NS)]
        types = {t.findtext("f:transport_id", namespaces=NS): t.findtext("f:type", namespaces=NS)
                 for t in root.iterfind(".//f:transport_descriptor", NS)}
        # shared memory and UDP (discovery, and peers on other hosts), nothing builtin besides
        assert sorted(types[u] for u in used) == ["SHM", "UDPv4"]
        assert part.findtext(".//f:useBuiltinTransports", namespaces=NS) == "false"


class TestWithFastddsProfile:
    def test_node_environment_gets_the_profile(self):
        env = ros_env(7, base={"PATH": "/usr/bin"})
        assert env["FASTRTPS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE)

    @pytest.mark.parametrize("chosen", [{"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"},
                                        {"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"},
                                        {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"},
                                        {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}])
    def test_a_users_choice_is_kept(self, chosen):
        env = with_fastdds_profile(dict(chosen))
        assert env.get("FASTRTPS_DEFAULT_PROFILES_FILE") in (None, "/etc/mine.xml")
        assert env.get("FASTRTPS_DEFAULT_PROFILES_FILE") != str(FASTDDS_PROFILE)

    def test_launch_files_set_it(self):
        from pathlib import Path

        for f in sorted((Path(__file__).resolve().parents[1] / "launch").glob("*.launch.py")):
            src = f.read_text()
            assert "with_fastdds_profile(" in src and "SetEnvironmentVariable(" in src, f.name
