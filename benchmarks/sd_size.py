"""Adapter-only ROSE at Stable Diffusion 1.5's size on the CPU (issue 74, point 4): peak memory and time.

Builds, once, a Stable Diffusion pipeline folder (in ``--folder``, by default under ``~/.cache``: 3.4 GB, not
in git) whose ``UNet2DConditionModel`` has SD-1.5's published configuration (block_out_channels 320, 640,
1280, 1280; layers_per_block 2; cross_attention_dim 768; attention_head_dim 8; sample_size 64: ≈ 860 M
parameters, random weights) and SD-1.5's scheduler (PNDM, scaled-linear β 0.00085 to 0.012), with a
rank-4 LoRA of random factors on every attention's to_q, to_k, to_v and to_out.0 (diffusers' LoRA file).
The autoencoder and text encoder are small random ones of the shapes the UNet needs (an AutoencoderKL of
four blocks, 32 to 64 channels: 512×512 images to 4×64×64 latents as SD's; a one-layer 768-wide CLIP text
encoder, 77 tokens, of a two-token vocabulary: the empty prompt's, roseood's default), not SD's 84 M and
123 M parameter ones: both run without gradients, once per image and once per prompt, so the UNet's pass
dominates what is measured.

Then, each phase in a fresh process (its own peak resident memory, VmHWM): ``load`` (read the
folder), ``fit`` (ROSE over the adapter's layers only, ``--fisher``, on ``--fit`` images with ``--held-out``
held-out images; roseood's memory plan line and its time forecast are printed first) and ``score``
(``--score`` images with the saved detector). Images are uniform noise: cost does not depend on them.

    nice -n 10 python -m benchmarks.sd_size --k 1 --fit 2 --held-out 2 --score 1

Prints each phase's peak memory, wall time and seconds per image, with the settings and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from benchmarks.diffusion_cost import cpu_name
from benchmarks.scale import peak_rss

from roseood.machine import machine_description

# Stable Diffusion 1.5's published UNet and scheduler configs (runwayml/stable-diffusion-v1-5, unet/ and
# scheduler/): diffusers' UNet2DConditionModel defaults fill in the rest as they do for SD 1.5
UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (320, 640, 1280, 1280),
    "layers_per_block": 2,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
    "down_block_types": ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    "up_block_types": ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
}
SCHEDULER = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "skip_prk_steps": True,
    "set_alpha_to_one": False,
    "steps_offset": 1,
}
RANK = 4
TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
IMAGE = 512  # SD 1.5's native size: 4×64×64 latents
TOKENS = 77
GiB = 1 << 30


def build(folder: Path) -> None:
    """Write the pipeline folder and its LoRA file (random weights from seed 0)."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    from roseood.models.diffusion import diffusers_module

    d = diffusers_module()
    vocab = folder.parent / f"{folder.name}-vocab.json"  # the empty prompt's two tokens: all it encodes
    vocab.write_text(json.dumps({"<|startoftext|>": 0, "<|endoftext|>": 1}))
    (merges := folder.parent / f"{folder.name}-merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(vocab), str(merges), model_max_length=TOKENS)
    torch.manual_seed(0)
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=2, hidden_size=768, intermediate_size=3072, num_hidden_layers=1,
            num_attention_heads=12, max_position_embeddings=TOKENS, projection_dim=768, bos_token_id=0,
            eos_token_id=1, pad_token_id=1,
        )
    )  # fmt: skip
    vae = d.AutoencoderKL(
        block_out_channels=(32, 32, 64, 64), down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=4, sample_size=IMAGE,
    )  # fmt: skip
    unet = d.UNet2DConditionModel(**UNET)
    pipe = d.StableDiffusionPipeline(
        vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet,
        scheduler=d.PNDMScheduler(**SCHEDULER), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )  # fmt: skip
    pipe.save_pretrained(folder)  # the base, then its fine-tune's adapter
    unet.add_adapter(
        LoraConfig(r=RANK, lora_alpha=RANK, target_modules=TARGETS, init_lora_weights="gaussian")
    )
    with torch.no_grad():  # a fine-tune's factors: both nonzero
        for name, p in unet.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)
    lora = get_peft_model_state_dict(unet)
    meta = {"r": RANK, "lora_alpha": RANK, "target_modules": TARGETS}
    d.StableDiffusionPipeline.save_lora_weights(
        folder, unet_lora_layers=lora, unet_lora_adapter_metadata=meta
    )


