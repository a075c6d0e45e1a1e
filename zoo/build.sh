#!/usr/bin/env bash
# Rebuild one model of the reference zoo: `zoo/build.sh NAME [rose train options]`, e.g.
#   zoo/build.sh ddpm-cifar10-s0 --device cuda --epochs 40
# trains it with `rose train diffusion` (checkpoints and learning curve in $ZOO_WORK, default runs/zoo;
# rerun with --resume to continue a stopped run) and exports its EMA weights to zoo/NAME ($ZOO_OUT/NAME).
set -euo pipefail
name=${1:?usage: zoo/build.sh NAME [rose train options]}
shift
case "$name" in
  ddpm-fmnist-s[0-9]*) arch=(--data fashion_mnist --size 32 --widths 32,64,64 --layers-per-block 1) ;;
  ddpm-cifar10-s[0-9]*) arch=(--data cifar10 --size 32 --widths 48,96,96 --layers-per-block 2) ;;
  *) echo "zoo/build.sh: unknown zoo model $name (ddpm-fmnist-sN or ddpm-cifar10-sN)" >&2; exit 2 ;;
esac
seed=${name##*-s}
work=${ZOO_WORK:-runs/zoo}
here=${ZOO_OUT:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$work"
rose train diffusion "${arch[@]}" --seed "$seed" --batch-size 128 --held-out 500 \
  --curve "$work/$name.curve.csv" --out "$work/$name.pt" "$@"
rose export-diffusers --model "$work/$name.pt" --out "$here/$name" --overwrite
cp "$work/$name.curve.csv" "$here/$name/curve.csv"
