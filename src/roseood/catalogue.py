"""The built-in plug-ins as the command line offers them, by name, kept apart from what implements them
(torch, scipy, sklearn), so that ``rose --help`` and the refusal of a bad argument need none of those.
Each list is the built-in part of a registry (``tests/test_catalogue.py`` checks them against it); the
registries stay the one plug-in pattern, and a name read from a file is still looked up there."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from roseood.errors import RoseError
from roseood.settings import LOSS_SETTINGS, denoising_of
from roseood.validation import count

PAPER_METHOD = "rose-ekfac"  # a family's detection method unless the near-OOD bench's rule chose another
# ``rose fit`` / ``rose evaluate``: Fisher (fit) and statistics images when neither the options nor the
# model's family set them (the paper's 10 000 fit images)
FIT_COUNTS = (10000, 2000)
CLASSES_OF_DATA = "data"  # a family config's ``classes``: as many as the training images have

# roseood.detectors.METHODS, in registration order
METHODS = (
    "nll",
    "nll-iwae",
    "ic-png",
    "ic-jp2",
    "lratio",
    "lr",
    "rnd-svd",
    "rnd-dct",
    "rnd-gb",
    "rnd-random",
    "rose-ekfac-compact-wide",
    "rose-ekfac-compact",
    "rose-ekfac",
    "rose-kfac",
    "rose-kfac-tikhonov",
    "rose-diag",
    "rose-dense",
    "rose-gmm",
    "rose-gmm-stats",
    "rose-gmm-all",
    "rose-two-sided",
    "rose-bands",
    "rose-bands-stats",
    "rose-bands-stats-diag",
    "rose-bands-stats-compact",
    "rose-bands-stats-compact-wide",
    "rose-bands-stats-last4",
    "denoising",
    "msma",
    "diffpath",
    "diffpath-1d",
    "reconstruction",
)


def offered_methods() -> tuple[str, ...]:
    """The methods the command line offers: the built-in ones, then those a plug-in registered in this
    process (which has then imported the detector registry; ``roseood.plugins``)."""
    registry = sys.modules.get("roseood.detectors.base")
    added = [m for m in registry.METHODS if m not in METHODS] if registry is not None else []
    return (*METHODS, *added)


# the share of held-out in-distribution images a decision threshold lets through (Detector.calibrate,
# rose fit --tpr, a report's threshold where none was calibrated)
DECISION_TPR = 0.95
# ROSE's settings and a diffusion model's per-image loss settings (name, default, help, check; the
# aggregations, rows and adjustments they take): roseood.settings
GALLERY = 8  # images shown at each end of a set in a report
CHECKPOINT_EVERY_S = 600.0  # training checkpoints inside an epoch this often: an interruption loses ≤ 10 min
# roseood.data.preprocess: how an image of another size is brought to S×S
RESIZE_METHODS = ("crop", "stretch")


@dataclass(frozen=True)
class TrainOptions:
    """A model family's ``rose train FAMILY`` options: its help line, the options it adds to the parser,
    the constructor keywords they give (``ModelFamily.add_cli_arguments`` / ``from_cli_arguments``), and
    the detection method ``rose fit`` and ``rose evaluate`` take for it (``ModelFamily.method``), with
    the fit and statistics images they take unless told (``fit_counts``) and a cheaper setting of it that
    ``rose fit`` names when it takes the method unasked (``faster``; empty: none), for the varieties it was
    measured on (``faster_for``; empty: all). ``varieties``: the method of each variety of the family that
    a rule judged apart (a model's ``variety``, e.g. "ddpm")."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    to_config: Callable[[argparse.Namespace], dict[str, Any]]
    method: str = PAPER_METHOD
    fit_counts: tuple[int, int] = FIT_COUNTS
    faster: str = ""
    faster_for: tuple[str, ...] = ()
    varieties: dict[str, str] = field(default_factory=dict)

    def method_for(self, variety: str = "") -> str:
        """The detection method of a model of ``variety`` in this family: its own where a rule set one."""
        return self.varieties.get(variety, self.method)


def _vae_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ngf", type=count, default=32, help="VAE width")
    p.add_argument("--nz", type=count, default=100, help="VAE latent size")


def _glow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--levels", type=count, help="Glow levels L (unset: from the size, 32: 2, 64: 3, 128: 4)")
    p.add_argument("--steps", type=count, default=16, help="Glow steps per level K")
    p.add_argument("--hidden", type=count, default=200, help="Glow coupling width")
    p.add_argument("--plain-invconv", action="store_true", help="Glow 1x1 convs without LU decomposition")


def _pixelcnn_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=count, default=32, help="PixelCNN feature maps")
    p.add_argument("--blocks", type=count, default=5, help="residual blocks (gated: layers after the first)")
    p.add_argument("--gated", action="store_true", help="gated two-stack PixelCNN (no blind spot)")


