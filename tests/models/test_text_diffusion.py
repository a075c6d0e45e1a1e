"""Text-conditioned latent pipelines (diffusers' Stable Diffusion layout: AutoencoderKL, CLIP text encoder
and tokenizer, UNet2DConditionModel with cross-attention) and their LoRA adapters, each built tiny by
diffusers', transformers' and peft's own classes: the loss under the judged prompt checked against
diffusers' own modules, the text encoder run once per prompt, exact per-sample gradients of the adapter's
layers, check-model's line, fit / score / save / load through the CLI, and the one-line refusals."""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roseood.errors import CheckpointError, RoseError
from roseood.models import load_model
from roseood.models.diffusion import DiffusionModel, diffusers_module
from tests.curvature.test_grads import assert_batched_grads_exact
from tests.models.test_diffusers_folders import refused

# found, not imported: importing transformers takes ≈ 4 s, which every pytest worker paid while collecting
pytestmark = pytest.mark.skipif(
    any(find_spec(name) is None for name in ("transformers", "peft")),
    reason="the text extra (transformers, peft) is not installed",
)

PROMPT = "a photo of sks dog"
TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def tokenizer(folder: Path) -> Any:
    """A CLIP tokenizer of single letters (its vocab and merges files written here), 8 tokens long."""
    from benchmarks.text_lora import tokenizer as letters

    return letters(folder, 8, string.ascii_lowercase)


def stable_diffusion(folder: Path) -> Path:
    """A tiny StableDiffusionPipeline folder: 3×16×16 images, 4×8×8 latents, a 16-wide one-layer CLIP."""
    from transformers import CLIPTextConfig, CLIPTextModel

    d = diffusers_module()
    torch.manual_seed(0)
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=54, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            max_position_embeddings=8, projection_dim=16, bos_token_id=0, eos_token_id=1, pad_token_id=1,
        )
    )  # fmt: skip
    unet = d.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        norm_num_groups=4, cross_attention_dim=16, attention_head_dim=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    )  # fmt: skip
    vae = d.AutoencoderKL(
        block_out_channels=(8, 16), down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=4, latent_channels=4,
    )  # fmt: skip
    pipe = d.StableDiffusionPipeline(
        vae=vae, text_encoder=text, tokenizer=tokenizer(folder.parent / "vocab"), unet=unet,
        scheduler=d.DDPMScheduler(), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )  # fmt: skip
    pipe.save_pretrained(folder)
    (folder / "roseood.json").write_text(json.dumps({"denoising": {"k": 2}}))
    return folder


