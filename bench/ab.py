"""``python -m bench ab``: one benchmark command run by this code and by another's, in turns.

    python -m bench ab --against ../old_checkout --rounds 2 \\
        --keys process_p50_us,stereo_process_p50_us -- tracker --per-frame-only

Each run is ``python -m bench COMMAND ... --out DIR`` (``python -m vilib_ros bench-COMMAND`` for a
checkout whose benchmarks still live inside the package) in a subprocess started in an empty
folder of its own, with ``PYTHONPATH`` = the arm's root (the folder that holds its ``vilib_ros``)
followed by the caller's entries that hold no ``vilib_ros``. Before the runs each arm's
interpreter says which ``vilib_ros`` it imports, and a wrong one is an error.

An A/B comparison run from the repository root with the other code given through ``PYTHONPATH``
would run the repository's code in both arms (``python -m`` puts the working folder ahead of
``PYTHONPATH``): hence the empty folder and the check.

The order is ABBA over each two rounds (this, other, other, this, ...), so that an order effect
(the first run of a pair warming the machine's caches and clocks) cancels. ABBA does not cancel a
slow period of the host: a slow host in the middle runs of a 2-round A/B shows as a gain of one arm.
So the default is four rounds, and before and after every run this
process (idle meanwhile) times the host itself (:func:`host_speed`: a 32 MB copy and a Python loop):
a control table in ``ab.md`` marks the runs around which the host was slower than usual and says
when one arm's runs had a slower host than the other's. Each run's JSON (the
one ``*.json`` its command wrote into ``--out``, or ``--json NAME``) is read; every ``--keys``
entry (a dotted path, list indices as numbers: ``runs.0.frames_per_s``) becomes a row of
``ab.md`` / ``ab.json``: each arm's values in run order, their median, and other / this.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.results import machine, revision, write_results


def configure_parser(p) -> None:
    p.add_argument("--against", required=True,
                   help="the other code: a checkout, or a folder that holds a vilib_ros package")
    p.add_argument("--rounds", type=int, default=4, help="runs per arm (ABBA order), default 4")
    p.add_argument("--keys", default="", help="comma-separated dotted paths into the command's JSON")
    p.add_argument("--json", default=None, help="which JSON of the command's --out folder to read")
    p.add_argument("--out", default="bench_ab", help="folder for ab.md / ab.json and each run's output")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("bench", nargs="+", metavar="COMMAND",
                   help="the benchmark command (python -m bench COMMAND) and its arguments, after --, without --out")


def this_root() -> Path:
    """The checkout this benchmark runs from (it holds ``bench/`` and ``vilib_ros/``)."""
    return Path(__file__).resolve().parents[1]


def arm_command(root: Path, bench: list[str]) -> list[str]:
    """How ``root``'s code runs the benchmark command ``bench``: ``python -m bench ...`` where the
    checkout has the benchmark package, else the package's own ``vilib-ros bench-...`` command."""
    if (root / "bench" / "__main__.py").is_file():
        return [sys.executable, "-m", "bench", *bench]
    return [sys.executable, "-m", "vilib_ros", "bench" if bench[0] == "detector" else f"bench-{bench[0]}", *bench[1:]]


def code_root(path) -> Path:
    """The folder that holds ``path``'s ``vilib_ros`` package (``path`` itself or ``path/..``)."""
    p = Path(path).expanduser().resolve()
    if (p / "vilib_ros" / "__init__.py").is_file():
        return p
    if p.name == "vilib_ros" and (p / "__init__.py").is_file():
        return p.parent
    raise ValueError(f"--against {path}: no vilib_ros package there (expected {p / 'vilib_ros' / '__init__.py'})")


def arm_env(root: Path, base: dict | None = None) -> dict:
    """The environment of a run of ``root``'s code: PYTHONPATH = root, then the caller's entries
    that hold no vilib_ros package (a wheel folder given that way stays reachable)."""
    env = dict(os.environ if base is None else base)
    keep = [e for e in env.get("PYTHONPATH", "").split(os.pathsep)
            if e and not (Path(e) / "vilib_ros" / "__init__.py").is_file()]
    env["PYTHONPATH"] = os.pathsep.join([str(root), *keep])
    return env


def imported_by(root: Path, cwd: Path) -> Path:
    """The ``vilib_ros`` package the arm's interpreter imports (checked against ``root``)."""
    p = subprocess.run([sys.executable, "-c", "import vilib_ros; print(vilib_ros.__file__)"], cwd=cwd,
                       env=arm_env(root), capture_output=True, text=True, timeout=120)
    if p.returncode:
        raise RuntimeError(f"the code of {root} does not import: {p.stderr.strip()[-500:]}")
    got = Path(p.stdout.strip()).resolve().parent
    if got != (root / "vilib_ros").resolve():
        raise RuntimeError(f"an arm meant to run {root / 'vilib_ros'} imports {got}: its results would not be its own")
    return got


