# Sourced by the GPU session scripts: carried wheels, PYTHONPATH, a results folder.
set -u
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
R=${R:-/tmp/res}
mkdir -p "$R"
COMMIT=${COMMIT:-unknown}
export LIBREYOLO_COMMIT=$COMMIT
nvidia-smi > "$R/nvidia-smi.txt" 2>&1 || true
python3 -c "import torch,triton;print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(0))" | tee "$R/env.txt"
# Results only: no checkpoints, run folders, datasets or images (the tarball must stay under 16 MiB).
pack() { tar czf "$OUT/results.tgz" --exclude='*.pt' --exclude='runs' --exclude='*.cache' --exclude='data' \
           --exclude='*.jpg' --exclude='*.png' --exclude='labels' -C "$R" . ; ls -la "$OUT"
         if [ "$(stat -c %s "$OUT/results.tgz")" -gt 15000000 ]; then
           echo "results.tgz too large: keeping only json/md/log/txt"
           (cd "$R" && find . -type f \( -name '*.json' -o -name '*.md' -o -name '*.log' -o -name '*.txt' \) -size -2M \
              | tar czf "$OUT/results.tgz" -T -); ls -la "$OUT"; fi; }
# run NAME LIMIT CMD...: CMD with a time limit, output to $R/NAME.log, one line in $R/summary.txt.
run() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "rc=$? ${name} $((SECONDS-t0))s" >> "$R/summary.txt"; }
rm -f "$R/summary.txt"
