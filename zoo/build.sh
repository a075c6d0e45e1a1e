#!/usr/bin/env bash
# Rebuild one model of the reference zoo: `zoo/build.sh NAME [rose train options]`, e.g.
#   zoo/build.sh ddpm-cifar10-s0 --device cuda --epochs 40
#   zoo/build.sh vae-cifar10-s0 --epochs 6
# trains it with `rose train diffusion` or `rose train vae` (checkpoints and learning curve in $ZOO_WORK,
# default runs/zoo; rerun with --resume to continue a stopped run) and exports it to zoo/NAME
# ($ZOO_OUT/NAME): a DDPM's EMA weights as a diffusers folder, a VAE as model.pt without its training state.
set -euo pipefail
name=${1:?usage: zoo/build.sh NAME [rose train options]}
shift
case "$name" in
  ddpm-fmnist-s[0-9]*) arch=(diffusion --data fashion_mnist --size 32 --widths 32,64,64 --layers-per-block 1 --batch-size 128) ;;
  ddpm-cifar10-s[0-9]*) arch=(diffusion --data cifar10 --size 32 --widths 48,96,96 --layers-per-block 2 --batch-size 128) ;;
  vae-cifar10-s[0-9]*) arch=(vae --data cifar10 --size 32 --ngf 32 --nz 200 --batch-size 64) ;;
  # the kinds beyond the pixel DDPM, CPU-sized: 2 epochs of a 30 000-image subset
  fm-fmnist-s[0-9]*) arch=(diffusion --data fashion_mnist --size 32 --widths 32,64,64 --layers-per-block 1
                           --batch-size 128 --objective flow --subset 30000 --epochs 2) ;;
  cddpm-fmnist-s[0-9]*) arch=(diffusion --data fashion_mnist --size 32 --widths 32,64,64 --layers-per-block 1
                              --batch-size 128 --conditional --subset 30000 --epochs 2 --held-out 50) ;;
  dit-fmnist-s[0-9]*) arch=(diffusion --data fashion_mnist --size 32 --denoiser dit --dit-layers 6 --dit-heads 4
                            --dit-head-dim 32 --patch-size 4 --batch-size 128 --conditional --subset 30000
                            --epochs 2 --held-out 100) ;;
  ldm-fmnist-s[0-9]*) arch=(diffusion --data fashion_mnist --size 32 --autoencoder vq --autoencoder-widths 32,64
                            --latent-channels 3 --codebook 256 --autoencoder-epochs 1 --widths 32,64,64
                            --layers-per-block 1 --batch-size 128 --subset 30000 --epochs 2 --held-out 100) ;;
  # text-conditioned latent (Stable Diffusion's layout) and its sneaker LoRA: issue 74's demonstration script
  sd-fmnist-s[0-9]*) arch=() ;;
  *) echo "zoo/build.sh: unknown zoo model $name (ddpm-fmnist-sN, ddpm-cifar10-sN, vae-cifar10-sN, fm-fmnist-sN," \
          "cddpm-fmnist-sN, dit-fmnist-sN, ldm-fmnist-sN or sd-fmnist-sN)" >&2; exit 2 ;;
esac
seed=${name##*-s}
work=${ZOO_WORK:-runs/zoo}
here=${ZOO_OUT:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$work"
if [[ $name == sd-* ]]; then  # options go to train-base (e.g. --minutes 20; rerun to resume)
  python benchmarks/text_lora.py train-base --out "$work/$name" --seed "$seed" --vae-steps 400 --unet-steps 900 "$@"
  [[ -d $work/$name/base ]] || { echo "zoo/build.sh: $name stopped, checkpointed: rerun to resume"; exit 0; }
  python benchmarks/text_lora.py train-lora --out "$work/$name" --seed 0 --batch 64 --lora-steps 300
  python benchmarks/text_lora.py export --out "$work/$name" --seed 0 --to "$here/$name"
  exit 0
fi
rose train "${arch[0]}" --held-out 500 "${arch[@]:1}" --seed "$seed" \
  --curve "$work/$name.curve.csv" --out "$work/$name.pt" "$@"
if [[ $name != vae-* ]]; then
  rose export-diffusers --model "$work/$name.pt" --out "$here/$name" --overwrite
else
  mkdir -p "$here/$name"
  python -c 'import sys; from roseood.models import load_model, save_model
save_model(load_model(sys.argv[1]), sys.argv[2])' "$work/$name.pt" "$here/$name/model.pt"
fi
cp "$work/$name.curve.csv" "$here/$name/curve.csv"