def order(rounds: int) -> list[str]:
    """ABBA: this, other, other, this, this, other, ..."""
    return [arm for r in range(rounds) for arm in (("this", "other") if r % 2 == 0 else ("other", "this"))]


def lookup(obj, path: str):
    """``obj`` at a dotted ``path`` (list indices as numbers); None where it is missing."""
    for part in path.split("."):
        if isinstance(obj, list):
            try:
                obj = obj[int(part)]
            except (ValueError, IndexError):
                return None
        elif isinstance(obj, dict):
            if part not in obj:
                return None
            obj = obj[part]
        else:
            return None
    return obj


def read_result(out: Path, name: str | None) -> dict:
    files = sorted(out.glob("*.json"))
    if name:
        files = [f for f in files if f.name == name]
    if len(files) != 1:
        raise RuntimeError(f"{out}: expected one JSON{' named ' + name if name else ''}, found "
                           f"{[f.name for f in sorted(out.glob('*.json'))]} (choose one with --json)")
    return json.loads(files[0].read_text())


#: a run whose host figure is this much slower than the median of all runs is marked in the control table
SLOW_HOST = 1.15


def host_speed(copy_mb: int = 32, loop: int = 200_000) -> dict:
    """This process's view of the host's speed now: ``copy_gbps`` (``np.copyto`` of ``copy_mb`` MB, the
    median of 5) and ``python_ns`` (a pure-Python loop, ns per step, the median of 5). ~0.1 s."""
    import time

    import numpy as np

    src = np.ones(copy_mb << 20, np.uint8)
    dst = np.empty_like(src)
    cp, py = [], []
    for _ in range(5):
        a = time.perf_counter()
        np.copyto(dst, src)
        b = time.perf_counter()
        acc = 0
        for i in range(loop):
            acc += i
        c = time.perf_counter()
        cp.append(src.nbytes / (b - a) / 1e9)
        py.append((c - b) / loop * 1e9)
    return {"copy_gbps": statistics.median(cp), "python_ns": statistics.median(py)}


def host_control(runs: list) -> dict:
    """Per run, the slower of its before / after host figures against the median over all runs
    (``slowdown`` >= 1: that much slower); per arm the median slowdown; ``flagged``: runs over SLOW_HOST."""
    def worst(r):
        h = r.get("host") or {}
        b, a = h.get("before"), h.get("after")
        if not (b and a):
            return None
        return {"copy_gbps": min(b["copy_gbps"], a["copy_gbps"]), "python_ns": max(b["python_ns"], a["python_ns"])}

    w = [worst(r) for r in runs]
    got = [x for x in w if x]
    if not got:
        return {"runs": [], "arms": {}, "flagged": []}
    med_c = statistics.median(x["copy_gbps"] for x in got)
    med_p = statistics.median(x["python_ns"] for x in got)
    per_run, flagged = [], []
    for r, x in zip(runs, w):
        if x is None:
            per_run.append(None)
            continue
        sd = max(med_c / x["copy_gbps"], x["python_ns"] / med_p)
        per_run.append(sd)
        if sd > SLOW_HOST:
            flagged.append(r["n"])
    arms = {arm: statistics.median([sd for r, sd in zip(runs, per_run) if r["arm"] == arm and sd is not None] or [1.0])
            for arm in ("this", "other")}
    return {"runs": per_run, "arms": arms, "flagged": flagged, "median_copy_gbps": med_c, "median_python_ns": med_p}


def _median(xs):
    v = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(v) if v else None


