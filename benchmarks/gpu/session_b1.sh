#!/usr/bin/env bash
# GPU session B1: GPU tests (tests/gpu + cuda-marked unit tests) and both parity matrices.
source benchmarks/gpu/_setup.sh
run() { local name=$1 limit=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$? ${name} $((SECONDS-t0))s" | tee -a "$R/summary.txt"; tail -n 15 "$R/$name.log"; }
run gpu_tests 240 python3 -m pytest tests/gpu tests/unit -m cuda -q -p no:cacheprovider -rfE --timeout 120
run parity_predict 100 python3 benchmarks/parity_predict.py --out "$R/docs" --commit "$COMMIT"
run parity_train 150 python3 benchmarks/parity_train.py --out "$R/docs" --commit "$COMMIT"
cat "$R/summary.txt"
pack
