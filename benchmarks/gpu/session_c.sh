#!/usr/bin/env bash
# GPU session C: re-run GPU tests after fixes, regenerate both matrices with every registered
# family, fine-tune eager vs graph, attention benchmark.
source benchmarks/gpu/_setup.sh
run() { local name=$1 limit=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$? ${name} $((SECONDS-t0))s" | tee -a "$R/summary.txt"; tail -n 8 "$R/$name.log"; }
rm -f "$R/summary.txt"
run gpu_tests 150 python3 -m pytest tests/gpu tests/unit -m cuda -q -p no:cacheprovider -rfE --timeout 100
run parity_predict 50 python3 benchmarks/parity_predict.py --out "$R/docs" --commit "$COMMIT"
run parity_train 120 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT"
run finetune_graph 170 python3 benchmarks/finetune_graph.py --out "$R/results" --commit "$COMMIT" --n-train 200 --n-val 50
run bench_attention 60 python3 benchmarks/bench_attention.py --out "$R/results" --commit "$COMMIT" --skip-hub --iters 50 --warmup 10
cat "$R/summary.txt"
pack