def run(args) -> dict:
    bench = [a for a in args.bench if a != "--"]
    if not bench:
        raise ValueError("no command to run: give it after --, e.g. -- tracker --per-frame-only")
    if "--out" in bench:
        raise ValueError("leave --out to bench-ab: each run writes into a folder of its own")
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {args.rounds}")
    roots = {"this": this_root(), "other": code_root(args.against)}
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    keys = [k for k in args.keys.split(",") if k]
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": machine(),
           "command": ["python", "-m", "bench", *bench], "keys": keys, "arms": {}, "runs": []}
    with tempfile.TemporaryDirectory(prefix="vilib_ros_ab_") as td:
        cwd = Path(td)      # empty: nothing there shadows either arm's package
        for arm, root in roots.items():
            res["arms"][arm] = {"root": str(root), "imports": str(imported_by(root, cwd)),
                                "revision": revision(root)}
        for n, arm in enumerate(order(args.rounds), start=1):
            run_out = out / f"{n:02d}_{arm}"
            run_out.mkdir(parents=True, exist_ok=True)
            for f in run_out.glob("*.json"):
                f.unlink()
            print(f"bench-ab: run {n} ({arm}: {res['arms'][arm]['revision'] or roots[arm]}): {' '.join(bench)}",
                  file=sys.stderr, flush=True)
            before = host_speed()
            with open(run_out / "log.txt", "w") as log:
                p = subprocess.run([*arm_command(roots[arm], bench), "--out", str(run_out)], cwd=cwd,
                                   env=arm_env(roots[arm]), stdout=log, stderr=subprocess.STDOUT,
                                   timeout=args.timeout)
            if p.returncode:
                tail = (run_out / "log.txt").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"run {n} ({arm}) exited with {p.returncode}:\n{tail}")
            data = read_result(run_out, args.json)
            wrote = (data.get("code") or {}).get("package") if isinstance(data, dict) else None
            if wrote and Path(wrote).resolve() != (roots[arm] / "vilib_ros").resolve():
                raise RuntimeError(f"run {n} ({arm}) was written by {wrote}, not by {roots[arm] / 'vilib_ros'}")
            res["runs"].append({"n": n, "arm": arm, "out": str(run_out),
                                "values": {k: lookup(data, k) for k in keys},
                                "host": {"before": before, "after": host_speed()}})
    res["rows"] = []
    for k in keys:
        row = {"key": k}
        for arm in ("this", "other"):
            vals = [r["values"][k] for r in res["runs"] if r["arm"] == arm]
            row[arm] = vals
            row[f"{arm}_median"] = _median(vals)
        a, b = row["this_median"], row["other_median"]
        row["other_over_this"] = (b / a) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else None
        res["rows"].append(row)
    res["host_control"] = host_control(res["runs"])
    write_results(out, "ab", res, markdown(res), echo=False)
    return res


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, (dict, list)):
        return "(not a number: name a leaf)"
    return "-" if x is None else str(x)


def markdown(res: dict) -> str:
    a = res["arms"]
    m = res["machine"]
    lines = [f"# A/B: `{' '.join(res['command'])}`", "",
             f"- date (UTC): {res['date']}; machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, "
             f"gtsam {m['gtsam']}, {m['platform']}",
             f"- this: {a['this']['revision'] or a['this']['root']} (imports {a['this']['imports']})",
             f"- other: {a['other']['revision'] or a['other']['root']} (imports {a['other']['imports']})",
             "- order: " + ", ".join(f"{r['n']} {r['arm']}" for r in res["runs"])
             + " (ABBA: an order effect cancels over two rounds)", "",
             "| key | this (runs) | this median | other (runs) | other median | other / this |",
             "|---|---|---:|---|---:|---:|"]
    for r in res["rows"]:
        lines.append(f"| `{r['key']}` | {', '.join(_fmt(v) for v in r['this'])} | {_fmt(r['this_median'])} | "
                     f"{', '.join(_fmt(v) for v in r['other'])} | {_fmt(r['other_median'])} | "
                     f"{_fmt(r['other_over_this'])} |")
    hc = res.get("host_control") or {}
    if hc.get("runs"):
        lines += ["", "Host control (this process, idle during the runs, timed the host before and after each: a 32 MB "
                  "copy in GB/s and a Python loop in ns per step; slowdown = the worse of the two against the "
                  f"median of all runs, marked over {SLOW_HOST:.2f}):", "",
                  "| run | arm | copy GB/s before / after | Python ns before / after | slowdown |", "|---|---|---|---|---:|"]
        for r, sd in zip(res["runs"], hc["runs"]):
            h = r.get("host") or {}
            b, a = h.get("before") or {}, h.get("after") or {}
            mark = " **slow host**" if r["n"] in hc["flagged"] else ""
            lines.append(f"| {r['n']} | {r['arm']} | {_fmt(b.get('copy_gbps'))} / {_fmt(a.get('copy_gbps'))} | "
                         f"{_fmt(b.get('python_ns'))} / {_fmt(a.get('python_ns'))} | {_fmt(sd)}{mark} |")
        arms = hc["arms"]
        ratio = arms["other"] / arms["this"] if arms.get("this") else None
        lines += ["", f"Median slowdown of the host around this arm's runs: this {_fmt(arms['this'])}, other "
                  f"{_fmt(arms['other'])}."]
        if ratio is not None and not (1 / 1.05 <= ratio <= 1.05):
            slower = "other" if ratio > 1 else "this"
            lines.append(f"**The host was slower around the {slower} arm's runs ({_fmt(max(ratio, 1 / ratio))}x): "
                         "a difference of that size between the arms may be the host's, not the code's; run more "
                         "rounds.**")
        if hc["flagged"]:
            lines.append(f"Runs with a slow host around them: {', '.join(map(str, hc['flagged']))}.")
    return "\n".join(lines) + "\n"


def run_command(args) -> int:
    res = run(args)
    print(markdown(res))
    return 0
