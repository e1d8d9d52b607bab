"""Every declared parameter of the four nodes at the ends of its range, each choice and each flipped bool,
one at a time, given at start-up (``--ros-args -p name:=value``): does the node start and stop cleanly, or
refuse the value with one line (``<node>: cannot start: <reason>``, exit 2)?

``bench/frontend_param_sweep.py`` runs the frontend's library with each value, and
``test_ros_params`` sets each run-time frontend parameter on a running node; this sweep starts the real
node processes with each value, the node-level parameters (cameras, QoS, timeouts, paths) included.
A case is

- ``ran``: the process was alive ``--alive`` seconds after its start, and after SIGINT it exited 0
  within ``--stop`` seconds without a traceback;
- ``refused``: it exited 2 before, with ``cannot start:`` and no traceback on stderr;
- anything else (a traceback, another exit code, a hang at SIGINT) is a failure, printed with the last
  lines of stderr.

The player is given a generated 3 s stereo sequence (it waits for subscribers, then replays and
lingers), the recorder a file in a temporary folder. Cases run ``--jobs`` at a time, each a process of
its own over Fast DDS on localhost (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, domain ``--domain``).

Usage: ``python3 bench/node_start_sweep.py [--nodes frontend,backend,player,recorder] [--only TEXT]
[--jobs 3] [--frontend-device cuda] [--out DIR]``; prints one line per case and writes ``node_start_sweep.json``. Exit 1 where
a case failed.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULES = {"frontend": "vilib_ros.nodes.frontend_node", "backend": "vilib_ros.nodes.backend_node",
           "player": "vilib_ros.nodes.player_node", "recorder": "vilib_ros.nodes.recorder_node"}


def specs_of(node: str):
    if node == "frontend":
        from vilib_ros.nodes.frontend_setup import parameter_table
    elif node == "backend":
        from vilib_ros.nodes.backend_node import parameter_table
    elif node == "player":
        from vilib_ros.nodes.player_node import parameter_table
    else:
        from vilib_ros.nodes.recorder_node import parameter_table
    return parameter_table()


def ros_value(v) -> str:
    """A value as ``-p name:=value`` reads it (YAML): floats keep a decimal point, so the type matches."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    return str(v)


def cases(nodes: list[str], only: str) -> list[tuple[str, str, object]]:
    from vilib_ros.nodes.params import edge_values

    out = []
    for node in nodes:
        for s in specs_of(node):
            if only and only not in s.name:
                continue
            out += [(node, s.name, v) for v in edge_values(s.default, s.range, s.choices)]
    return out


def base_args(node: str, work: Path, dataset: Path, frontend_device: str = "") -> list[str]:
    if node == "frontend" and frontend_device:
        return ["-p", f"device:={frontend_device}"]
    if node == "player":
        return ["-p", f"dataset:={dataset}", "-p", "progress:=false"]
    if node == "recorder":
        return ["-p", f"output:={work / 'rec.jsonl'}"]
    if node == "backend":
        return ["-p", f"trajectory_path:={work / 'traj.txt'}"]
    return []


def run_case(node: str, name: str, value, dataset: Path, domain: int, alive_s: float, stop_s: float,
             frontend_device: str = "") -> dict:
    with tempfile.TemporaryDirectory(prefix="vilib_sweep_") as tmp:
        work = Path(tmp)
        args = base_args(node, work, dataset, frontend_device)
        if any(a.startswith(f"{name}:=") for a in args):
            args = [a for a in args if not a.startswith(f"{name}:=")]
            args = [a for i, a in enumerate(args) if not (a == "-p" and (i + 1 >= len(args) or args[i + 1] == "-p"))]
        cmd = [sys.executable, "-m", MODULES[node], "--ros-args", *args, "-p", f"{name}:={ros_value(value)}"]
        env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain),
                   PYTHONUNBUFFERED="1", VILIB_ROS_CPU_THREADS="1", OPENBLAS_NUM_THREADS="1")
        err_path = work / "stderr.txt"
        t0 = time.monotonic()
        with open(err_path, "wb") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=work, env=env,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=alive_s)
                stopped = False
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGINT)
                stopped = True
                try:
                    rc = p.wait(timeout=stop_s)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    rc = "hung at SIGINT"
        text = err_path.read_text(errors="replace")
        traceback_seen = "Traceback (most recent call last)" in text
        if stopped and rc == 0 and not traceback_seen:
            outcome = "ran"
        elif not stopped and rc == 2 and "cannot start:" in text and not traceback_seen:
            outcome = "refused"
        else:
            outcome = "FAILED"
        reason = ""
        if outcome == "refused":
            reason = next((ln for ln in text.splitlines() if "cannot start:" in ln), "")
        elif outcome == "FAILED":
            reason = "\n".join(text.strip().splitlines()[-8:])
        return {"node": node, "parameter": name, "value": value, "outcome": outcome, "exit": rc,
                "stopped_by_sigint": stopped, "seconds": round(time.monotonic() - t0, 1), "reason": reason}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="frontend,backend,player,recorder")
    ap.add_argument("--only", default="", help="only parameters whose name contains this")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--alive", type=float, default=12.0, help="seconds a node must be alive to count as started")
    ap.add_argument("--stop", type=float, default=20.0, help="seconds a node may take to exit after SIGINT")
    ap.add_argument("--domain", type=int, default=97)
    ap.add_argument("--frontend-device", default="", choices=("", "auto", "cuda", "cpu"),
                    help="the frontend's device for every case but its own 'device' cases (default: the node's)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    nodes = [n for n in a.nodes.split(",") if n]
    unknown = set(nodes) - set(MODULES)
    if unknown:
        ap.error(f"unknown node(s) {sorted(unknown)}; known: {sorted(MODULES)}")
    todo = cases(nodes, a.only)
    with tempfile.TemporaryDirectory(prefix="vilib_sweep_data_") as data:
        dataset = Path(data) / "seq"
        subprocess.run([sys.executable, "-m", "vilib_ros", "generate", "--duration", "3", "--quiet", str(dataset)],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"{len(todo)} cases, {a.jobs} at a time", flush=True)
        rows, t_start = [], time.time()
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            futs = [ex.submit(run_case, n, name, v, dataset, a.domain, a.alive, a.stop, a.frontend_device) for n, name, v in todo]
            for k, f in enumerate(cf.as_completed(futs), 1):
                r = f.result()
                rows.append(r)
                line = f"[{k}/{len(todo)}] {r['node']} {r['parameter']}={r['value']!r}: {r['outcome']} ({r['seconds']} s)"
                if r["outcome"] != "ran":
                    line += "\n    " + r["reason"].replace("\n", "\n    ")
                print(line, flush=True)
    rows.sort(key=lambda r: (r["node"], r["parameter"], str(r["value"])))
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("ran", "refused", "FAILED")}
    print(f"{len(rows)} cases in {time.time() - t_start:.0f} s: {counts}")
    if a.out:
        from bench import results

        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "frontend_device": a.frontend_device or "(the node's default)",
               "machine": results.machine(), "code": results.code(),
               "load_average_end": results.load(), "alive_s": a.alive, "counts": counts, "cases": rows}
        (out / "node_start_sweep.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    return 1 if counts["FAILED"] else 0


if __name__ == "__main__":
    sys.exit(main())
