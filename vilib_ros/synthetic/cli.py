"""``vilib-ros generate OUT_DIR``: render a synthetic EuRoC-format sequence."""
from __future__ import annotations

import argparse
import time


def rate(text: str) -> float:
    """A rate in Hz: a number (``20``) or a fraction of whole numbers (``20/3`` for 6.7 Hz, a 150 ms period)."""
    num, sep, den = text.partition("/")
    try:
        value = float(num) / float(den) if sep else float(num)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a rate: {text!r} (a number, or a fraction such as 20/3)") from None
    return value


def interval(text: str) -> tuple[float, float]:
    """``START:END`` in seconds from the start of the sequence."""
    a, sep, b = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(a), float(b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an interval: {text!r} (START:END in seconds, e.g. 4:5.5)") from None


def configure_parser(p: argparse.ArgumentParser) -> None:
    from .sequence import CONDITIONS, LENSES

    p.add_argument("out_dir", help="output folder (the ASL layout goes to OUT_DIR/mav0)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--preset", choices=["default", "fast_rotation", "slow"], default="default")
    p.add_argument("--speed", type=float, default=None, help="RMS speed m/s (default: from the preset)")
    p.add_argument("--angular-rate", type=float, default=None, help="RMS angular rate rad/s (default: from the preset)")
    p.add_argument("--mono", action="store_true", help="one camera only (default: stereo)")
    p.add_argument("--baseline", type=float, default=0.11, help="stereo baseline in metres (default 0.11)")
    p.add_argument("--rate", type=rate, default=None,
                   help="camera rate Hz, a number or a fraction (20/3 for 6.7 Hz) (default 20, or the condition's)")
    p.add_argument("--imu-rate", type=float, default=200.0, help="IMU rate Hz (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--condition", choices=list(CONDITIONS), default=None,
                   help="a named set of the imaging options below (the accuracy benchmark's): distort = EuRoC's "
                        "lenses; blur = lenses + 8 ms motion blur + shot/read noise + exposure steps + vignetting; "
                        "blur20 = the same with 20 ms; 10hz, 6.7hz = blur at those camera rates. The options "
                        "given explicitly override it")
    p.add_argument("--noise-sigma", type=float, default=None,
                   help="Gaussian image noise (the read noise with --shot-noise), grey levels (default 1, or the "
                        "condition's)")
    p.add_argument("--lens", choices=list(LENSES), default=None,
                   help="pinhole (default) or euroc: EuRoC's radial-tangential coefficients, rendered through the "
                        "lens and written to sensor.yaml")
    p.add_argument("--exposure-ms", type=float, default=None,
                   help="exposure time: motion blur over it from the true poses, centred on the stamp (default 0)")
    p.add_argument("--shot-noise", type=float, default=None, metavar="E_PER_GREY",
                   help="photon shot noise with this many electrons per grey level (default 0: none)")
    p.add_argument("--exposure-steps", type=float, default=None, metavar="SECONDS",
                   help="auto-exposure gain steps, one every SECONDS on average (default 0: none)")
    p.add_argument("--vignetting", type=float, default=None,
                   help="brightness lost at the image corners, 0..1 (radial falloff; default 0)")
    p.add_argument("--blank", type=interval, action="append", default=None, metavar="START:END",
                   help="black frames from START to END seconds (a covered lens; repeatable)")
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


def config_from_args(args: argparse.Namespace):
    """The SequenceConfig of the command line: the condition's options, then those given explicitly."""
    from . import SequenceConfig
    from .sequence import CONDITIONS

    kw = dict(CONDITIONS[args.condition]) if args.condition else {}
    given = {"rate_hz": args.rate, "image_noise_sigma": args.noise_sigma, "lens": args.lens,
             "exposure_s": None if args.exposure_ms is None else args.exposure_ms * 1e-3,
             "shot_noise_e_per_grey": args.shot_noise, "exposure_steps_s": args.exposure_steps,
             "vignetting": args.vignetting, "blank_intervals_s": None if args.blank is None else tuple(args.blank)}
    kw.update({k: v for k, v in given.items() if v is not None})
    return SequenceConfig(duration_s=args.duration, imu_rate_hz=args.imu_rate, preset=args.preset, speed=args.speed,
                          angular_rate=args.angular_rate, stereo=not args.mono, baseline=args.baseline, seed=args.seed,
                          illumination=args.illumination, imu_noise=not args.no_imu_noise,
                          imu_bias_walk=not args.no_bias_walk, textures=args.textures, **kw)


def run_command(args: argparse.Namespace) -> int:
    """Errors in the arguments raise ``ValueError`` / ``FileExistsError``: ``vilib-ros`` prints
    them as ``vilib-ros generate: error: ...`` and exits 2."""
    import math

    from . import generate_sequence

    cfg = config_from_args(args)
    t0 = time.perf_counter()
    out = generate_sequence(args.out_dir, cfg, progress=not args.quiet, bag=args.bag, depth=args.depth,
                            workers=args.workers, bag_storage=args.bag_storage, overwrite=args.overwrite)
    dt = time.perf_counter() - t0
    n = math.floor(cfg.duration_s * cfg.rate_hz + 1e-9) + 1
    print(f"wrote {out} ({n} frames x {2 if cfg.stereo else 1} cameras) in {dt:.1f} s")
    return 0