def images(n: int, seed: int) -> torch.Tensor:
    """``n`` uniform-noise RGB images of SD's size in [0, 1]."""
    return torch.rand(n, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(seed))


def phase(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one phase in this process; what it measured."""
    from roseood.detectors import ROSE, Detector
    from roseood.evaluation.forecast import forecast_fit
    from roseood.models import load_model
    from roseood.models.diffusion import DiffusionModel

    start = time.perf_counter()
    model = load_model(args.folder)
    assert isinstance(model, DiffusionModel) and model.adapter is not None
    model.set_denoising(k=args.k)
    out: dict[str, Any] = {"load_s": time.perf_counter() - start}
    out["unet_parameters"] = sum(p.numel() for p in model.unet.parameters())
    out["adapter_parameters"] = model.adapter.parameters
    out["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    detector = args.folder.parent / f"{args.folder.name}-{args.fisher}-k{args.k}.pt"
    if name == "fit":
        fit, held = images(args.fit, 1), images(args.held_out, 2)
        what = f"fitting on {args.fit} + {args.held_out} images"
        det = ROSE(model, fisher=args.fisher, batch_size=args.k, progress=True)
        forecast_fit(det, 1, fit[:1].numpy(), args.fit, args.held_out, what)
        start = time.perf_counter()
        det.fit(fit, held_out=held)
        out["fit_s"] = time.perf_counter() - start
        out["s_per_image"] = out["fit_s"] / (args.fit + args.held_out)
        out["layers"] = len(det.layers)
        det.save(detector)
    elif name == "score":
        loaded = Detector.load(detector, model)
        x = images(args.score + 1, 3)
        start = time.perf_counter()
        scores = [float(s) for s in loaded.score(x[:1])]  # with ROSE's one-image memory probe, once a process
        out["first_score_s"] = time.perf_counter() - start
        start = time.perf_counter()
        scores += [float(s) for s in loaded.score(x[1:])]
        out["score_s"] = time.perf_counter() - start
        out["s_per_image"] = out["score_s"] / args.score
        out["scores"] = scores
    out["peak_rss_gib"] = peak_rss() / GiB
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "roseood-bench" / "sd15-lora"
    parser.add_argument("--folder", type=Path, default=cache, help="the pipeline folder (built if missing)")
    parser.add_argument("--k", type=int, default=1, help="(timestep, noise) pairs per image")
    parser.add_argument("--fisher", default="diag", choices=["diag", "kfac", "ekfac"])
    parser.add_argument("--fit", type=int, default=2, help="Fisher images")
    parser.add_argument("--held-out", type=int, default=2, help="held-out images (layer statistics)")
    parser.add_argument("--score", type=int, default=1, help="images scored")
    parser.add_argument("--phases", default="load,fit,score")
    parser.add_argument("--phase", help=argparse.SUPPRESS)  # the child process's one phase
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.phase:
        print("RESULT " + json.dumps(phase(args.phase, args)), flush=True)
        return
    if not (args.folder / "model_index.json").is_file():
        start = time.perf_counter()
        args.folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=args.folder.parent) as tmp:
            build(Path(tmp) / "pipe")
            (Path(tmp) / "pipe").rename(args.folder)
        print(f"built {args.folder} in {time.perf_counter() - start:.0f} s", flush=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "phase"}
    results: dict[str, Any] = {"settings": settings, "machine": machine_description() | {"cpu": cpu_name()}}
    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    for name in args.phases.split(","):
        cmd = [sys.executable, "-m", "benchmarks.sd_size", *sys.argv[1:], "--phase", name]
        run = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
        notes = [line for line in run.stderr.splitlines() if "≈" in line]
        if run.returncode:
            sys.exit(f"phase {name} failed:\n{run.stderr[-4000:]}")
        line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
        results[name] = json.loads(line.removeprefix("RESULT ")) | {"roseood_said": notes}
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
