#!/usr/bin/env bash
# GPU session B: GPU tests, both parity matrices, prediction/training/kernel benchmarks.
source benchmarks/gpu/_setup.sh
run() { local name=$1 limit=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$? ${name} $((SECONDS-t0))s" | tee -a "$R/summary.txt"; tail -n 25 "$R/$name.log"; }
run gpu_tests 200 python3 -m pytest tests/gpu -q -p no:cacheprovider -rfE
run parity_predict 120 python3 benchmarks/parity_predict.py --out "$R/docs" --commit "$COMMIT"
run parity_train 120 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT"
run bench_predict 150 python3 benchmarks/bench_predict.py --out "$R/results" --commit "$COMMIT"
run bench_train_graph 150 python3 benchmarks/bench_train_graph.py --out "$R/results" --commit "$COMMIT"
pack
