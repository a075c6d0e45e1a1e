"""Text conditioning: a Stable Diffusion pipeline's CLIP text encoder and tokenizer (transformers' classes,
read from the folder, frozen) as the condition the denoising loss is judged under. ROSE asks whether an
image is like what the model learned *under one prompt*: by default the empty prompt, whose embedding is the
unconditional branch that classifier-free guidance trains (p(x)); ``prompt:TEXT`` judges p(x | TEXT), e.g. a
DreamBooth fine-tune's instance prompt. The text encoder runs once per prompt (its embedding is kept), not
per image: every row of the denoiser attends to the same embedding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from roseood.errors import CheckpointError, RoseError, first_line, shown
from roseood.memory import check_memory, module_bytes
from roseood.models.diffusion.files import read_json
from roseood.models.diffusion.textconfig import check_text_encoder_config

PROMPT = "prompt:"
MAX_PROMPT = 10_000  # characters: the tokenizer truncates to the encoder's tokens anyway
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
MAX_TOKENIZER_FILE = 64 << 20  # CLIP's vocab.json is 1 MB, its tokenizer.json 2 MB


def transformers_module() -> Any:
    """The ``transformers`` package, or a one-line ``RoseError`` naming the extra that installs it."""
    try:
        import transformers
    except ImportError:
        raise RoseError(
            "text-conditioned diffusion models need transformers: pip install roseood[diffusion]"
        ) from None
    return transformers


def prompt_of(spec: str | None) -> str:
    """The prompt of a condition ``spec``: ``prompt:TEXT`` (TEXT may be empty), or ``null`` and None: the
    empty prompt (the unconditional branch of classifier-free guidance)."""
    if spec is None or spec == "null":
        return ""
    kind, colon, text = spec.partition(":")
    if kind != "prompt" or not colon:
        raise RoseError(
            f"a text-conditioned model's condition is 'prompt:TEXT' or 'null' (the empty prompt), got "
            f"{shown(spec)}"
        )
    if len(text) > MAX_PROMPT:
        raise RoseError(f"the prompt has {len(text)} characters; at most {MAX_PROMPT}")
    return text


class TextCondition(nn.Module):
    """A frozen ``CLIPTextModel`` of a checked ``config`` and its ``tokenizer``, as the condition of a
    ``UNet2DConditionModel``: the embedding of the judged prompt (``spec``), one for every denoiser row.
    It offers what the model asks of a class ``Condition`` (``labels``: the embedding per row)."""

    classes = None  # no class labels: the prompt is the condition
    null = None
    label = None
    copies = 1  # one denoiser row per (image, pair)
    recorded = True  # the prompt is a setting of the loss, recorded in a detector file
    embedding: Tensor

    def __init__(self, config: dict[str, Any], tokenizer: Any) -> None:
        super().__init__()
        t = transformers_module()
        self.config = check_text_encoder_config(config)
        settings = t.CLIPTextConfig.from_dict(self.config)
        size = module_bytes(lambda: t.CLIPTextModel(settings))
        check_memory(size, f"a CLIPTextModel of {size // 4:,} weights", hint="too large for this machine")
        self.encoder = t.CLIPTextModel(settings).eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.tokens = min(int(tokenizer.model_max_length), int(settings.max_position_embeddings))
        self.spec = PROMPT
        self._embeddings: dict[str, Tensor] = {}  # per prompt: the encoder runs once for each

    @property
    def prompt(self) -> str:
        return prompt_of(self.spec)

    def judge(self, spec: str | None) -> None:
        """Judge the loss under the prompt of ``spec`` (see ``prompt_of``): its embedding, computed once per
        prompt, becomes the ``embedding`` buffer (so the model's fingerprint says which prompt)."""
        prompt = prompt_of(spec)
        if prompt not in self._embeddings:
            self._embeddings[prompt] = self.encode(prompt).cpu()
        self.spec = PROMPT + prompt
        device = next(self.encoder.parameters()).device
        self.register_buffer("embedding", self._embeddings[prompt].to(device))

    @torch.no_grad()
    def encode(self, prompt: str) -> Tensor:
        """The (1, tokens, width) last hidden state of ``prompt`` padded to the tokenizer's length, as
        diffusers' Stable Diffusion pipelines encode a prompt."""
        ids = self.tokenizer(
            prompt, padding="max_length", max_length=self.tokens, truncation=True, return_tensors="pt"
        ).input_ids
        device = next(self.encoder.parameters()).device
        return self.encoder(ids.to(device))[0]

    def labels(self, rows: int, device: torch.device) -> Tensor:
        """The embedding, once per denoiser row (a view: no copies)."""
        return self.embedding.to(device).expand(rows, -1, -1)

    def fixed(self, rows: int, device: torch.device, what: str) -> Tensor:
        """The embedding per row: one prompt is one path per image."""
        return self.labels(rows, device)

    def checked(self, labels: Tensor, n: int, device: torch.device) -> Tensor:
        raise RoseError("class labels given to a text-conditioned model: it is judged under one prompt")

    def combine(self, losses: Tensor) -> Tensor:
        return losses[:, 0]

    def describe(self) -> str:
        """The conditioning in words, for the line ``rose check-model`` prints."""
        parameters = f"{sum(p.numel() for p in self.encoder.parameters()):,}".replace(",", " ")
        judged = (
            f"p(x | prompt {shown(self.prompt)})"
            if self.prompt
            else "p(x) under the empty prompt (the unconditional branch classifier-free guidance trains)"
        )
        return (
            f"text-conditioned by CLIPTextModel ({parameters} parameters, frozen; {self.tokens} tokens): the "
            f"loss judges {judged}, the prompt encoded once (condition='prompt:TEXT' for another)"
        )


def text_condition(text: TextCondition | None, unet: dict[str, Any]) -> TextCondition | None:
    """``text`` for the denoiser of checked config ``unet``: a ``UNet2DConditionModel`` needs one whose
    width is its cross-attention's, and no other denoiser takes one (one-line ``RoseError`` otherwise)."""
    conditioned = unet.get("_class_name") == "UNet2DConditionModel"
    if conditioned and text is None:
        raise RoseError(
            "a UNet2DConditionModel is conditioned on text: read it from its diffusers folder "
            "(StableDiffusionPipeline: text_encoder/ and tokenizer/ beside unet/)"
        )
    if text is None:
        return None
    if not conditioned:
        raise RoseError(f"a {unet.get('_class_name', 'UNet2DModel')} takes no text encoder")
    width, wanted = text.config.get("hidden_size", 512), unet.get("cross_attention_dim", 1280)
    if width != wanted:
        raise RoseError(f"the text encoder's width {width} is not the UNet's cross_attention_dim {wanted}")
    return text


def read_tokenizer(folder: Path) -> Any:
    """A CLIP tokenizer from ``folder`` by transformers' ``CLIPTokenizer`` itself (its vocabulary and merges,
    or its tokenizer.json; never a class or code the folder names), each file of a bounded size; anything
    unreadable is a one-line ``CheckpointError`` naming the folder."""
    t = transformers_module()
    for name in TOKENIZER_FILES:
        path = folder / name
        if path.is_file() and path.stat().st_size > MAX_TOKENIZER_FILE:
            raise CheckpointError(
                f"{path}: {path.stat().st_size:,} bytes; a tokenizer file has at most 64 MB"
            )
    settings = folder / "tokenizer_config.json"
    kind = read_json(settings).get("tokenizer_class", "CLIPTokenizer") if settings.is_file() else None
    if kind not in (None, "CLIPTokenizer", "CLIPTokenizerFast"):
        raise CheckpointError(f"{settings}: a {shown(kind)}; roseood reads a CLIPTokenizer")
    try:
        return t.CLIPTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # tokenizers raises bare Exceptions for a damaged file
        raise CheckpointError(f"{folder}: not a readable CLIP tokenizer ({first_line(exc)})") from None
