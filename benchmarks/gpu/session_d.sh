#!/usr/bin/env bash
# GPU session D (two GPUs): lane 0 runs the GPU tests and the prediction parity rows of the
# classification / D-FINE / DEIM families; lane 1 runs the fine-tune comparison and the training
# parity rows of the seam and classification families. Each lane pins one GPU.
source benchmarks/gpu/_setup.sh
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  run gpu_tests_quant_alone 90 python3 -m pytest tests/gpu/test_quant_gpu.py -q -p no:cacheprovider -rfE
  run gpu_tests 300 python3 -m pytest tests/gpu -q -p no:cacheprovider -rfE --ignore=tests/gpu/test_ddp_gpu.py
  run parity_predict_cls 60 python3 benchmarks/parity_predict.py --out "$R/docs" --commit "$COMMIT" \
      --families resnet,convnext,mobilenetv4,efficientnetv2 --imgsz 224 --merge docs/cuda-graph-parity.json
  run parity_predict_detr 90 python3 benchmarks/parity_predict.py --out "$R/docs" --commit "$COMMIT" \
      --families dfine,deim --merge "$R/docs/cuda-graph-parity.json"
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  run finetune_graph 290 python3 benchmarks/finetune_graph.py --out "$R/results" --commit "$COMMIT" --n-train 200 --n-val 50
  run parity_train_detr 170 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT" \
      --families rtdetr,rtdetrv2,dfine,deim --batch 4 --merge docs/cuda-graph-training-parity.json
  run parity_train_cls 80 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT" \
      --families resnet,convnext,mobilenetv4,efficientnetv2 --imgsz 224 --batch 8 \
      --merge "$R/docs/cuda-graph-training-parity.json"
}
lane0 & lane1 & wait
cat "$R/summary.txt"
for f in "$R"/gpu_tests*.log; do echo "== $f"; grep -E "^(FAILED|ERROR)|passed|failed" "$f" | tail -30; done
for f in "$R"/parity_*.log; do echo "== $f"; grep -E "CHANGE|should be|pass|fail|error" "$f" | tail -40; done
tail -n 25 "$R/finetune_graph.log"
pack
