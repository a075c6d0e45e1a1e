"""Issue 74's demonstration at the scale a 2-core CPU allows: a tiny text-conditioned latent diffusion model
in diffusers' Stable Diffusion folder layout (``AutoencoderKL``, a frozen random ``CLIPTextModel`` with a
letter tokenizer, ``UNet2DConditionModel`` with cross-attention, ``DDPMScheduler``), trained on Fashion-MNIST
with the class names as prompts ("a photo of a sneaker", …; 10 % of them dropped to the empty prompt, as
classifier-free guidance trains), then a rank-4 LoRA of its attention on one class, written as diffusers'
``pytorch_lora_weights.safetensors`` in a folder inside the base. ``benchmarks/text_lora_judge.py`` judges
the images with roseood. Every run checkpoints atomically and resumes where it stopped:

    python benchmarks/text_lora.py train-base --out runs/text_lora --minutes 30   # rerun to continue
    python benchmarks/text_lora.py train-lora --out runs/text_lora --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roseood.data import load_images
from roseood.models.diffusion import DiffusionModel, diffusers_module

CLASSES = (
    "t-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)
SNEAKER = CLASSES.index("sneaker")
SIZE, CHANNELS = 16, 1  # Fashion-MNIST's 28×28 resized to 16×16, grayscale: 4×8×8 latents
TOKENS = 32  # the letter tokenizer's length: "a photo of an ankle boot" is 21 tokens with its ends
LETTERS = "abcdefghijklmnopqrstuvwxyz-"  # what the class prompts are written in ("t-shirt")
LORA: dict[str, Any] = {"r": 4, "lora_alpha": 4, "target_modules": ["to_q", "to_k", "to_v", "to_out.0"]}
BASE, CHECKPOINT = "base", "base.ckpt"


def prompt(label: int) -> str:
    """The prompt of Fashion-MNIST class ``label`` ("a photo of a sneaker")."""
    name = CLASSES[label]
    return f"a photo of {'an' if name[0] in 'aeiou' else 'a'} {name}"


def tokenizer(folder: Path, tokens: int = TOKENS, characters: str = LETTERS) -> Any:
    """A CLIP tokenizer of single ``characters`` (its vocab and merges files written in ``folder``),
    ``tokens`` long: prompts read offline, without CLIP's 49 408-word vocabulary."""
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in characters:
        vocab[c], vocab[c + "</w>"] = len(vocab), len(vocab) + 1
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=tokens)


