"""Do decode threads wait for the GIL? The player's and the offline runner's case, measured.

Images are decoded on ``--workers`` threads by :class:`vilib_ros.datasets.replay.Prefetcher` (real
PNG files, OpenCV releases the GIL while it decodes) while the consuming thread runs Python for
``--consume-ms`` per image (a player publishing, a frontend's bookkeeping). After each image a
decode thread needs the GIL back; the running thread is asked to drop it only after the switch
interval (Python's default 5 ms). Each setting runs in a fresh process, alternating, ``--rounds``
times: the interpreter's default, and :data:`~vilib_ros.datasets.replay.DECODE_SWITCH_INTERVAL_S`.
Printed and written (``--out``): images per second and the seconds the consumer waited for decoded
images.

Usage: ``python3 bench/decode_gil_probe.py DATASET [--workers 4] [--consume-ms 1.5] [--rounds 2]
[--out DIR]`` (an ASL folder: ``vilib-ros generate --duration 30 DIR`` makes one).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
switch = {switch!r}
if switch:
    sys.setswitchinterval(switch)
from vilib_ros.datasets import open_dataset
from vilib_ros.datasets.replay import Prefetcher, replay_events
feed = Prefetcher(lambda: open_dataset({dataset!r}), depth=16, workers={workers})
n, events = replay_events(feed.ds, cameras=1)
t0 = time.perf_counter(); feed.start(events); images = 0; wait = 0.0; it = iter(feed)
while True:
    a = time.perf_counter()
    item = next(it, None)
    wait += time.perf_counter() - a
    if item is None:
        break
    if item[0] == "image":
        images += 1
        end = time.perf_counter() + {consume_ms} * 1e-3
        while time.perf_counter() < end:     # the consumer busy in Python
            pass
dt = time.perf_counter() - t0
feed.close()
print(json.dumps({{"switch_s": sys.getswitchinterval(), "images": images, "images_per_s": images / dt,
                  "wait_s": wait, "wall_s": dt}}))
"""


def main() -> int:
    from vilib_ros.bench.results import load, machine, write_results
    from vilib_ros.datasets.replay import DECODE_SWITCH_INTERVAL_S

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--consume-ms", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="bench/out")
    a = ap.parse_args()
    settings = (("default (5 ms)", None), (f"{DECODE_SWITCH_INTERVAL_S * 1e3:g} ms", DECODE_SWITCH_INTERVAL_S))
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
           "load_start": load(), "dataset": str(a.dataset), "workers": a.workers, "consume_ms": a.consume_ms,
           "runs": {name: [] for name, _ in settings}}
    for r in range(a.rounds):
        for name, sw in (settings if r % 2 == 0 else settings[::-1]):
            code = CHILD.format(repo=str(REPO), switch=sw, dataset=str(a.dataset), workers=a.workers,
                                consume_ms=a.consume_ms)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                                 env=dict(os.environ))
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            d = json.loads(out.stdout.strip().splitlines()[-1])
            res["runs"][name].append(d)
            print(f"{name}: {d['images_per_s']:.0f} images/s, waited {d['wait_s']:.2f} s", flush=True)
    res["load_end"] = load()
    m = res["machine"]
    lines = ["# Decode threads and the GIL (`bench/decode_gil_probe.py`)", "",
             f"{res['date']}, {m['cpu']} ({m['cores']} cores), Python {m['python']}, load average "
             f"{res['load_start']} -> {res['load_end']}; {Path(a.dataset).name}: {a.workers} decode threads, "
             f"the consumer busy in Python {a.consume_ms} ms per image; each setting in a fresh process, "
             "alternating.", "", "| switch interval | images/s | consumer waited for decoded images, s |",
             "|---|---|---|"]
    for name, runs in res["runs"].items():
        rates = ", ".join(f"{x['images_per_s']:.0f}" for x in runs)
        waits = ", ".join(f"{x['wait_s']:.2f}" for x in runs)
        lines.append(f"| {name} | {rates} | {waits} |")
    write_results(a.out, "decode_gil_probe", res, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
