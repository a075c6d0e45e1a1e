#!/usr/bin/env bash
# One GPU lease's measurements, in the order they matter (each step time-boxed, logs to $OUT as they go):
# the card and CPU, ROSE on the FMNIST VAE (gpu.py), the diffusion defaults and DiffPath on Ho et al.'s
# 35.7 M UNet and on a DiT of DiT-S/2's size (scale.py: fit/score time, images/s, peak GPU memory, ROSE /
# loss fwd+bwd, CPU agreement on the UNet), and meanwhile, on the spare cores, the float-sensitive tests under the five
# code paths, and the gpu-marked tests. Needs: .whl (diffusers, zuko, importlib_metadata wheels) and .devcarry/shared (the authors'
# VAEs, the test sets, CIFAR-10 subsets) carried; see benchmarks/README.md.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 ROSEOOD_DATA=$PWD/.devcarry/shared/data
{ nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"; grep -o -w -E "avx512f|avx2" /proc/cpuinfo | sort | uniq -c;
  python3 -c "import torch, diffusers; print('torch', torch.__version__, 'diffusers', diffusers.__version__)"; } \
  >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
# The float-sensitive tests on this machine's CPU, one code path after another, on 6 of the 16 cores
# (VARIANTS: which paths; all five by default).
VARIANTS=${VARIANTS:-"default MKL_CBWR=COMPATIBLE MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=default ATEN_CPU_CAPABILITY=avx2"}
(
  for v in $VARIANTS; do
    echo "== $v"
    [ "$v" = default ] && v=
    env $v OMP_NUM_THREADS=1 timeout 100 python3 -m pytest -m float_sensitive -n 6 --dist loadfile -q \
      -p no:cacheprovider -o addopts= tests 2>&1 | tail -n 15
  done
) >"$OUT/float_sensitive.log" 2>&1 &
tests=$!
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts= tests 2>&1 | tail -n 25 | tee "$OUT/gpu_tests.log"
scale() {  # scale.py on the GPU: $1 seconds at most, $2 the UNet, $3 a log/json name, then more arguments
  limit=$1 arch=$2 name=$3
  shift 3
  timeout "$limit" python3 benchmarks/scale.py --device cuda --arch "$arch" --memory 60G --kill 100G --fit 256 --stats 128 \
    --test 256 --batch-size 256 --json "$OUT/$name.json" "$@" 2>&1 \
    | grep -v -E "ROSE.*(pass|scoring|statistics)|it/s|%\|" | tee "$OUT/$name.log"
}
# the default of each (DDPM: rose-bands-stats-compact; DiT: rose-bands-stats) and DiffPath first, as a step
# that runs out of time keeps the methods it finished
scale 270 ho-cifar10 scale_ho --agree 16 --methods rose-bands-stats-compact,diffpath,rose-ekfac,rose-diag
scale 120 dit-s2 scale_dit --methods rose-bands-stats,diffpath
# With OLD_SRC (an earlier roseood's src, carried): ROSE on both UNets with that code, on this card, for a
# before/after in one lease.
if [ -n "${OLD_SRC:-}" ]; then
  for arch in ho-cifar10 dit-s2; do
    PYTHONPATH=/tmp/site:$OLD_SRC:$PWD scale 120 $arch "scale_${arch}_old" --methods rose-diag,rose-ekfac
  done
fi
timeout 75 python3 -m benchmarks.gpu 2>&1 | tee "$OUT/gpu_vae.log"
wait "$tests"
cat "$OUT/float_sensitive.log"
