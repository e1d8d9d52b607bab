"""``vilib-ros``: the command-line entry point.

Each sub-command lives in its own module, which provides ``configure_parser(parser)`` and
``run_command(args) -> int``. Only the module of the command being run is imported (its
arguments are added to the parser then), so ``vilib-ros --help`` and every command work
without CUDA, ROS or gtsam unless that command needs them.

Errors: a user error (a missing file, a dataset or argument that is not valid) prints
``vilib-ros <command>: error: <message>`` and exits 2; anything else prints a one-line
internal error and exits 1. ``-v`` adds the traceback and debug logging. Only the project's
own loggers (``vilib_ros.*``) are configured, never the root logger.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import traceback

from vilib_ros.interrupts import install_stop_handlers, settle_stop

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("vilib_ros.pipeline", "replay a dataset (or a generated one) through player, frontend and backend"),
    "generate": ("vilib_ros.synthetic.cli", "render a synthetic EuRoC-format sequence with exact ground truth"),
    "bench": ("vilib_ros.benchmark", "how fast this machine runs it: the frontend per frame beside OpenCV, the whole VIO"),
    "eval": ("vilib_ros.evaluation", "APE/RPE of a trajectory against ground truth"),
}

#: Commands that time the backend in their own process: one OpenBLAS thread, as the backend's processes
#: run (:mod:`vilib_ros.nodes._single_blas`, set before NumPy loads; the user's value wins), so that
#: the benchmark measures the thread pool the backend runs with.
SINGLE_BLAS = ("bench",)

#: Exceptions that mean "the user asked for something that cannot be done", not a bug.
USER_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
               ValueError)


def command_of(argv: list[str], commands: dict | None = None) -> str | None:
    """The sub-command named in ``argv`` (the first argument that is not an option), if any."""
    commands = COMMANDS if commands is None else commands
    for a in argv:
        if not a.startswith("-"):
            return a if a in commands else None
    return None


def build_parser(command: str | None = None, commands: dict | None = None, prog: str = "vilib-ros",
                 description: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported, to add that command's arguments."""
    commands = COMMANDS if commands is None else commands
    parser = argparse.ArgumentParser(prog=prog, description=description or __doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in commands.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            try:
                importlib.import_module(module).configure_parser(p)
            except ImportError as exc:
                p.set_defaults(_import_error=str(exc))
    return parser


def configure_logging(verbose: bool) -> None:
    """Console logging for the project's own loggers only (third-party INFO lines stay quiet)."""
    logger = logging.getLogger("vilib_ros")
    if not any(getattr(h, "_vilib_ros_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._vilib_ros_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else list(argv))


def run(argv: list[str], commands: dict | None = None, prog: str = "vilib-ros",
        single_blas: tuple = SINGLE_BLAS, description: str | None = None) -> int:
    """Parse ``argv`` against ``commands`` (name -> (module, help)) and run the command named; the
    checkout's laboratory (``python -m bench``) runs its commands through this too."""
    commands = COMMANDS if commands is None else commands
    command = command_of(argv, commands)
    if command in single_blas:
        import vilib_ros.nodes._single_blas  # noqa: F401 - before the command's module loads NumPy
    parser = build_parser(command, commands, prog, description)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    # Ctrl-C always interrupts: Python installs its KeyboardInterrupt handler only where SIGINT was
    # not ignored at start-up (a shell starts background jobs so, and `kill -INT` or a supervising
    # tool's stop would do nothing), and a Ctrl-C whose exception Python swallowed in a finaliser
    # is re-delivered (vilib_ros.interrupts)
    install_stop_handlers((signal.SIGINT,))
    from vilib_ros.nodes.processes import with_fastdds_profile

    with_fastdds_profile(os.environ)    # this process's own participants, as the nodes it starts
    if not args.command:
        parser.print_help()
        return 2
    prog = f"{prog} {args.command}"
    if getattr(args, "_import_error", None):
        print(f"{prog}: error: cannot load {args._module}: {args._import_error}", file=sys.stderr)
        return 2
    try:
        return int(importlib.import_module(args._module).run_command(args) or 0)
    except KeyboardInterrupt:
        settle_stop()
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback with -v
        if args.verbose:
            traceback.print_exc()
        print(f"{prog}: internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