# a UNet's and a DiT's shape options: each refused for the other denoiser (none is ignored in silence)
UNET_SHAPE: dict[str, Any] = {"widths": "32,64,64", "layers_per_block": 1}
DIT_SHAPE = {"dit_layers": 4, "dit_heads": 4, "dit_head_dim": 16, "patch_size": 2}
VQ_SHAPE: dict[str, Any] = {
    "autoencoder_widths": "32,64",
    "latent_channels": 3,
    "codebook": 256,
    "autoencoder_epochs": 2,
}


def _diffusion_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--denoiser",
        choices=("unet", "dit"),
        default="unet",
        help="a UNet2DModel, or a DiTTransformer2DModel (patches, adaLN-zero transformer blocks)",
    )
    p.add_argument("--widths", type=str, help="UNet block widths, one per resolution (default: 32,64,64)")
    p.add_argument("--layers-per-block", type=count, help="ResNet layers per UNet block (default: 1)")
    p.add_argument("--no-attention", action="store_true", help="no UNet mid-block self-attention")
    p.add_argument("--dit-layers", type=count, help="DiT: transformer blocks (default: 4)")
    p.add_argument("--dit-heads", type=count, help="DiT: attention heads (default: 4)")
    p.add_argument("--dit-head-dim", type=count, help="DiT: channels per head (default: 16)")
    p.add_argument("--patch-size", type=count, help="DiT: patch side in pixels (default: 2)")
    p.add_argument(
        "--autoencoder",
        choices=("vq",),
        help="a latent model, trained in LDM's two stages: a VQ-VAE on the images first (its checkpoint "
        "OUT.autoencoder.pt), then the denoiser on its frozen encoder's latents",
    )
    p.add_argument(
        "--autoencoder-widths",
        help="VQ-VAE block widths; each after the first halves the side (default: 32,64)",
    )
    p.add_argument("--latent-channels", type=count, help="VQ-VAE latent channels (default: 3)")
    p.add_argument("--codebook", type=count, help="VQ-VAE codebook vectors (default: 256)")
    p.add_argument("--autoencoder-epochs", type=count, help="VQ-VAE training epochs (default: 2)")
    p.add_argument(
        "--conditional",
        action="store_true",
        help="class-conditional on the data's labels (a UNet: judged by the marginal over the classes, "
        "C× the cost; a DiT: at its null label, which diffusers' 10 %% label dropout trains); unset: a "
        "model of p(x) (a DiT of one label)",
    )
    p.add_argument("--timesteps", type=count, default=1000, help="train timesteps T")
    p.add_argument(
        "--objective",
        choices=("ddpm", "flow"),
        default="ddpm",
        help="DDPM's ε-MSE, or flow matching (rectified flow: the velocity's MSE)",
    )
    p.add_argument("--flow-shift", type=float, default=1.0, help="flow matching's σ shift (SD3: 3)")
    p.add_argument("--ema-decay", type=float, default=0.999, help="EMA decay of the evaluated weights")
    add_loss_options(p, trained=True)