def components(seed: int) -> dict[str, Any]:
    """The untrained pipeline's parts (seeded): a 32-wide two-layer CLIP text encoder (random, frozen: it
    only has to tell the prompts apart), a two-level AutoencoderKL (1×16×16 → 4×8×8) and a two-level
    UNet2DConditionModel attending to the text at the 8×8 level, in the middle and on the way up."""
    from transformers import CLIPTextConfig, CLIPTextModel

    d = diffusers_module()
    torch.manual_seed(seed)
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=56, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=TOKENS, projection_dim=32, bos_token_id=0, eos_token_id=1, pad_token_id=1,
        )
    ).requires_grad_(False)  # fmt: skip
    vae = d.AutoencoderKL(
        in_channels=CHANNELS, out_channels=CHANNELS, block_out_channels=(16, 32), layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8, latent_channels=4, sample_size=SIZE,
    )  # fmt: skip
    unet = d.UNet2DConditionModel(
        sample_size=SIZE // 2, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        norm_num_groups=8, cross_attention_dim=32, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    )  # fmt: skip
    return {"text_encoder": text, "vae": vae, "unet": unet, "scheduler": d.DDPMScheduler()}


def save_pipeline(parts: dict[str, Any], folder: Path) -> Path:
    """Write ``parts`` as a StableDiffusionPipeline folder (safetensors, no safety checker) in ``folder``."""
    d = diffusers_module()
    pipe = d.StableDiffusionPipeline(
        **parts, tokenizer=tokenizer(folder.parent / "vocab"), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )  # fmt: skip
    pipe.save_pretrained(folder, safe_serialization=True)
    return folder


def atomic_save(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file, then renamed: a run killed mid-write keeps its last checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def fashion(split: str, n: int | None = None, seed: int = 0) -> tuple[Tensor, np.ndarray]:
    """Fashion-MNIST ``split`` at 16×16 grayscale as [-1, 1] tensors (the autoencoder's range), labels."""
    s = load_images(f"fashion_mnist:{split}", size=SIZE, channels=CHANNELS, n=n, seed=seed)
    assert s.labels is not None
    return torch.from_numpy(s.images).float() / 127.5 - 1, np.asarray(s.labels)


def encode_prompts(parts: dict[str, Any], folder: Path) -> Tensor:
    """The text encoder's last hidden state of each class prompt, then of the empty prompt (row 10)."""
    tok = tokenizer(folder / "vocab")
    ids = tok([prompt(c) for c in range(len(CLASSES))] + [""], padding="max_length", max_length=TOKENS,
              truncation=True, return_tensors="pt").input_ids  # fmt: skip
    with torch.no_grad():
        return parts["text_encoder"](ids)[0]


def vae_step(vae: Any, x: Tensor, kl_weight: float) -> Tensor:
    """The autoencoder's loss on a batch: reconstruction MSE of a posterior sample plus a small KL term."""
    posterior = vae.encode(x).latent_dist
    recon = vae.decode(posterior.sample()).sample
    return (recon - x).pow(2).mean() + kl_weight * posterior.kl().mean()


def unet_step(unet: Any, sched: Any, z: Tensor, context: Tensor, gen: torch.Generator) -> Tensor:
    """The ε-prediction loss of a batch of latents ``z`` under text ``context`` (t uniform)."""
    noise = torch.randn(z.shape, generator=gen)
    t = torch.randint(0, sched.config.num_train_timesteps, (len(z),), generator=gen)
    return (unet(sched.add_noise(z, noise, t), t, encoder_hidden_states=context).sample - noise).pow(2).mean()


def run_steps(
    state: dict[str, Any], modules: dict[str, Any], steps: int, step: Callable[[torch.Generator], Tensor],
    ckpt: Path, deadline: float, lr: float = 1e-3,
) -> bool:  # fmt: skip
    """Adam steps of the trainable parameters of ``modules`` from where ``state`` stopped (its phase's step,
    optimiser and generator), checkpointed atomically each minute and at the end; False when ``deadline``
    came first (rerun to resume)."""
    params = [p for m in modules.values() for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    if state.get("opt"):
        opt.load_state_dict(state["opt"])
    gen = torch.Generator()
    gen.set_state(state["gen"])
    done, saved, losses = state["step"], time.time(), list[float]()
    while done < steps:
        loss = step(gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        done, losses = done + 1, [*losses[-99:], float(loss)]
        if done == steps or time.time() > deadline or time.time() - saved > 60:
            state["log"].append(
                (state["phase"], done, float(np.mean(losses)), time.time() - state["started"])
            )
            state.update(step=done, opt=opt.state_dict(), gen=gen.get_state())
            state["weights"].update({k: m.state_dict() for k, m in modules.items()})
            atomic_save(state, ckpt)
            print(f"{state['phase']} step {done}/{steps}: loss {np.mean(losses):.4f}", flush=True)
            saved = time.time()
            if time.time() > deadline and done < steps:
                return False
    return True


def resumed(ckpt: Path, seed: int, modules: dict[str, Any]) -> dict[str, Any]:
    """The training state of ``ckpt`` (its weights loaded into ``modules``), or a fresh one of ``seed``."""
    if not ckpt.is_file():
        gen = torch.Generator().manual_seed(seed)
        return {"phase": "vae", "step": 0, "gen": gen.get_state(), "log": [], "weights": {}}
    state: dict[str, Any] = torch.load(ckpt, weights_only=False)
    for name, weights in state["weights"].items():
        if name in modules:
            modules[name].load_state_dict(weights)
    print(f"resumed {ckpt}: {state['phase']} step {state['step']}", flush=True)
    return state


def sneakers(labels: np.ndarray, seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the sneakers among Fashion-MNIST training ``labels``: the ``n`` a LoRA of ``seed`` trains
    on (drawn by ``seed``), and the others, in a seeded order (the judge's held-out statistics images)."""
    order = np.random.default_rng(seed).permutation(np.flatnonzero(labels == SNEAKER))
    return order[:n], order[n:]


@torch.no_grad()
def sneaker_context(base: Path) -> Tensor:
    """The (1, tokens, width) text embedding of "a photo of a sneaker" by the pipeline's own encoder."""
    from transformers import CLIPTextModel, CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(base / "tokenizer")
    ids = tok(prompt(SNEAKER), padding="max_length", max_length=TOKENS, return_tensors="pt").input_ids
    return CLIPTextModel.from_pretrained(base / "text_encoder")(ids)[0]


@torch.no_grad()
def latents(vae: Any, x: Tensor) -> Tensor:
    """The autoencoder's posterior means of ``x`` (unscaled), in batches."""
    return torch.cat([vae.encode(x[i : i + 1000]).latent_dist.mode() for i in range(0, len(x), 1000)])


def train_base(args: argparse.Namespace) -> None:
    """The autoencoder (``--vae-steps``), then the UNet (``--unet-steps``) on the class prompts, resumed from
    ``base.ckpt``; written as the pipeline folder ``base`` once both are done."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt, deadline = out / CHECKPOINT, time.time() + 60 * args.minutes
    parts = components(args.seed)
    vae, unet, sched = parts["vae"], parts["unet"], parts["scheduler"]
    state = resumed(ckpt, args.seed, {"vae": vae, "unet": unet})
    state["started"] = time.time() - (state["log"][-1][3] if state["log"] else 0.0)
    x, labels = fashion("train", args.images)
    batch = lambda g: torch.randint(0, len(x), (args.batch,), generator=g)  # noqa: E731
    if state["phase"] == "vae":
        autoencode = lambda g: vae_step(vae, x[batch(g)], args.kl)  # noqa: E731
        if not run_steps(state, {"vae": vae}, args.vae_steps, autoencode, ckpt, deadline):
            return
        z = latents(vae, x)
        state.update(phase="unet", step=0, opt=None, scaling=float(f"{1 / z.std():.4g}"))
        atomic_save(state, ckpt)
    vae.register_to_config(scaling_factor=state["scaling"])
    vae.requires_grad_(False)
    z = latents(vae, x) * state["scaling"]
    context, cls = encode_prompts(parts, out), torch.from_numpy(labels)

    def step(g: torch.Generator) -> Tensor:
        i = batch(g)
        dropped = torch.rand(len(i), generator=g) < args.dropout  # the empty prompt (row 10)
        return unet_step(unet, sched, z[i], context[torch.where(dropped, len(CLASSES), cls[i])], g)

    if state["phase"] == "unet" and run_steps(state, {"unet": unet}, args.unet_steps, step, ckpt, deadline):
        save_pipeline(parts, out / BASE)
        (out / "base.json").write_text(json.dumps(vars(args) | {"log": state["log"]}, indent=1))
        print(f"wrote {out / BASE}", flush=True)


def save_lora(unet: Any, where: Path) -> Path:
    """Write the LoRA of ``unet`` as diffusers' LoRA file in ``where``, its LoraConfig as metadata."""
    from peft.utils import get_peft_model_state_dict

    diffusers_module().StableDiffusionPipeline.save_lora_weights(
        where, unet_lora_layers=get_peft_model_state_dict(unet), unet_lora_adapter_metadata=LORA
    )
    return where


def train_lora(args: argparse.Namespace) -> None:
    """A rank-4 LoRA of the base UNet's attention on ``--lora-images`` sneaker training images (drawn by
    ``--seed``) under "a photo of a sneaker", written as diffusers' LoRA file in ``base/sneaker-lora-sN``."""
    from peft import LoraConfig

    d, out = diffusers_module(), Path(args.out)
    base = out / BASE
    ckpt, deadline = out / f"lora-s{args.seed}.ckpt", time.time() + 60 * args.minutes
    unet = d.UNet2DConditionModel.from_pretrained(base / "unet")
    torch.manual_seed(args.seed)
    unet.add_adapter(LoraConfig(**LORA))
    vae = d.AutoencoderKL.from_pretrained(base / "vae")
    state = resumed(ckpt, args.seed, {"unet": unet})
    state.update(phase="lora", started=time.time() - (state["log"][-1][3] if state["log"] else 0.0))
    x, labels = fashion("train")
    z = latents(vae, x[sneakers(labels, args.seed, args.lora_images)[0]]) * vae.config.scaling_factor
    sched, context = d.DDPMScheduler.from_pretrained(base / "scheduler"), sneaker_context(base)

    def step(g: torch.Generator) -> Tensor:
        i = torch.randint(0, len(z), (args.batch,), generator=g)
        return unet_step(unet, sched, z[i], context.expand(len(i), -1, -1), g)

    if run_steps(state, {"unet": unet}, args.lora_steps, step, ckpt, deadline, lr=args.lr):
        where = save_lora(unet, base / f"sneaker-lora-s{args.seed}")
        (where / "training.json").write_text(json.dumps(vars(args) | {"log": state["log"]}, indent=1))
        print(f"wrote {where}", flush=True)


def export(args: argparse.Namespace) -> None:
    """The zoo's folder ``--to``: the base pipeline, the LoRA of ``--seed`` as ``sneaker-lora/``, and
    ``curve.csv`` (the base's training length, its held-out ε-MSE per latent dimension under the empty
    prompt on the first 100 Fashion-MNIST test images, the LoRA's under its prompt on the first 100
    test sneakers)."""
    import shutil

    from roseood.models import load_model

    base, to = Path(args.out) / BASE, Path(args.to)
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(base, to, ignore=shutil.ignore_patterns("sneaker-lora-s*"))
    shutil.copytree(base / f"sneaker-lora-s{args.seed}", to / "sneaker-lora")
    log = json.loads((Path(args.out) / "base.json").read_text())
    steps, seconds = log["unet_steps"], log["log"][-1][3]
    x, labels = fashion("test")
    images = ((x + 1) * 127.5).round().to(torch.uint8)
    model, tuned = load_model(to), load_model(to / "sneaker-lora")
    assert isinstance(model, DiffusionModel) and isinstance(tuned, DiffusionModel)
    tuned.set_loss_settings(condition=f"prompt:{prompt(SNEAKER)}")
    held = model.held_out_metrics(images[:100])["eps_mse"]
    sneaker = tuned.held_out_metrics(images[np.flatnonzero(labels == SNEAKER)[:100]])["eps_mse"]
    epochs = steps * log["batch"] / (log["images"] or 60_000)  # all of Fashion-MNIST's training images
    (to / "curve.csv").write_text(
        "epoch,step,seconds,held_out_eps_mse,lora_held_out_eps_mse\n"
        f"{epochs:.2f},{steps},{seconds:.1f},{held:.6g},{sneaker:.6g}\n"
    )
    print(f"wrote {to}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("train-base", "train-lora"):
        c = sub.add_parser(name)
        c.add_argument("--out", default="runs/text_lora", help="the run folder (checkpoints, the pipeline)")
        c.add_argument("--seed", type=int, default=0, help="initialisation, data order, noise")
        c.add_argument("--minutes", type=float, default=1e9, help="stop (checkpointed) after this long")
        c.add_argument("--batch", type=int, default=128)
    base, lora = sub.choices["train-base"], sub.choices["train-lora"]
    base.add_argument("--images", type=int, help="a seeded subset of the 60 000 training images")
    base.add_argument("--vae-steps", type=int, default=1500)
    base.add_argument("--unet-steps", type=int, default=4000)
    base.add_argument("--kl", type=float, default=1e-4, help="the autoencoder's KL weight")
    base.add_argument("--dropout", type=float, default=0.1, help="prompts dropped to the empty one")
    lora.add_argument("--lora-images", type=int, default=1000, help="sneaker training images it learns")
    lora.add_argument("--lora-steps", type=int, default=300)
    lora.add_argument("--lr", type=float, default=1e-3)
    out = sub.add_parser("export")
    out.add_argument("--out", default="runs/text_lora", help="the run folder")
    out.add_argument("--seed", type=int, default=0, help="the LoRA's seed")
    out.add_argument("--to", default="zoo/sd-fmnist-s0", help="the zoo folder to write")
    args = p.parse_args()
    torch.set_num_threads(1)
    {"train-base": train_base, "train-lora": train_lora, "export": export}[args.command](args)


if __name__ == "__main__":
    main()
