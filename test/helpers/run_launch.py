"""Run one launch file the way ``ros2 launch PACKAGE FILE ARGS`` does (ros2launch's
``launch_a_launch_file``), for the launch tests:

    python test/helpers/run_launch.py PATH/TO/file.launch.py name:=value ...

A ``launch.LaunchService`` (with ``argv``, so ``LaunchConfiguration`` sees the arguments) runs an
``IncludeLaunchDescription`` of a ``PythonLaunchDescriptionSource`` with the parsed ``name:=value``
arguments. SIGINT (or SIGTERM) shuts it down as Ctrl-C does: the processes get SIGINT, then
SIGTERM after the launch's timeout. Exits with the launch service's return code.
"""
import signal
import sys

from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource


def main(argv: list[str]) -> int:
    if not argv or not argv[0].endswith(".py"):
        print("usage: run_launch.py FILE.launch.py [name:=value ...]", file=sys.stderr)
        return 2
    path, args = argv[0], argv[1:]
    bad = [a for a in args if ":=" not in a]
    if bad:
        print(f"run_launch.py: arguments must be name:=value, got {bad}", file=sys.stderr)
        return 2
    launch_arguments = [tuple(a.split(":=", 1)) for a in args]
    # launch hears SIGINT through Python's handler: where the parent started this process with SIGINT
    # ignored (a background job of a shell script), Python installed none and Ctrl-C never arrived
    signal.signal(signal.SIGINT, signal.default_int_handler)
    service = LaunchService(argv=args, noninteractive=True)
    service.include_launch_description(LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(path), launch_arguments=launch_arguments)]))
    return service.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
