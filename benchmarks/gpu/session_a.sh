#!/usr/bin/env bash
# GPU session A: train the bundled demo checkpoint (benchmarks/train_demo.py).
source benchmarks/gpu/_setup.sh
timeout 480 python3 benchmarks/train_demo.py --out "$R/demo" --time-limit ${DEMO_SECONDS:-300} --commit "$COMMIT" 2>&1 | tail -n 60 | tee "$R/train_demo.log"
cp "$R/demo/LibreYOLO9t.pt" "$OUT/" 2>/dev/null; pack
