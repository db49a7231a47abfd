#!/usr/bin/env bash
# GPU session F (two GPUs): DDP on both GPUs first (tests, then the 1-vs-2-GPU benchmark), then one
# lane per GPU: re-run of the fixed GPU tests, classification benchmark, trainer-loop profile |
# RT-DETR-r18 and D-FINE-n capture benchmarks (SPEC G-10).
source benchmarks/gpu/_setup.sh
export NCCL_NVLS_ENABLE=0
run gpu_tests_ddp 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_ddp_gpu.py
run bench_ddp 200 python3 benchmarks/bench_ddp.py --out "$R/results/ddp" --commit "$COMMIT" --epochs 3 --n-train 640 --no-sync-bn --timeout 90
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  run gpu_tests_fixed 90 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_quant_gpu.py \
      tests/unit/models/test_yolo9_loss_speed_cuda.py
  run bench_classify 110 python3 benchmarks/bench_classify.py --out "$R/results/classify" --commit "$COMMIT"
  run profile_train_loop 90 python3 benchmarks/profile_train_loop.py --out "$R/results/profile" --commit "$COMMIT"
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  run bench_rtdetr 170 python3 benchmarks/bench_rtdetr.py --out "$R/results/rtdetr" --commit "$COMMIT" \
      --models rtdetr:r18 --batches 2,4,8 --providers off,triton --parity-models ""
  run bench_dfine 100 python3 benchmarks/bench_dfine.py --out "$R/results/dfine" --commit "$COMMIT" \
      --models dfine:n --batches 2,4,8 --parity-models ""
}
lane0 & lane1 & wait
cat "$R/summary.txt"
grep -hE "^(FAILED|ERROR)|passed|failed" "$R"/gpu_tests*.log | tail -12
tail -n 14 "$R/bench_ddp.log"
tail -n 14 "$R/profile_train_loop.log"
grep -h "speedup\|^|" "$R/bench_classify.log" | tail -12
grep -h "^| rtdetr\|^| dfine" "$R/bench_rtdetr.log" "$R/bench_dfine.log" | tail -14
pack