def add_loss_options(p: argparse.ArgumentParser, trained: bool) -> None:
    """A diffusion model's per-image loss settings as options, one per declared setting
    (``roseood.settings.LOSS_SETTINGS``): each, with its default, for a model ``rose train`` makes
    (``trained``; the default given as text, parsed as a given option is); else those the detecting
    commands offer, unset (the model's own: what ``rose fit`` and the others change, recorded in the
    detector file)."""
    for s in LOSS_SETTINGS:
        if trained or s.detecting:
            p.add_argument(
                s.option,
                type=s.parse,
                choices=s.choices,
                metavar=s.metavar,
                default=s.text(s.default) if trained else None,
                help=s.help
                if trained
                else f"diffusion models: {s.help} (unset: the model's own; recorded in the detector file)",
            )


def _numbers(text: str, flag: str) -> list[int]:
    try:
        return [int(w) for w in text.split(",")]
    except ValueError:
        raise RoseError(f"{flag} takes comma-separated numbers, got {text!r}") from None


def _given_or_default(a: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """Each option of ``defaults`` as given on the command line, else its default."""
    return {k: getattr(a, k) if getattr(a, k) is not None else v for k, v in defaults.items()}


def _denoiser_shape(a: argparse.Namespace) -> dict[str, Any]:
    """The UNet's or the DiT's shape options (defaults where unset); the other's, given, refused."""
    dit = a.denoiser == "dit"
    own, other = (DIT_SHAPE, {**UNET_SHAPE, "no_attention": False}) if dit else (UNET_SHAPE, DIT_SHAPE)
    given = [k for k in other if getattr(a, k) not in (None, False)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise RoseError(f"{flag} shapes a {'UNet' if dit else 'DiT'}; this is a --denoiser {a.denoiser}")
    shape = _given_or_default(a, own)
    if dit:
        names = dict(zip(DIT_SHAPE, ("layers", "heads", "head_dim", "patch"), strict=True))
        return {"dit": {names[k]: v for k, v in shape.items()}}
    widths = _numbers(str(shape["widths"]), "--widths")
    return {"widths": widths, "layers_per_block": shape["layers_per_block"], "attention": not a.no_attention}


def _diffusion_config(a: argparse.Namespace) -> dict[str, Any]:
    denoising = denoising_of(lambda s: getattr(a, s.dest))
    config = _denoiser_shape(a) | {
        "train_timesteps": a.timesteps,
        "ema_decay": a.ema_decay,
        "denoising": denoising,
    }
    if a.conditional:  # the count of the data's classes, filled in when the model is built for them
        config["classes"] = CLASSES_OF_DATA
    given = [k for k in VQ_SHAPE if getattr(a, k) is not None]
    if a.autoencoder is None and given:
        raise RoseError(f"--{given[0].replace('_', '-')} shapes a VQ-VAE: give --autoencoder vq")
    if a.autoencoder is not None:  # trained first, then frozen: roseood.models.diffusion.stages
        stage = _given_or_default(a, VQ_SHAPE)
        config["first_stage"] = {
            "widths": _numbers(stage.pop("autoencoder_widths"), "--autoencoder-widths"),
            "epochs": stage.pop("autoencoder_epochs"),
            **stage,
        }
    from roseood.models.diffusion.objectives import OBJECTIVES  # torch and diffusers: when a model is made

    scheduler = OBJECTIVES[a.objective].scheduler_config(a.timesteps, a.flow_shift)
    if scheduler is not None:  # a flow-matching one: the scheduler's class is what makes the model one
        config["scheduler"] = scheduler
    elif a.flow_shift != 1.0:
        raise RoseError("--flow-shift is for --objective flow")
    return config


# roseood.models.FAMILIES: the built-in trainable families' options, in registration order
TRAIN_OPTIONS = {
    "vae": TrainOptions(
        "the paper's VAE (Adam 1e-3 halved every 30 epochs, batch 64, flips)",
        _vae_arguments,
        lambda a: {"ngf": a.ngf, "nz": a.nz},
        # the paper's ROSE-EKFAC: on CelebA put through CIFAR-10's JPEG history the density variants fall
        # to chance and rose-gmm-stats is no longer above it on every CIFAR-10 VAE (docs/results.md)
    ),
    "glow": TrainOptions(
        "Glow (Adamax 5e-4; --warmup, --grad-clip, --weight-decay)",
        _glow_arguments,
        lambda a: {"levels": a.levels, "steps": a.steps, "hidden": a.hidden, "lu": not a.plain_invconv},
        # the layer scores, the NLL and the images' PNG complexity under one density: the same bench's
        # verdict on its three Fashion-MNIST and three CIFAR-10 Glows, and likewise its PixelCNNs
        "rose-gmm-all",
    ),
    "pixelcnn": TrainOptions(
        "PixelCNN, not in the paper (masked convs, 256-way softmax; Adam 1e-3 halved every 10 epochs)",
        _pixelcnn_arguments,
        lambda a: {"width": a.width, "blocks": a.blocks, "gated": a.gated},
        "rose-gmm-all",
    ),
    "diffusion": TrainOptions(
        "DDPM or flow matching on a diffusers UNet2DModel or DiT, unconditional or class-conditional (needs "
        "roseood[diffusion]; Adam 1e-3, 100 warm-up steps, clip 1, EMA weights evaluated)",
        _diffusion_arguments,
        _diffusion_config,
        # ROSE per timestep band with the ε-MSE per timestep under one density: no method passed the rule
        # (at or above every method on every set of every zoo DDPM), so the best on the mean over the sets
        # of both data sets, CelebA put through CIFAR-10's JPEG history (docs/results.md)
        "rose-bands-stats",
        # fit and statistics images where the DDPM default's AUROC had settled on ddpm-fmnist-s0 against
        # a 10 000 + 2 000 fit (docs/diffusion.md, "What a fit needs")
        fit_counts=(512, 500),
        # the cheapest setting that came close to the second rule for a cheaper default (docs/diffusion.md,
        # "Cheaper operating points"): 1.7× DiffPath's time per image against the DDPM default's 4.3× and
        # rose-bands-stats's 5.6× (docs/diffusion.md, "Compact EKFAC")
        faster="--method rose-bands-stats-diag --layers mid scores in under half the time (a quarter of "
        "rose-bands-stats's; one set short of its AUROC on one zoo DDPM: docs/diffusion.md, cheaper "
        "operating points)",
        faster_for=("ddpm",),  # measured on the zoo DDPMs; a DiT has no "mid" layers
        # the same on compact EKFAC Fishers, a file no larger than the weights: pixel-space DDPMs (it passed
        # the diagonal Fishers' rule on the three Fashion-MNIST DDPMs), flow matching, latent and
        # class-conditional models (the same rule over each kind's three zoo models); the DiT failed it on
        # MNIST (and compact EKFAC of the wider side, ekfac-compact-wide, in scoring time)
        # (docs/diffusion.md, "Compact EKFAC")
        varieties={v: "rose-bands-stats-compact" for v in ("ddpm", "fm", "ldm", "cddpm")},
    ),
}


def family_methods() -> str:
    """Which detection method each built-in family takes when none is named, for a help text."""
    by_method: dict[str, list[str]] = {}
    for name, opts in TRAIN_OPTIONS.items():
        for method in dict.fromkeys(opts.varieties.values()):
            kinds = [v for v, m in opts.varieties.items() if m == method]
            listed = ", ".join(kinds[:-1]) + " and " + kinds[-1] if len(kinds) > 1 else kinds[0]
            by_method.setdefault(method, []).append(f"{name} {listed} models")
        if opts.method != PAPER_METHOD:
            by_method.setdefault(opts.method, []).append(f"other {name} models" if opts.varieties else name)
    each = [f"{method} for {' and '.join(names)}" for method, names in by_method.items()]
    return f"{', '.join(each)}, else {PAPER_METHOD}"


def family_counts() -> str:
    """The (fit, statistics) images of the built-in families whose counts differ from ``FIT_COUNTS``, for
    a help text."""
    own = [
        f"{n} {o.fit_counts[0]} + {o.fit_counts[1]}"
        for n, o in TRAIN_OPTIONS.items()
        if o.fit_counts != FIT_COUNTS
    ]
    return ", ".join(own) if own else "none differs"
