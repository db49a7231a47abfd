#!/usr/bin/env bash
# GPU session G (two GPUs): after the trainer fix (no autograd graph outlives its step), check that
# the trainer really replays its training graph, then re-measure: trainer-loop profile and trainer
# throughput | the 20-epoch fine-tune eager vs --cuda-graph.
source benchmarks/gpu/_setup.sh
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  run gpu_tests_trainer 100 python3 -m pytest -q -p no:cacheprovider -rfE \
      "tests/gpu/test_graphs_train.py::test_trainer_really_replays_its_training_graph" \
      tests/gpu/test_classify_gpu.py tests/unit/models/test_yolo9_loss_speed_cuda.py -k "trainer or training or host_sync or finalized" \
      "tests/gpu/test_quant_gpu.py::test_finalized_model_uses_fp8_gemm"
  run profile_train_loop 60 python3 benchmarks/profile_train_loop.py --out "$R/results/profile" --commit "$COMMIT"
  run bench_train 80 python3 benchmarks/bench_train.py --out "$R/results/train" --commit "$COMMIT" --n-train 400 --epochs 3
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  run finetune_graph 235 python3 benchmarks/finetune_graph.py --out "$R/results" --commit "$COMMIT" --n-train 200 --n-val 50
}
lane0 & lane1 & wait
cat "$R/summary.txt"
grep -hE "^(FAILED|ERROR)|passed|failed" "$R"/gpu_tests*.log | tail -12
tail -n 20 "$R/profile_train_loop.log"
grep -h "^| [0-9]" "$R/bench_train.log" | tail -3
grep -h "Speed-up\|^| eager\|^| graph" "$R/finetune_graph.log" | tail -4
pack
