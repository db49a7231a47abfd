#!/usr/bin/env bash
# GPU session H (prepared, not yet run; two GPUs): verify what changed after session G and take
# clean numbers. Lane 0: GPU tests of the capture recovery / trainer / quant / yolo9 loss, then the
# training-parity rows of yolox, yolo7, rtmdet at the current commit. Lane 1: the step benchmarks
# ALONE on their GPU (lane 0 runs no timing), then prediction benchmarks for YOLOX and RTMDet.
#   COMMIT=<sha> bash benchmarks/gpu/session_h.sh      (kind nvidia-h200-x2, carry .whl)
source benchmarks/gpu/_setup.sh
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  run gpu_tests 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_graphs_train.py \
      tests/gpu/test_quant_gpu.py tests/gpu/test_classify_gpu.py tests/unit/models/test_yolo9_loss_speed_cuda.py
  run parity_train_wave1 200 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT" \
      --families yolox,yolo7,rtmdet --merge docs/cuda-graph-training-parity.json
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  run bench_train_graph 170 python3 benchmarks/bench_train_graph.py --out "$R/results" --commit "$COMMIT"
  run bench_predict_yolox 120 python3 benchmarks/bench_predict.py --out "$R/results/yolox" --family-token YOLOX \
      --sizes tiny,s --batches 1,8 --iters 30 --e2e-iters 10
  run bench_predict_rtmdet 120 python3 benchmarks/bench_predict.py --out "$R/results/rtmdet" --family-token RTMDet \
      --sizes t,s --batches 1,8 --iters 30 --e2e-iters 10
}
lane0 & lane1 & wait
cat "$R/summary.txt"
grep -hE "^(FAILED|ERROR)|passed|failed" "$R"/gpu_tests*.log | tail -12
grep -h "'pass'" "$R/parity_train_wave1.log" | tail -28
grep -h "speedup_fastest" "$R/bench_train_graph.log" | tail -4
pack
