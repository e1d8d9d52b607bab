"""Write docs/parameters.md: every node's parameters, generated from their declarations.

The tables are the nodes' ``parameter_table()`` (what ``python -m vilib_ros.nodes.<node>
--print-parameters`` prints): the node parameters as each node declares them, the frontend's and the
backend's algorithm parameters from the fields of ``FrontendConfig`` / ``BackendConfig`` (help,
range, choices written once, on the field). Needs the ros extra (the node modules import rclpy).

Usage: ``python tools/parameters_doc.py`` writes docs/parameters.md; ``--check`` exits 1, with a
diff, where the file differs from what the declarations generate; ``--stdout`` prints it instead.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "parameters.md"
COMMAND = "python tools/parameters_doc.py"

#: the nodes, in the order of the document, with what their section says before the table
NODES = {
    "frontend_node": "Feature tracking (`vilib_ros.frontend.FeatureTracker`). The node's own parameters come "
                     "first; then the fields of `FrontendConfig`, nested ones as prefixes (`detector.`, "
                     "`tracker.`). A writable frontend field that is not live rebuilds the tracker when it "
                     "changes (its new tracks take ids after the last one handed out); a change the tracker "
                     "cannot be built with is refused with the reason.",
    "backend_node": "Visual-inertial odometry (`vilib_ros.backend.VioEstimator`). The node's own parameters "
                    "come first; then the fields of `BackendConfig`. All read-only.",
    "player_node": "Replay of a EuRoC dataset (ASL folder, ROS 1 .bag, ROS 2 bag).",
    "recorder_node": "Writes what arrives on a set of topics to a JSON-lines file (tests, `vilib-ros run`).",
}


def render() -> str:
    """docs/parameters.md as the declarations give it."""
    from vilib_ros.nodes.params import markdown_table

    parts = [
        "# Parameters of the vilib_ros nodes",
        "",
        f"Generated from the parameter declarations by `{COMMAND}`: do not edit by hand. A node prints "
        "its own table with `python -m vilib_ros.nodes.<node> --print-parameters`.",
        "",
        "Set them in a parameter file (`config/euroc.yaml`), on the command line "
        "(`--ros-args -p name:=value`), or, where writable, at run time (`ros2 param set`). "
        "*At run time*: `read-only`, fixed at start; `writable`, taken at once; `live`, applied to the "
        "running tracker (tracks and ids go on). Values outside the range or choices are refused.",
    ]
    for node, intro in NODES.items():
        table = importlib.import_module(f"vilib_ros.nodes.{node}").parameter_table()
        parts += ["", f"## {node}", "", intro, "", markdown_table(table)]
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 where docs/parameters.md is not current")
    ap.add_argument("--stdout", action="store_true", help="print instead of writing docs/parameters.md")
    args = ap.parse_args(argv)
    text = render()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        old = OUTPUT.read_text() if OUTPUT.is_file() else ""
        if old == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                   str(OUTPUT.relative_to(REPO)), "generated"))
        print(f"docs/parameters.md is not current: run {COMMAND}")
        return 1
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
