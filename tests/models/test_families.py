"""One registry of model families: checkpoints, ``rose train``, ``TrainConfig`` and bench recipes read it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from roseood.bench.workspace import ModelRecipe
from roseood.cli import build_parser, main
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import seal
from roseood.models import (
    FAMILIES,
    VAE,
    GenerativeModel,
    ModelFamily,
    load_model,
    register_family,
    save_model,
)
from roseood.models.train import TrainConfig


class Blob(GenerativeModel):
    """A factorised Gaussian over pixels with a 1×1 conv mean: the smallest trainable image family."""

    kind = "blob"

    def __init__(self, in_channels: int = 1, width: int = 2) -> None:
        super().__init__(in_channels)
        self.width = width
        self.mix = nn.Conv2d(in_channels, in_channels, 1)

    def config(self) -> dict[str, Any]:
        return {"in_channels": self.in_channels, "width": self.width}

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        return (x - self.mix(torch.full_like(x, 0.5))).pow(2).flatten(1).sum(1)

    nll = train_loss = rose_loss  # type: ignore[assignment]

    def layer_sets(self) -> dict[str, list[str]]:
        return {"all": ["mix"]}


@pytest.fixture
def blob_family():
    def arguments(p: Any) -> None:
        p.add_argument("--width", type=int, default=2)

    family = register_family(
        ModelFamily("blob", Blob, {"lr": 0.05, "epochs": 1}, arguments, lambda a: {"width": a.width})
    )
    yield family
    del FAMILIES["blob"]


def test_registering_a_family_is_one_call_read_everywhere(blob_family, tmp_path):
    assert TrainConfig.for_model("blob").lr == 0.05 and TrainConfig.for_model("blob", lr=None).epochs == 1
    assert isinstance(ModelRecipe("blob", "fashion_mnist", (("width", 3),), None, 1).build(), Blob)
    save_model(Blob(width=3), tmp_path / "b.pt")
    assert load_model(tmp_path / "b.pt").config() == {"in_channels": 1, "width": 3}  # type: ignore[attr-defined]
    args = build_parser().parse_args(["train", "blob", "--width", "5", "--out", "x.pt"])
    assert blob_family.from_cli_arguments(args) == {"width": 5} and args.kind == "blob"


def test_rose_train_builds_the_family_from_its_own_options(blob_family, tmp_path, monkeypatch):
    import numpy as np

    data = tmp_path / "d.npz"
    np.savez(data, images=np.random.default_rng(0).integers(0, 255, (8, 32, 32), dtype=np.uint8))
    assert (
        main(
            [
                "train",
                "blob",
                "--data",
                str(data),
                "--width",
                "4",
                "--batch-size",
                "4",
                "--out",
                str(tmp_path / "m.pt"),
            ]
        )
        == 0
    )
    model = load_model(tmp_path / "m.pt")
    assert isinstance(model, Blob) and model.width == 4


def test_unknown_kinds_say_what_is_known(tmp_path):
    known = ", ".join(sorted(FAMILIES))  # every registered family, built-in and from other tests
    with pytest.raises(RoseError, match=re.escape(f"unknown model kind 'nope'; known: {known}")):
        TrainConfig.for_model("nope")
    save_model(VAE(ngf=2, nz=2), tmp_path / "v.pt")
    obj = torch.load(tmp_path / "v.pt", weights_only=True)
    torch.save(seal(obj | {"kind": "mystery"}), tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match=r"holds a user model \('mystery'\).*pass --model-module"):
        load_model(tmp_path / "m.pt")
    with pytest.raises(RoseError, match="has kind 'vae'"):
        register_family(ModelFamily("other", VAE))


def test_latent_models_are_told_by_their_attributes_on_every_python() -> None:
    from roseood.models import Glow
    from roseood.models.base import LATENT_ATTRIBUTES, LatentModel, is_latent_model

    # The list checked is the protocol's own (annotations and methods), so the two cannot drift apart.
    declared = set(LatentModel.__annotations__) | {n for n in vars(LatentModel) if not n.startswith("_")}
    assert set(LATENT_ATTRIBUTES) == declared
    # A VAE's encoder is a submodule (nn.Module.__getattr__), which isinstance on a runtime protocol does
    # not see from Python 3.12 on: IWAE and Likelihood Regret then refused every VAE there.
    assert is_latent_model(VAE(in_channels=1, ngf=4, nz=4))
    assert not is_latent_model(Glow(in_channels=1, image_size=32, levels=2, steps=1, hidden=4))


def test_a_familys_default_method_is_the_near_ood_verdict_else_the_papers():
    from roseood import wrap
    from roseood.models import VAE, Glow, PixelCNN
    from roseood.models.diffusion import DiffusionModel
    from roseood.models.families import default_method

    assert default_method(VAE(ngf=4, nz=4)) == "rose-ekfac"
    assert default_method(Glow(in_channels=1, levels=1, steps=1, hidden=4)) == "rose-gmm-all"
    assert default_method(PixelCNN(in_channels=1, width=4, blocks=1)) == "rose-gmm-all"
    # a pixel-space DDPM, flow matching, a latent and a class-conditional model take their variety's (the
    # compact-Fisher rule's); the DiT, which failed it, the family's
    tiny: dict[str, Any] = {"in_channels": 1, "image_size": 8, "widths": (8, 16), "denoising": {"k": 2}}
    ddpm = DiffusionModel(**tiny)
    flow = DiffusionModel(**tiny, scheduler={"_class_name": "FlowMatchEulerDiscreteScheduler"})
    labels = DiffusionModel(**tiny, classes=3)
    shape = {"layers": 1, "heads": 2, "head_dim": 4, "patch": 2}
    dit = DiffusionModel(in_channels=1, image_size=8, dit=shape)
    assert [m.variety for m in (ddpm, flow, labels, dit)] == ["ddpm", "fm", "cddpm", "dit"]
    assert {default_method(m) for m in (ddpm, flow, labels)} == {"rose-bands-stats-compact"}
    assert default_method(dit) == "rose-bands-stats"
    module = torch.nn.Linear(4, 1)
    assert (
        default_method(wrap(module, lambda x: module(x.flatten(1)).squeeze(1), input_shape=(1, 2, 2)))
        == "rose-ekfac"
    )
    from roseood.detectors import make_detector
    from roseood.models import default_method as public  # the Python user's way to the CLI's default

    assert public is default_method and make_detector(public(ddpm), ddpm).name == "rose-bands-stats-compact"


def test_the_faster_setting_named_beside_a_default_is_one_rose_fit_takes():
    """``rose fit`` names a cheaper setting of the DDPM default when it takes it unasked: the options it
    names must be a method and flags the command accepts, the method a detector the model can take; other
    families name none."""
    import shlex

    from roseood.cli import build_parser
    from roseood.detectors import make_detector
    from roseood.models import VAE
    from roseood.models.diffusion import DiffusionModel
    from roseood.models.families import default_faster

    ddpm = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2})
    hint = default_faster(ddpm)
    options = [w for w in shlex.split(hint.split(" scores")[0]) if w]
    args = build_parser().parse_args(["fit", "--model", "m", "--out", "d.rose", *options])
    assert args.method == "rose-bands-stats-diag" and args.layers == "mid"
    det = make_detector(args.method, ddpm, layers=args.layers)
    assert det.layers == ddpm.rose_layers("mid")
    assert default_faster(VAE(ngf=4, nz=4)) == ""
    # measured on DDPMs only: a DiT (no "mid" layers) or a flow-matching model is not offered it
    flow = DiffusionModel(
        in_channels=1,
        image_size=8,
        widths=(8, 16),
        scheduler={"_class_name": "FlowMatchEulerDiscreteScheduler"},
    )
    dit = DiffusionModel(
        in_channels=1, image_size=8, dit={"layers": 1, "heads": 2, "head_dim": 4, "patch": 2}
    )
    assert default_faster(flow) == default_faster(dit) == ""
