"""``vilib-ros``: the command-line entry point.

Each sub-command lives in its own module, which provides
``configure_parser(parser)`` and ``run_command(args) -> int``; modules are imported
only when their command runs, so ``vilib-ros --help`` works without CUDA, ROS or gtsam.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("vilib_ros.pipeline", "replay a dataset (or a generated one) through player, frontend and backend"),
    "generate": ("vilib_ros.synthetic.cli", "render a synthetic EuRoC-format sequence with exact ground truth"),
    "bench": ("vilib_ros.bench.detector", "benchmark the FAST detector and grid NMS against OpenCV"),
    "bench-tracker": ("vilib_ros.bench.tracker", "benchmark the LK tracker and the whole frontend"),
    "bench-backend": ("vilib_ros.bench.backend", "benchmark the VIO backend per keyframe"),
    "bench-vio": ("vilib_ros.bench.vio", "benchmark the whole VIO (frontend + backend) on a synthetic sequence"),
    "bench-node": ("vilib_ros.bench.node", "benchmark the frontend node over real DDS (latency, overhead, drops)"),
    "eval": ("vilib_ros.evaluation", "APE/RPE of a trajectory against ground truth"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vilib-ros", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        try:
            importlib.import_module(module).configure_parser(p)
        except ImportError as exc:
            p.set_defaults(_import_error=str(exc))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    if getattr(args, "_import_error", None):
        print(f"vilib-ros {args.command}: cannot load {args._module}: {args._import_error}", file=sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run_command(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
