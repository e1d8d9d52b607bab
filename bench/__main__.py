"""``python -m bench COMMAND``: the laboratory's benchmarks, run from the checkout.

Each command's module provides ``configure_parser(parser)`` and ``run_command(args) -> int``, as
the ``vilib-ros`` commands do; errors read ``bench <command>: error: <message>`` (exit 2), ``-v``
adds the traceback."""
from __future__ import annotations

import sys
from pathlib import Path

# run from anywhere: the checkout's own vilib_ros and bench first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMANDS: dict[str, tuple[str, str]] = {
    "detector": ("bench.detector", "FAST detector + grid NMS on real EuRoC frames against OpenCV (GPU)"),
    "tracker": ("bench.tracker", "the LK tracker and the whole frontend against OpenCV, per-frame table (GPU)"),
    "cpu": ("bench.cpu", "the CPU frontend (compiled, NumPy) against an OpenCV-native one"),
    "backend": ("bench.backend", "the VIO backend per keyframe; --changes: each backend change in lockstep"),
    "vio": ("bench.vio", "the whole VIO (frontend + backend) through the offline runner on a rendered sequence"),
    "throughput": ("bench.throughput", "the whole VIO's frames/s from PNG files and the paper's code at equal work (GPU)"),
    "accuracy": ("bench.accuracy", "where the trajectory error comes from: exact tracks, our tracks, cuVSLAM"),
    "mono-study": ("bench.mono_study", "what sets the mono-inertial error: one backend configuration per row"),
    "node": ("bench.node", "the frontend node over real DDS: latency, overhead, drops"),
    "node-process": ("bench.node_process", "the frontend node's tracker and per-frame steps outside ROS"),
    "link": ("bench.link", "a frame's way over PCIe: DMA and mapped reads by size and by how recently written"),
    "ab": ("bench.ab", "one benchmark by this code and by another checkout's, in turns (ABBA)"),
}


def main(argv: list[str] | None = None) -> int:
    from vilib_ros import cli

    return cli.run(argv if argv is not None else sys.argv[1:], COMMANDS, prog="bench",
                   single_blas=("backend", "accuracy", "mono-study"), description=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
