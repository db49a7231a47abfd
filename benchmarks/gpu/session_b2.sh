#!/usr/bin/env bash
# GPU session B2: prediction, training-step and fine-tune benchmarks; FP8 kernels.
source benchmarks/gpu/_setup.sh
run() { local name=$1 limit=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$? ${name} $((SECONDS-t0))s" | tee -a "$R/summary.txt"; tail -n 12 "$R/$name.log"; }
run bench_predict 130 python3 benchmarks/bench_predict.py --out "$R/results" --sizes t,s,m,c --batches 1,8,32 --iters 40 --e2e-iters 15
run bench_train_graph 170 python3 benchmarks/bench_train_graph.py --out "$R/results" --commit "$COMMIT"
run finetune_graph 200 python3 benchmarks/finetune_graph.py --out "$R/results" --commit "$COMMIT"
run bench_quant 60 python3 benchmarks/bench_quant.py --out "$R/results" --commit "$COMMIT" --sizes 1,16,64,256 --squares 1024,4096,8192
cat "$R/summary.txt"
pack