def lora(unet_folder: Path, seed: int) -> Any:
    """The UNet of ``unet_folder`` with a rank-2 LoRA of random (nonzero) factors, as a fine-tune leaves."""
    from peft import LoraConfig

    unet = diffusers_module().UNet2DConditionModel.from_pretrained(unet_folder)
    unet.add_adapter(LoraConfig(r=2, lora_alpha=4, target_modules=TARGETS, init_lora_weights="gaussian"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in unet.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return unet


def diffusers_lora(folder: Path, seed: int = 0) -> Path:
    """``folder`` with diffusers' LoRA file (``save_lora_weights``, its LoraConfig as metadata) in it."""
    from peft.utils import get_peft_model_state_dict

    unet = lora(folder / "unet", seed)
    meta = {"r": 2, "lora_alpha": 4, "target_modules": TARGETS}
    diffusers_module().StableDiffusionPipeline.save_lora_weights(
        folder, unet_lora_layers=get_peft_model_state_dict(unet), unet_lora_adapter_metadata=meta
    )
    return folder


def peft_adapter(base: Path, seed: int = 1) -> Path:
    """A peft adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) inside ``base``."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    unet = lora(base / "unet", seed)
    out = base / "sks-lora"
    out.mkdir()
    weights = {f"base_model.model.{k}": v for k, v in get_peft_model_state_dict(unet).items()}
    save_file({k: v.contiguous() for k, v in weights.items()}, out / "adapter_model.safetensors")
    config = unet.peft_config["default"].to_dict()
    config["target_modules"] = sorted(config["target_modules"])
    (out / "adapter_config.json").write_text(json.dumps(config, default=str))
    return out


@pytest.fixture(scope="module")
def sd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stable_diffusion(tmp_path_factory.mktemp("sd") / "pipe")


def copy(sd: Path, where: Path, edit: Callable[[Path], object] = lambda f: None) -> Path:
    folder = where / "case"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(sd, folder)
    edit(folder)
    return folder


def test_the_loss_is_the_unets_under_the_prompts_embedding_encoded_once(sd: Path) -> None:
    """The per-image loss is diffusers' own: the KL posterior mean × scaling_factor, noised by the
    scheduler's ``add_noise``, denoised attending to the text encoder's last hidden state of the prompt
    (the empty one by default), as the Stable Diffusion pipeline encodes it; the encoder runs once per
    prompt, whatever the images."""
    from transformers import CLIPTextModel, CLIPTokenizer

    d = diffusers_module()
    model = load_model(sd)
    assert isinstance(model, DiffusionModel) and model.input_shape == (3, 16, 16)
    vae = d.AutoencoderKL.from_pretrained(sd / "vae")
    unet = d.UNet2DConditionModel.from_pretrained(sd / "unet")
    sched = d.DDPMScheduler.from_pretrained(sd / "scheduler")
    text = CLIPTextModel.from_pretrained(sd / "text_encoder")
    tok = CLIPTokenizer.from_pretrained(sd / "tokenizer")
    calls = []
    encoder = model.condition.encoder
    encoder.register_forward_hook(lambda *args: calls.append(1))
    x = torch.rand(3, 3, 16, 16)
    for prompt in ("", PROMPT):
        if prompt:
            model.set_loss_settings(condition=f"prompt:{prompt}")
        with torch.no_grad():
            ids = tok(
                prompt, padding="max_length", max_length=8, truncation=True, return_tensors="pt"
            ).input_ids
            context = text(ids)[0].expand(3, -1, -1)
            z = vae.encode(x * 2 - 1).latent_dist.mode() * vae.config.scaling_factor
            expected = torch.zeros(3)
            for t, noise in zip(model.loss_timesteps, model.loss_noise, strict=True):
                tt, e = t.expand(3), noise.expand_as(z)
                out = unet(sched.add_noise(z, e, tt), tt, encoder_hidden_states=context).sample
                expected += (out - e).pow(2).flatten(1).sum(1)
        for _ in range(2):
            torch.testing.assert_close(model.nll(x), expected, rtol=1e-5, atol=1e-3)
    assert calls == [1]  # the empty prompt was encoded on load; the other once, for both passes
    model.set_loss_settings(condition="null")
    model.set_loss_settings(condition=f"prompt:{PROMPT}")
    assert calls == [1] and model.loss_settings()["condition"] == f"prompt:{PROMPT}"
    with pytest.raises(RoseError, match=r"^a text-conditioned model's condition is 'prompt:TEXT'"):
        model.set_loss_settings(condition="label:1")


def test_check_model_states_autoencoder_text_encoder_prompt_and_objective(sd: Path, capsys) -> None:
    from roseood.cli import main

    assert main(["check-model", "--model", str(sd)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("denoiser: diffusers UNet2DConditionModel (") and "ε prediction" in line
    assert "latent space: 3×16×16 images → 4×8×8 latents by AutoencoderKL" in line
    assert "text-conditioned by CLIPTextModel (" in line and "8 tokens" in line
    assert "p(x) under the empty prompt (the unconditional branch classifier-free guidance trains)" in line


def test_the_adapter_set_of_a_model_without_one_says_where_an_adapter_is_named(sd: Path) -> None:
    """``--layers adapter`` on a base with no LoRA: the set is known, the model lacks it; said so."""
    with pytest.raises(RoseError, match=r"^layer set 'adapter' takes a LoRA adapter's layers, .* has none"):
        load_model(sd).rose_layers("adapter")


def test_a_diffusers_lora_is_the_default_layer_set_with_exact_per_sample_gradients(
    sd: Path, tmp_path: Path
) -> None:
    """A LoRA file in the pipeline folder is put in the UNet (diffusers' loader: its outputs are the
    adapted UNet's), the base frozen; ROSE's default set is the adapter's lora_A/lora_B layers, whose
    batched per-sample gradients are the per-sample loop's."""
    folder = diffusers_lora(copy(sd, tmp_path))
    model = load_model(folder)
    assert isinstance(model, DiffusionModel) and model.adapter is not None
    assert next(iter(model.layer_sets())) == "adapter" and model.rose_layers() == model.rose_layers("adapter")
    names = model.rose_layers()
    # 4 transformer blocks (down, mid, 2 up) × 2 attentions × 4 projections, each a lora_A and a lora_B
    assert len(names) == 64 and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert all("lora_" in n for n, p in model.unet.named_parameters() if p.requires_grad)  # base frozen
    assert model.online is None  # read to score: one denoiser, no optimised copy
    reference = lora(sd / "unet", 0)  # the very factors written to the file
    x = torch.rand(2, 3, 16, 16)
    z, t = torch.randn(2, 4, 8, 8), torch.tensor([10, 600])
    context = model.condition.labels(2, torch.device("cpu"))
    with torch.no_grad():
        torch.testing.assert_close(
            model.unet(z, t, encoder_hidden_states=context).sample,
            reference(z, t, encoder_hidden_states=context).sample,
        )
    assert_batched_grads_exact(model, model.rose_loss, x, names)
    assert "rank 2 on 32 layers" in model.describe() and model.adapter.digest in model.describe()
    assert model.loss_settings()["adapter"] == model.adapter.digest
    model.train()  # the optimised copy, made to train, has the adapter in and its base frozen too
    assert all("lora_" in n for n, p in model.online.named_parameters() if p.requires_grad)
    assert sum("lora_" in n for n, _ in model.online.named_parameters()) == len(names)


def test_fit_score_and_a_detector_of_another_adapter_refused(sd: Path, tmp_path: Path, capsys) -> None:
    """`rose fit --condition prompt:…` on a folder with a LoRA file, then `rose score`: the prompt and the
    adapter's digest are recorded in the detector file and set back on load; the same detector with a
    peft adapter of other factors (beside the same base) is refused in one line naming both digests."""
    from roseood.cli import main
    from roseood.detectors import Detector

    folder = diffusers_lora(copy(sd, tmp_path))
    rng = np.random.default_rng(0)
    data = tmp_path / "images.npz"
    images = rng.integers(0, 256, (40, 16, 16, 3), dtype=np.uint8)
    np.savez_compressed(data, images=images, labels=np.zeros(40, np.int64))
    common = ["--quiet", "--device", "cpu"]
    code = main([
        "fit", "--model", str(folder), "--method", "rose-diag", "--condition", f"prompt:{PROMPT}",
        "--fit-data", str(data), "--fit-samples", "12", "--stats-samples", "6", "--out",
        str(tmp_path / "d.pt"), *common,
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    model = load_model(folder)
    det = Detector.load(tmp_path / "d.pt", model)
    assert model.condition.spec == f"prompt:{PROMPT}" and det.layers == model.rose_layers("adapter")
    code = main([
        "score", "--model", str(folder), "--detector", str(tmp_path / "d.pt"), "--data", str(data),
        "--out", str(tmp_path / "s.csv"), *common,
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 41
    other = peft_adapter(copy(sd, tmp_path / "other"))
    theirs = load_model(other)  # the peft adapter beside its base: read from its own folder
    assert isinstance(theirs, DiffusionModel) and theirs.adapter is not None
    assert theirs.adapter.digest != model.adapter.digest and theirs.rose_layers() == model.rose_layers()
    with pytest.raises(CheckpointError) as info:
        Detector.load(tmp_path / "d.pt", theirs)
    message = str(info.value)
    assert "\n" not in message and f"fitted with the adapter {model.adapter.digest}" in message
    assert theirs.adapter.digest in message
    with pytest.raises(CheckpointError, match="the model has no adapter"):
        Detector.load(tmp_path / "d.pt", load_model(sd))


def test_layouts_it_cannot_read_are_refused_in_one_line_naming_what_is_missing(
    sd: Path, tmp_path: Path
) -> None:
    def index(spec: dict[str, Any]) -> Callable[[Path], None]:
        return lambda f: (f / "model_index.json").write_text(json.dumps(spec))

    sd3 = {
        "_class_name": "StableDiffusion3Pipeline", "transformer": ["diffusers", "SD3Transformer2DModel"],
        "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_3": ["transformers", "T5EncoderModel"], "vae": ["diffusers", "AutoencoderKL"],
    }  # fmt: skip
    refused(
        copy(sd, tmp_path, index(sd3)), "'StableDiffusion3Pipeline'", "'SD3Transformer2DModel' denoiser",
        "3 text encoders (text_encoder, text_encoder_2, text_encoder_3)", "one CLIP text encoder",
    )  # fmt: skip
    flux = {"_class_name": "FluxPipeline", "transformer": ["diffusers", "FluxTransformer2DModel"]}
    refused(copy(sd, tmp_path, index(flux)), "'FluxPipeline' with a 'FluxTransformer2DModel' denoiser")

    def unet_key(key: str, value: Any) -> Callable[[Path], None]:
        def edit(folder: Path) -> None:
            path = folder / "unet" / "config.json"
            path.write_text(json.dumps(json.loads(path.read_text()) | {key: value}))

        return edit

    refused(copy(sd, tmp_path, unet_key("addition_embed_type", "text_time")), "addition_embed_type", "SDXL")
    refused(copy(sd, tmp_path, unet_key("cross_attention_dim", 10**6)), "cross_attention_dim must be at most")
    narrow = copy(sd, tmp_path, unet_key("cross_attention_dim", 8))  # weights of a 16-wide one: named
    refused(narrow, "attn2.to_k.weight' has shape (8, 16) in the file, (8, 8) in the model")
    with pytest.raises(
        RoseError, match=r"^the text encoder's width 16 is not the UNet's cross_attention_dim 8"
    ):
        DiffusionModel(
            unet=json.loads((narrow / "unet" / "config.json").read_text()), text=load_model(sd).condition
        )
    refused(copy(sd, tmp_path, lambda f: shutil.rmtree(f / "tokenizer")), "no tokenizer/")
    refused(
        copy(sd, tmp_path, lambda f: (f / "text_encoder" / "model.safetensors").unlink()),
        "no model.safetensors (the component's weights)",
    )

    def text_key(key: str, value: Any) -> Callable[[Path], None]:
        def edit(folder: Path) -> None:
            path = folder / "text_encoder" / "config.json"
            path.write_text(json.dumps(json.loads(path.read_text()) | {key: value}))

        return edit

    refused(copy(sd, tmp_path, text_key("num_hidden_layers", 10**4)), "num_hidden_layers must be at most")
    refused(copy(sd, tmp_path, text_key("architectures", ["T5EncoderModel"])), "reads a CLIPTextModel")


def test_adapters_that_do_not_fit_are_refused_in_one_line(sd: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    def damage(edit: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Callable[[Path], None]:
        def apply(folder: Path) -> None:
            diffusers_lora(folder)
            path = folder / "pytorch_lora_weights.safetensors"
            save_file(edit(load_file(path)), path)  # written without the metadata: rank inferred

        return apply

    extra = {"text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 16)}
    refused(copy(sd, tmp_path, damage(lambda w: w | extra)), "adapts the text encoder")
    stray = {"unet.no_such_block.to_q.lora_A.weight": torch.zeros(2, 8)}
    refused(copy(sd, tmp_path, damage(lambda w: w | stray)), "fit no UNet layer")
    misshapen = lambda w: {k: torch.zeros(v.shape[0], 3) if "lora_B" in k else v for k, v in w.items()}  # noqa: E731
    refused(copy(sd, tmp_path, damage(misshapen)), "does not fit the UNet")

    def bad_config(folder: Path) -> None:
        out = peft_adapter(folder)
        config = json.loads((out / "adapter_config.json").read_text())
        (out / "adapter_config.json").write_text(json.dumps(config | {"use_dora": True}))

    base = copy(sd, tmp_path, bad_config)
    refused(base / "sks-lora", "use_dora must be one of False")
    (base / "sks-lora" / "pytorch_lora_weights.safetensors").write_bytes(b"")
    refused(base / "sks-lora", "holds two adapters")


def test_the_text_lora_benchmarks_folder_and_adapter_are_read_with_whole_prompts(tmp_path: Path) -> None:
    """benchmarks/text_lora.py's pipeline folder loads as a 1×16×16 text-conditioned latent model whose
    letter tokenizer reads every class prompt whole (no unknown token, nothing truncated), and its LoRA
    file loads as the rank-4 adapter of the UNet it was written from."""
    from benchmarks.text_lora import CLASSES, LORA, TOKENS, components, prompt, save_lora, save_pipeline
    from peft import LoraConfig

    parts = components(0)
    folder = save_pipeline(parts, tmp_path / "base")
    model = load_model(folder)
    assert isinstance(model, DiffusionModel) and model.input_shape == (1, 16, 16)
    assert "1×16×16 images → 4×8×8 latents by AutoencoderKL" in model.describe()
    tok, unknown = model.condition.tokenizer, model.condition.tokenizer.unk_token_id
    for c in range(len(CLASSES)):
        ids = tok(prompt(c)).input_ids
        assert len(ids) < TOKENS and unknown not in ids[1:-1], prompt(c)
    unet = parts["unet"]
    unet.add_adapter(LoraConfig(**LORA, init_lora_weights="gaussian"))
    tuned = load_model(save_lora(unet, folder / "sneaker-lora-s0"))
    assert isinstance(tuned, DiffusionModel) and tuned.adapter is not None
    assert (tuned.adapter.rank, tuned.adapter.layers) == (4, 32)
    z, t, context = torch.randn(2, 4, 8, 8), torch.tensor([3, 700]), torch.randn(2, TOKENS, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            tuned.unet(z, t, encoder_hidden_states=context).sample,
            unet(z, t, encoder_hidden_states=context).sample,
        )
