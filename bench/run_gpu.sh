#!/usr/bin/env bash
# Every GPU check in one call, on a machine with a CUDA device:
#   1. the GPU tests (pytest -m gpu), launches checked, outputs poisoned;
#   2. the detector benchmark (95 real EuRoC frames, OpenCV FAST in the same run);
#   3. the tracker / frontend benchmark (OpenCV LK in the same run);
#   4. the whole-VIO benchmark (offline runner: GPU frontend + backend overlapping; the previous
#      backend defaults in turns with today's, --compare-previous) and the trajectory-accuracy
#      benchmark (python -m bench accuracy), where gtsam imports (a machine without internet can be given the
#      backend wheels: ../shared/tools/gpu-machine-wheels.sh .whl backend, ~40 MB, then
#      pip install --target DIR, PYTHONPATH; they and the EuRoC frames (~38 MB) do not fit one
#      64 MB transfer together: run `tests` with the frames and `bench` with the wheels);
#   5. node: the frontend node's tracker outside ROS (python -m bench node-process) and the node over
#      real DDS (python -m bench node --device cuda). The GPU machine
#      has no ROS: carry the wheels in .whl (../shared/tools/gpu-machine-wheels.sh .whl ros); they
#      are installed from there when rclpy does not import.
#   6. throughput (not part of `all`): python -m bench throughput --device cuda: the whole VIO from a
#      2,000-frame PNG sequence rendered there, and the paper's code (built from .vilib: src, debs,
#      harness = ../shared/seed_bench; the real frames in .vilib/euroc_v101_head) and ours at equal
#      work, alternately. Carry .vilib and .whl (gtsam's wheel, installed into /tmp/site when gtsam
#      does not import); a few minutes.
# Usage: bash bench/run_gpu.sh [tests|bench|node|all|throughput] ; results go to $OUT (default bench/out),
# the benchmarks' console logs to $LOGDIR (default $OUT).
# The EuRoC frames are read from $VILIB_ROS_EUROC (default .data/euroc_v101_head).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
OUT=${OUT:-bench/out}
LOGDIR=${LOGDIR:-$OUT}
mkdir -p "$OUT" "$LOGDIR"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export VILIB_ROS_EUROC=${VILIB_ROS_EUROC:-.data/euroc_v101_head}
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; python3 -c "import cupy, numpy, cv2; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'opencv', cv2.__version__)"; } 2>&1 | tee "$OUT/device.txt"
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -m gpu -q -p no:cacheprovider test 2>&1 | tee "$OUT/gpu_tests.log"
  rc=${PIPESTATUS[0]}
  # the GPU and CPU frontends on the same frames: the agreement figures into the log
  python3 -m pytest -q -s -p no:cacheprovider test/test_frontend.py -k GpuMatchesCpu 2>&1 \
    | grep -E "GPU vs CPU|passed|failed" | tee -a "$OUT/gpu_tests.log"
fi
if [[ $what == bench || $what == all ]]; then
  python3 -m bench detector --out "$OUT" 2>&1 | tee "$LOGDIR/bench_detector.log" || rc=1
  if python3 -c "import bench.tracker" 2>/dev/null; then
    # the LK tracker, the whole frontend and the per-frame table (frontend_per_frame.json)
    python3 -m bench tracker --out "$OUT" 2>&1 | tee "$LOGDIR/bench_tracker.log" || rc=1
  fi
  if python3 -c "import gtsam" 2>/dev/null; then
    python3 -m bench vio --device cuda --compare-previous --out "$OUT" 2>&1 | grep -v "^INFO vilib_ros.backend" | tee "$LOGDIR/bench_vio.log" || rc=1
    # trajectory accuracy (real V1_01 ground truth + IMU rendered in stereo; needs the EuRoC folder's
    # V101_groundtruth_tum.txt and imu0); cuVSLAM rows are skipped there unless dim_odom imports
    python3 -m bench accuracy --device cuda --out "$OUT" 2>&1 | tee "$LOGDIR/bench_accuracy.log" || rc=1
  fi
fi
if [[ $what == node || $what == all ]]; then
  if ! python3 -c "import rclpy" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl 2>&1 | tail -3
  fi
  export AMENT_PREFIX_PATH=${AMENT_PREFIX_PATH:-$(python3 -c 'import sys; print(sys.prefix)')}
  export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  if python3 -c "import rclpy, sensor_msgs.msg" 2>/dev/null; then
    # the node's tracker and per-frame steps outside ROS: process() as the tracker benchmark times it against the node's path
    python3 -m bench node-process --device cuda --out "$OUT" 2>&1 | tee "$LOGDIR/bench_node_process.log" || rc=1
    # --trace-dir: every frame's latency split into publisher / transport / executor / node / back (CSV)
    python3 -m bench node --device cuda --out "$OUT" --trace-dir "$OUT/node_trace" 2>&1 | tee "$LOGDIR/bench_node.log" || rc=1
  else
    echo "node: rclpy not importable and no .whl/*.whl to install: the node benchmark skipped" | tee "$LOGDIR/bench_node.log"
    rc=1
  fi
fi
if [[ $what == throughput ]]; then
  if ! python3 -c "import gtsam" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -3
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
  fi
  python3 -m bench throughput --device cuda --out "$OUT" 2>&1 | grep -v "^INFO vilib_ros.backend" \
    | tee "$LOGDIR/bench_throughput.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
fi
exit $rc
