"""Diffusers folders a user hands us: every config number checked before anything is built (one line
naming the file and field), ``roseood.json`` schema-checked, weights loaded strictly and without code,
the scheduler fallback stated, no network, and memory estimates before the large allocations."""

from __future__ import annotations

import json
import pickle
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from roseood import memory
from roseood.errors import CheckpointError, RoseError
from roseood.models import load_model
from roseood.models.diffusion import LOSS_DEFAULTS, WEIGHTS, DiffusionModel, export_diffusers, load_diffusers
from roseood.models.diffusion.config import SCHEDULER_FIELDS, UNET_FIELDS

WEIGHT_FILE = f"unet/{WEIGHTS}.safetensors"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny exported pipeline (1×8×8 images, widths 8 and 16, k = 2) every case copies and damages."""
    torch.manual_seed(0)
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2})
    return export_diffusers(model, tmp_path_factory.mktemp("diffusers") / "good")


def damaged(pipeline: Path, where: Path, edit: Callable[[Path], object]) -> Path:
    folder = where / "case"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(pipeline, folder)
    edit(folder)
    return folder


def set_json(relative: str, key: str, value: Any) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / relative
        config = json.loads(path.read_text()) if path.exists() else {}
        config[key] = value
        path.write_text(json.dumps(config))

    return edit


def refused(folder: Path, *phrases: str) -> str:
    """Loading ``folder`` is a one-line ``CheckpointError`` containing every phrase; its message."""
    with pytest.raises(CheckpointError) as info:
        load_model(folder)
    message = str(info.value)
    assert "\n" not in message and all(p in message for p in phrases), message
    return message


# -- the cases -----------------------------------------------------------------------------------

CONFIG_CASES = [
    ("unet/config.json", "sample_size", 4096, "sample_size must be at most 2048"),
    ("unet/config.json", "sample_size", 100000, "sample_size must be at most 2048"),
    ("unet/config.json", "sample_size", -5, "sample_size must be a positive integer"),
    ("unet/config.json", "sample_size", "abc", "sample_size must be a positive integer"),
    ("unet/config.json", "sample_size", [8, 16], "sample_size must be one size"),
    ("unet/config.json", "sample_size", 7, "not divisible by 2**1"),
    ("unet/config.json", "sample_size", None, "sample_size must be a positive integer, got None"),
    ("unet/config.json", "norm_num_groups", 0, "norm_num_groups must be a positive integer"),
    ("unet/config.json", "norm_num_groups", 3, "norm_num_groups = 3 does not divide"),
    ("unet/config.json", "block_out_channels", [8, 10**9], "block_out_channels[1] must be at most"),
    ("unet/config.json", "layers_per_block", 0, "layers_per_block must be a positive integer"),
    ("unet/config.json", "attention_head_dim", 17, "attention_head_dim 17 exceeds the 16 channels"),
    ("unet/config.json", "in_channels", 3, "as many channels as it takes"),
    ("unet/config.json", "down_block_types", ["DownBlock2D"], "down_block_types names 1 blocks"),
    ("unet/config.json", "down_block_types", ["DownBlock2D", "NoSuchBlock2D"], "cannot build a UNet2DModel"),
    ("unet/config.json", "num_class_embeds", 10**6, "num_class_embeds must be"),
    ("unet/config.json", "class_embed_type", "timestep", "conditions on a vector"),
    ("unet/config.json", "_class_name", "UNet2DConditionModel", "conditioned on text; roseood reads it in a"),
    ("unet/config.json", "_class_name", "UNet3DConditionModel", "roseood reads UNet2DModel"),
    ("scheduler/scheduler_config.json", "num_train_timesteps", 0, "num_train_timesteps must be a positive"),
    ("scheduler/scheduler_config.json", "beta_end", 1.5, "beta_end must be in (0, 1]"),
    ("scheduler/scheduler_config.json", "beta_start", 0.5, "beta_start 0.5 exceeds beta_end"),
    ("scheduler/scheduler_config.json", "prediction_type", "flow", "prediction_type must be one of"),
    ("scheduler/scheduler_config.json", "trained_betas", [0.1, 0.2], "trained_betas must be a list"),
]


@pytest.mark.parametrize(
    ("file", "key", "value", "phrase"), CONFIG_CASES, ids=[f"{c[1]}={c[2]}" for c in CONFIG_CASES]
)
def test_a_config_number_out_of_range_is_one_line_naming_file_and_field(
    pipeline: Path, tmp_path: Path, file: str, key: str, value: Any, phrase: str
) -> None:
    folder = damaged(pipeline, tmp_path, set_json(file, key, value))
    message = refused(folder, phrase)
    assert str(folder / file) in message or str(folder) in message


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("{not json", "roseood.json: not valid JSON"),
        ("[1, 2]", "roseood.json: must hold a JSON object, found a JSON list"),
        ('{"evil": 1}', "roseood.json: unknown field 'evil'"),
        ('{"ema_decay": "x"}', "roseood.json: ema_decay must be a number, got 'x'"),
        ('{"ema_decay": 1}', "roseood.json: ema_decay must be below 1"),
        ('{"denoising": [1]}', "roseood.json: denoising must be a mapping"),
        ('{"denoising": {"K": 3}}', "roseood.json: denoising has unknown options ['K']"),
        ('{"denoising": {"k": -3}}', "denoising.k must be a positive integer, got -3"),
        ('{"denoising": {"seed": 1180591620717411303424}}', "denoising.seed must be < 2**32"),
        ('{"denoising": {"t_min": 0.5, "t_max": 0.2}}', "needs t_min < t_max"),
        (
            '{"denoising": {"weighting": 3}}',
            "roseood.json: denoising.weighting must be one of simple, elbo, got 3",
        ),
    ],
)
def test_roseood_json_is_schema_checked(pipeline: Path, tmp_path: Path, text: str, phrase: str) -> None:
    folder = damaged(pipeline, tmp_path, lambda f: (f / "roseood.json").write_text(text))
    refused(folder, phrase)


def test_a_huge_denoising_k_is_refused_before_allocating(pipeline: Path, tmp_path: Path) -> None:
    folder = damaged(
        pipeline, tmp_path, lambda f: (f / "roseood.json").write_text('{"denoising": {"k": 1000000000}}')
    )
    refused(folder, "k = 1000000000", "GiB free", "lower denoising k")
    model = load_model(pipeline)
    with pytest.raises(RoseError, match="lower k"):
        model.set_denoising(k=10**9)
    assert model.k == 2  # nothing changed


@pytest.mark.parametrize(
    ("edit", "phrase"),
    [
        (lambda s: s.pop("conv_in.bias"), "missing 'conv_in.bias'"),
        (lambda s: s.update({"evil.weight": torch.zeros(3)}), "unexpected 'evil.weight'"),
        (
            lambda s: s.update({"conv_in.weight": torch.zeros(8, 1, 1, 1)}),
            "'conv_in.weight' has shape (8, 1, 1, 1)",
        ),
        (lambda s: [s.pop(k) for k in sorted(s)[:5]], "and 2 more"),
    ],
    ids=["missing", "unexpected", "shape", "many missing"],
)
def test_weight_tensors_missing_unexpected_or_misshapen_are_named(
    pipeline: Path, tmp_path: Path, edit: Callable[[dict[str, torch.Tensor]], object], phrase: str
) -> None:
    def damage(folder: Path) -> None:
        state = load_file(folder / WEIGHT_FILE)
        edit(state)
        save_file(state, folder / WEIGHT_FILE)

    refused(damaged(pipeline, tmp_path, damage), "weights do not match the UNet2DModel", phrase)


class Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (Path(tempfile.gettempdir()) / "rose-h34a-pwned", "ran"))


def test_a_safetensors_without_pread_is_one_line_naming_the_version(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "load_file", lambda filename, device="cpu": {})  # 0.7's
    with pytest.raises(RoseError, match=r"^reading weight files needs safetensors 0.8 or later"):
        load_model(pipeline)


def test_bin_and_sharded_weights_load_weights_only(pipeline: Path, tmp_path: Path) -> None:
    x = torch.rand(2, 1, 8, 8)
    expected = load_model(pipeline).nll(x)

    def as_bin(folder: Path) -> None:
        torch.save(load_file(folder / WEIGHT_FILE), folder / f"unet/{WEIGHTS}.bin")
        (folder / WEIGHT_FILE).unlink()

    torch.testing.assert_close(load_model(damaged(pipeline, tmp_path, as_bin)).nll(x), expected)

    def sharded(folder: Path) -> None:
        state = load_file(folder / WEIGHT_FILE)
        names = sorted(state)
        halves = {f"{WEIGHTS}-0000{i + 1}.safetensors": names[i::2] for i in (0, 1)}
        for shard, keys in halves.items():
            save_file({k: state[k] for k in keys}, folder / "unet" / shard)
        index = {"weight_map": {k: shard for shard, keys in halves.items() for k in keys}}
        (folder / f"unet/{WEIGHTS}.safetensors.index.json").write_text(json.dumps(index))
        (folder / WEIGHT_FILE).unlink()

    torch.testing.assert_close(load_model(damaged(pipeline, tmp_path, sharded)).nll(x), expected)

    def poisoned(folder: Path) -> None:
        (folder / f"unet/{WEIGHTS}.bin").write_bytes(pickle.dumps({"conv_in.weight": Payload()}))
        (folder / WEIGHT_FILE).unlink()

    refused(damaged(pipeline, tmp_path, poisoned), "not a readable checkpoint")
    assert not (Path(tempfile.gettempdir()) / "rose-h34a-pwned").exists()

    def escaping(folder: Path) -> None:
        sharded(folder)
        index = folder / f"unet/{WEIGHTS}.safetensors.index.json"
        index.write_text(json.dumps({"weight_map": {"conv_in.weight": "../../elsewhere.safetensors"}}))

    refused(damaged(pipeline, tmp_path, escaping), "is not a shard file of this folder")
    refused(damaged(pipeline, tmp_path, lambda f: (f / WEIGHT_FILE).unlink()), "no diffusion_pytorch_model")
    refused(
        damaged(pipeline, tmp_path, lambda f: (f / WEIGHT_FILE).write_bytes(b"junk")),
        "not a readable safetensors",
    )


def test_a_missing_scheduler_is_stated_in_one_line(
    pipeline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = damaged(pipeline, tmp_path, lambda f: shutil.rmtree(f / "scheduler"))
    model = load_model(folder)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no scheduler/scheduler_config.json; using DDPMScheduler's defaults" in err[0]
    assert model.train_timesteps == 1000


def test_a_config_that_is_a_list_names_the_file_and_never_the_network(
    pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a local folder tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    load_model(pipeline)  # a good folder loads with no network at all
    folder = damaged(pipeline, tmp_path, lambda f: (f / "unet/config.json").write_text("[1, 2]"))
    message = refused(folder, "unet/config.json: must hold a JSON object, found a JSON list")
    assert "connect" not in message
    refused(damaged(pipeline, tmp_path, lambda f: (f / "unet/config.json").write_text("{")), "not valid JSON")

    def without_size(folder: Path) -> None:
        config = json.loads((folder / "unet/config.json").read_text())
        (folder / "unet/config.json").write_text(
            json.dumps({k: v for k, v in config.items() if k != "sample_size"})
        )

    refused(damaged(pipeline, tmp_path, without_size), "unet/config.json: sample_size is missing")


def test_a_model_that_cannot_fit_is_refused_before_it_is_built(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_model(pipeline)
    monkeypatch.setattr(memory, "available", lambda device=None: 100_000)
    with pytest.raises(
        CheckpointError, match=r"a UNet2DModel of .* weights with .*more than the 98 KiB free"
    ):
        load_diffusers(pipeline)
    with pytest.raises(RoseError, match=r"^the optimised copy of the UNet2DModel's weights, which training"):
        model.train()  # a loaded model holds one denoiser; training checks its second before making it
    with pytest.raises(RoseError, match="a UNet batch of 64 rows"):
        model.nll(torch.rand(32, 1, 8, 8))

    def copies(*args: object, **kwargs: object) -> None:
        raise AssertionError("the K copies were made before the batch was checked")

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", copies)  # refused before the copies exist
    for loss in (model.nll, model.image_statistics):
        with pytest.raises(RoseError, match="a UNet batch of 64 rows"):
            loss(torch.rand(32, 1, 8, 8))


def test_weights_that_do_not_fit_the_config_are_refused_before_the_unet_is_allocated(
    pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A config whose UNet is far larger than its weights file (time_embedding_dim 45000: 8 GB of weights,
    # which once took two 8 GB copies before the mismatch was found, and the kernel killed the process):
    # the file is checked against the UNet built on the meta device, so no memory is asked for at all.
    monkeypatch.setattr(memory, "available", lambda device=None: 100_000)
    folder = damaged(pipeline, tmp_path, set_json("unet/config.json", "time_embedding_dim", 45000))
    refused(folder, "weights do not match", "time_embedding.linear_1.weight' has shape (32, 8) in the file")


# -- every config number, every JSON shape (hypothesis) ---------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.lists(st.integers(-2, 20), max_size=3),
)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def loads_or_one_line(folder: Path) -> DiffusionModel | None:
    """Load ``folder``: the model, or None after a one-line ``CheckpointError`` naming the folder."""
    try:
        model = load_diffusers(folder)
    except CheckpointError as exc:
        assert "\n" not in str(exc) and str(folder) in str(exc)
        return None
    return model


@FAST
@given(key=st.sampled_from(sorted(UNET_FIELDS)), value=NUMBERS)
@example(key="mid_block_scale_factor", value=1.8757660632042054e-291)  # divided by: NaN scores
def test_any_unet_config_value_loads_and_runs_or_is_one_line(pipeline: Path, key: str, value: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = damaged(pipeline, Path(tmp), set_json("unet/config.json", key, value))
        model = loads_or_one_line(folder)
        if model is not None:  # an accepted config runs
            assert model.nll(torch.rand(1, *model.input_shape)).isfinite().all()


@FAST
@given(key=st.sampled_from(sorted(SCHEDULER_FIELDS)), value=NUMBERS)
def test_any_scheduler_config_value_loads_and_runs_or_is_one_line(
    pipeline: Path, key: str, value: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = damaged(pipeline, Path(tmp), set_json("scheduler/scheduler_config.json", key, value))
        model = loads_or_one_line(folder)
        if model is not None:  # an accepted schedule gives a finite loss for each image
            nll = model.nll(torch.rand(2, *model.input_shape))
            assert nll.shape == (2,) and nll.isfinite().all()


JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**66), 2**66), st.floats(), st.text(max_size=3)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
ROSEOOD_JSON = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "ema_decay": JSON | st.floats(0, 1),
            "denoising": JSON
            | st.fixed_dictionaries(
                {}, optional={k: JSON | st.integers(-2, 5) | st.floats(0, 1) for k in LOSS_DEFAULTS}
            ),
        },
    ),
)


@FAST
@given(content=ROSEOOD_JSON)
def test_any_roseood_json_loads_or_is_one_line_naming_it(pipeline: Path, content: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = damaged(pipeline, Path(tmp), lambda f: (f / "roseood.json").write_text(json.dumps(content)))
        model = loads_or_one_line(folder)
        if model is not None:
            assert isinstance(content, dict) and set(content) <= {"denoising", "ema_decay"}
            assert model.k == content.get("denoising", {}).get("k", LOSS_DEFAULTS["k"])


# -- pipelines and components roseood does not model: refused in one line naming them, never misread ----


def test_a_scheduler_of_another_objective_is_refused_not_scored_with_ddpms_loss(
    pipeline: Path, tmp_path: Path
) -> None:
    """A UNet saved with a scheduler of neither DDPM's forward process nor flow matching (a score SDE of
    variance-exploding noise) would be scored with the wrong loss; the scheduler's class names it.
    (A FlowMatchEulerDiscreteScheduler is read as flow matching: tests/models/test_flow_matching.py.)"""
    from diffusers import ScoreSdeVeScheduler

    def sde(folder: Path) -> None:
        shutil.rmtree(folder / "scheduler")
        ScoreSdeVeScheduler().save_pretrained(folder / "scheduler")

    refused(damaged(pipeline, tmp_path, sde), "ScoreSdeVeScheduler", "another objective")


def test_a_ddim_scheduler_shares_ddpms_forward_process_and_loads(pipeline: Path, tmp_path: Path) -> None:
    """A folder's DDIMScheduler is read as DDPM's forward process (the same ᾱ_t and loss as the DDPM
    folder's) and is shown, and kept, as the DDIMScheduler it is, not as a DDPMScheduler."""
    from diffusers import DDIMScheduler

    def ddim(folder: Path) -> None:
        shutil.rmtree(folder / "scheduler")
        DDIMScheduler().save_pretrained(folder / "scheduler")

    model, ddpm = load_model(damaged(pipeline, tmp_path, ddim)), load_model(pipeline)
    assert isinstance(model, DiffusionModel) and isinstance(ddpm, DiffusionModel)
    torch.testing.assert_close(model.alphas_cumprod, ddpm.alphas_cumprod)
    assert "schedule: DDIMScheduler (its training process read by DDPMScheduler), 1000" in model.describe()
    assert model.config()["scheduler"]["_class_name"] == "DDIMScheduler"  # a checkpoint keeps the class
    assert (
        "schedule: DDPMScheduler, 1000" in ddpm.describe() and "_class_name" not in ddpm.config()["scheduler"]
    )


def test_an_autoencoder_a_pipeline_does_not_decode_with_is_refused(pipeline: Path, tmp_path: Path) -> None:
    """An LDMPipeline's VQ-VAE and a DiTPipeline's VAE are read (test_latent_diffusion.py, test_dit.py);
    an autoencoder or a transformer beside a pixel-space UNet pipeline is refused by name."""
    from diffusers import VQModel

    def vq_beside(folder: Path) -> None:
        VQModel(block_out_channels=(8,), norm_num_groups=4).save_pretrained(folder / "vqvae")

    refused(damaged(pipeline, tmp_path / "a", vq_beside), "vqvae/ is an autoencoder", "(DDPMPipeline)")
    refused(damaged(pipeline, tmp_path / "b", lambda f: (f / "vae").mkdir()), "vae/ is an autoencoder")
    refused(damaged(pipeline, tmp_path / "c", lambda f: (f / "transformer").mkdir()), "transformer/ is")


@pytest.mark.parametrize(
    ("index", "phrase"),
    [
        (
            {"_class_name": "DDPMPipeline", "unet": ["diffusers", "UNet2DModel"], "text_encoder": ["t", "T"]},
            "text-conditional",
        ),
        ({"_class_name": "MysteryPipeline", "unet": ["diffusers", "UNet2DModel"]}, "'MysteryPipeline'"),
        ([1, 2], "must hold a JSON object"),
    ],
)
def test_an_index_naming_what_roseood_does_not_model_is_refused(
    pipeline: Path, tmp_path: Path, index: Any, phrase: str
) -> None:
    refused(
        damaged(pipeline, tmp_path, lambda f: (f / "model_index.json").write_text(json.dumps(index))), phrase
    )


def test_an_absent_optional_component_is_not_a_component(pipeline: Path, tmp_path: Path) -> None:
    """diffusers writes ``[null, null]`` for an optional component left out (a safety checker)."""
    folder = damaged(pipeline, tmp_path, set_json("model_index.json", "safety_checker", [None, None]))
    assert isinstance(load_model(folder), DiffusionModel)


def test_check_model_says_what_it_read_before_the_layer_table(pipeline: Path, capsys) -> None:
    from roseood.cli import main

    assert main(["check-model", "--model", str(pipeline)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("denoiser: diffusers UNet2DModel (") and "ε prediction" in out[1]
    assert "DDPMScheduler, 1000 linear-β steps" in out[1] and "pixel space (no autoencoder)" in out[1]
    assert "unconditional: the loss judges p(x)" in out[1] and "k = 2, t in [0, 1)" in out[1]
