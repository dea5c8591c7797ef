#!/usr/bin/env bash
# The GPU checks, run on a lent GPU machine from the repository root after bench/gpu-prepare.sh
# here (the machine has CUDA but none of placesim's Debian libraries: dist-gpu/ brings them);
# bench/gpu-compare.py OUT then makes the table of docs/perf.md from what it leaves.
#
#   bash bench/gpu-check.sh [OUT]        (default $OUT, else gpu-out)
#
# 1. the device (nvidia-smi) and `placesim cluster --cluster local`;
# 2. test-kernels-cuda (every CUDA kernel against the CPU kernel, zoo:cnn on GPU:0) and
#    test-profiler-cuda (CUPTI);
# 3. the onnx-light models on GPU:0 against ONNX's reference outputs (--feed ramp) and against
#    placesim's CPU run;
# 4. the torchvision models of dist-gpu/models (bench/gpu-models.py: external weights recreated
#    here by fill-weights) on CPU:0 and on GPU:0, outputs saved for bench/gpu-compare.py;
# 5. the built-in study on `local` (CPU and GPU devices), simulated against measured.
# Every command has its own time limit, so one hang costs only its share. Everything goes to
# OUT: the log, each run's --json, the saved outputs, the study's report.
set -u
out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
D=dist-gpu
if [ ! -x "$D/placesim" ]; then
    tar -xJf dist-gpu/bundle.tar.xz || { echo "gpu-check: no dist-gpu/bundle.tar.xz (run tools/gpu-bundle.sh)" >&2; exit 2; }
fi
export LD_LIBRARY_PATH=$PWD/$D/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
P=$D/placesim
log=$out/gpu-check.log
exec > >(tee "$log") 2>&1
t0=$(date +%s)
stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }

stamp device
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
timeout 30 "$P" cluster --cluster local:1 --json > "$out/cluster.json"; echo "cluster rc=$?"
cat "$out/cluster.json"; echo

stamp test-kernels-cuda
timeout 180 "$D/test-kernels-cuda" > "$out/test-kernels-cuda.txt" 2>&1
echo "test-kernels-cuda rc=$?"; grep -E "^(ok|not ok)|SKIP|FAIL|ERROR|Bail" "$out/test-kernels-cuda.txt" | head -80
stamp test-profiler-cuda
timeout 90 "$D/test-profiler-cuda" > "$out/test-profiler-cuda.txt" 2>&1
echo "test-profiler-cuda rc=$?"; grep -E "^(ok|not ok)|SKIP|FAIL|ERROR|Bail" "$out/test-profiler-cuda.txt" | head -40

stamp onnx-light
mkdir -p "$out/light"
for m in "$D"/data/*.onnx; do
    s=$(basename "$m" .onnx)
    timeout 60 "$P" run "$m" --cluster local:1 --steps 3 --feed ramp --save-outputs "$out/light/$s.cpu" \
        --json > "$out/light/$s.cpu.json" 2> "$out/light/$s.cpu.err"
    echo "$s cpu rc=$?"
    timeout 60 "$P" run "$m" --cluster local:1 --device GPU:0 --steps 20 --feed ramp \
        --check "${m%.onnx}_output_0.pb" --rtol 1e-3 --atol 1e-5 --save-outputs "$out/light/$s.gpu" \
        --json > "$out/light/$s.gpu.json" 2> "$out/light/$s.gpu.err"
    echo "$s gpu rc=$?"; head -c 600 "$out/light/$s.gpu.json"; echo; head -3 "$out/light/$s.gpu.err"
done

stamp torchvision
mkdir -p "$out/tv"
if ls "$D"/models/*.fill > /dev/null 2>&1; then
    timeout 120 "$D/fill-weights" "$D"/models/*.fill; echo "fill-weights rc=$?"
    for m in "$D"/models/*.onnx; do
        s=$(basename "$m" .onnx)
        timeout 120 "$P" run "$m" --cluster local:1 --steps 2 --save-outputs "$out/tv/$s.cpu" \
            --json > "$out/tv/$s.cpu.json" 2> "$out/tv/$s.cpu.err"
        echo "$s cpu rc=$?"; head -3 "$out/tv/$s.cpu.err"
        timeout 60 "$P" run "$m" --cluster local:1 --device GPU:0 --steps 30 \
            --trace "$out/tv/$s.gpu.trace.json" --save-outputs "$out/tv/$s.gpu" --json > "$out/tv/$s.gpu.json" 2> "$out/tv/$s.gpu.err"
        echo "$s gpu rc=$?"; head -c 400 "$out/tv/$s.gpu.json"; echo; head -3 "$out/tv/$s.gpu.err"
    done
fi

stamp profile
timeout 120 "$P" profile zoo:mlp --cluster local:1 --db "$out/profile.db" --json > "$out/profile.json" 2> "$out/profile.err"
echo "profile rc=$?"; tail -30 "$out/profile.err"; head -c 1500 "$out/profile.json"; echo

stamp study
timeout 240 "$P" study --cluster local:1 --steps 20 --out "$out/study" > "$out/study.txt" 2>&1
echo "study rc=$?"; tail -40 "$out/study.txt"
stamp done
