"""``vilib-ros generate OUT_DIR``: render a synthetic EuRoC-format sequence."""
from __future__ import annotations

import argparse
import time


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("out_dir", help="output folder (the ASL layout goes to OUT_DIR/mav0)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--preset", choices=["default", "fast_rotation", "slow"], default="default")
    p.add_argument("--speed", type=float, default=None, help="RMS speed m/s (default: from the preset)")
    p.add_argument("--angular-rate", type=float, default=None, help="RMS angular rate rad/s (default: from the preset)")
    p.add_argument("--mono", action="store_true", help="one camera only (default: stereo)")
    p.add_argument("--baseline", type=float, default=0.11, help="stereo baseline in metres (default 0.11)")
    p.add_argument("--rate", type=float, default=20.0, help="camera rate Hz (default 20)")
    p.add_argument("--imu-rate", type=float, default=200.0, help="IMU rate Hz (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise-sigma", type=float, default=1.0, help="image noise, grey levels (default 1)")
    p.add_argument("--illumination", action="store_true", help="vary global gain and offset over time")
    p.add_argument("--no-imu-noise", action="store_true", help="no IMU white noise")
    p.add_argument("--no-bias-walk", action="store_true", help="constant IMU biases")
    p.add_argument("--textures", choices=["skimage", "procedural"], default="skimage")
    p.add_argument("--depth", action="store_true", help="also write mav0/cam*/depth/<ts>.png (uint16 mm)")
    p.add_argument("--bag", choices=["ros1", "ros2"], default=None, help="also write a ROS bag")
    p.add_argument("--bag-storage", choices=["sqlite3", "mcap"], default="sqlite3")
    p.add_argument("--workers", type=int, default=None, help="render processes (default: CPU count)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR/mav0")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run_command(args: argparse.Namespace) -> int:
    """Errors in the arguments raise ``ValueError`` / ``FileExistsError``: ``vilib-ros`` prints
    them as ``vilib-ros generate: error: ...`` and exits 2."""
    from . import SequenceConfig, generate_sequence

    cfg = SequenceConfig(duration_s=args.duration, rate_hz=args.rate, imu_rate_hz=args.imu_rate,
                         preset=args.preset, speed=args.speed, angular_rate=args.angular_rate,
                         stereo=not args.mono, baseline=args.baseline, seed=args.seed,
                         image_noise_sigma=args.noise_sigma, illumination=args.illumination,
                         imu_noise=not args.no_imu_noise, imu_bias_walk=not args.no_bias_walk,
                         textures=args.textures)
    t0 = time.perf_counter()
    out = generate_sequence(args.out_dir, cfg, progress=not args.quiet, bag=args.bag, depth=args.depth,
                            workers=args.workers, bag_storage=args.bag_storage, overwrite=args.overwrite)
    dt = time.perf_counter() - t0
    n = int(round(cfg.duration_s * cfg.rate_hz)) + 1
    print(f"wrote {out} ({n} frames x {2 if cfg.stereo else 1} cameras) in {dt:.1f} s")
    return 0
