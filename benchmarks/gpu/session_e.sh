#!/usr/bin/env bash
# GPU session E (two GPUs, one lane per GPU): re-run of the fixed GPU tests, the yolo9 loss and
# training-step benchmarks, the yolo9 training parity rows (new loss), the quantization benchmark;
# the trainer throughput benchmark, the fine-tune comparison and the YOLOX / RTMDet step benchmarks.
source benchmarks/gpu/_setup.sh
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  run gpu_tests_fixed 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_quant_gpu.py \
      tests/gpu/test_rtmdet_gpu.py tests/unit/models/test_yolo9_loss_speed_cuda.py tests/gpu/test_graphs_train.py
  run bench_loss 60 python3 benchmarks/bench_loss.py --out "$R/results/loss" --commit "$COMMIT"
  run bench_train_graph 170 python3 benchmarks/bench_train_graph.py --out "$R/results" --commit "$COMMIT"
  run parity_train_yolo9 80 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT" \
      --families yolo9 --merge docs/cuda-graph-training-parity.json
  run bench_quant 70 python3 benchmarks/bench_quant.py --out "$R/results" --commit "$COMMIT" --sizes 1,16,64,256 --squares 1024,4096,8192
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  run bench_train 100 python3 benchmarks/bench_train.py --out "$R/results/train" --commit "$COMMIT" --n-train 400 --epochs 3
  run finetune_graph 250 python3 benchmarks/finetune_graph.py --out "$R/results" --commit "$COMMIT" --n-train 200 --n-val 50
  run bench_train_graph_yolox 90 python3 benchmarks/bench_train_graph.py --out "$R/results/yolox" --commit "$COMMIT" \
      --model LibreYOLOXtiny.pt --batches 8
  run bench_train_graph_rtmdet 90 python3 benchmarks/bench_train_graph.py --out "$R/results/rtmdet" --commit "$COMMIT" \
      --model LibreRTMDett.pt --batches 8
}
lane0 & lane1 & wait
cat "$R/summary.txt"
grep -hE "^(FAILED|ERROR)|passed|failed" "$R"/gpu_tests*.log | tail -20
for f in bench_train_graph bench_train_graph_yolox bench_train_graph_rtmdet; do grep -h "speedup_fastest" "$R/$f.log" | tail -4; done
grep -h "images_per_s\|ms_per_iter" "$R/bench_train.log" | tail -4
grep -h "Speed-up\|^| eager\|^| graph" "$R/finetune_graph.log" | tail -4
grep -h "'pass'" "$R/parity_train_yolo9.log" | tail -8
tail -n 8 "$R/bench_loss.log"
pack
