"""Model commands: ``rose train FAMILY``, ``rose import-vae``, ``rose check-model``,
``rose export-diffusers``."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from roseood import validation as v
from roseood.catalogue import CHECKPOINT_EVERY_S, RESIZE_METHODS, TRAIN_OPTIONS, TrainOptions
from roseood.cli.common import (
    MODEL_MODULE_HELP,
    add_condition,
    add_data_args,
    add_device,
    add_model_args,
    add_overwrite,
    add_preset,
    add_quiet,
    checked_output,
    load_model_arg,
)
from roseood.errors import RoseError

SAMPLE_FORMATS = (".png", ".npz")  # `rose sample --out`: a grid to look at, or an image set to score
SAMPLE_HELP = (
    ".png: one grid of the images; .npz: the images as an array 'images' (uint8 N×C×H×W) that --data reads"
)
USER_MODEL = "module"  # `rose train module --model-module FILE.py:FACTORY`


# The commands this group adds and their one-line help: `rose --help` lists them without building them.
COMMANDS = {
    "train": "train a model family or your own model (per-epoch checkpoints, --resume)",
    "sample": "draw images from a DDPM (DDIM) or VAE: a PNG grid, or an .npz image set to score",
    "check-model": "dry run: which layers of a model ROSE can use, and why not (one tiny batch)",
    "export-diffusers": "save a diffusion model as a diffusers folder (DDPMPipeline.from_pretrained)",
    "import-vae": "convert the ROSE authors' released VAE (netE/netG .pth) to a roseood model",
}


def cmd_import_vae(args: argparse.Namespace) -> None:
    from roseood.models import load_authors_vae, save_model

    out = checked_output(args, args.out)
    model = load_authors_vae(args.encoder, args.decoder)
    save_model(model, out)
    print(f"wrote {out}: VAE {model.config()}")


def cmd_train(args: argparse.Namespace) -> None:
    from roseood.data import load_images
    from roseood.evaluation.splits import model_preprocessing
    from roseood.models import get_family, load_factory
    from roseood.models.base import RoseModel
    from roseood.models.resume import seeded
    from roseood.models.train import train

    checked_output(args, args.out)
    with seeded(args.seed):  # model initialisation and training repeat bit for bit
        model: RoseModel | None = None
        if args.kind == USER_MODEL:
            model, kind = load_factory(args.model_module), None
            prep = model_preprocessing(model)
            channels, size, resize = prep.channels, prep.size, prep.resize
        else:  # unset --size/--channels: from the data; the options checked before any image is read
            kind, channels, size, resize = args.kind, args.channels, args.size, args.resize
            family = get_family(args.kind)
            config = family.from_cli_arguments(args)
        data = load_images(
            args.data,
            split="train",
            n=args.subset,
            seed=args.seed,
            channels=channels,
            size=size,
            resize=resize,
            data_dir=args.data_dir,
        )
        data.state_preprocessing(always=True)
        held_out = _held_out(args, data.images.shape, resize) if args.held_out else None
        cfg, options = _train_settings(args, kind)
        labels = None
        if model is None:
            model = _built(family, config, data, args.out, cfg, options)
            labels = data.labels if "classes" in config else None  # a class-conditional model's
        print(f"training {args.kind} on {len(data)} images of {data.title}: {cfg.describe()}")
        t0 = time.time()
        train(
            model, data.images, cfg, args.out, held_out=held_out, curve=args.curve, labels=labels, **options
        )
    print(f"wrote {args.out} after {time.time() - t0:.0f} s in this run")


def _train_settings(args: argparse.Namespace, kind: str | None) -> tuple[Any, dict[str, Any]]:
    """The ``TrainConfig`` of ``rose train``'s options (the family's defaults where unset) and the
    keywords of ``train`` every stage of a run shares (resume, device, progress, budget)."""
    from roseood import distributed
    from roseood.models.train import TrainConfig

    cfg = TrainConfig.for_model(
        kind,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup,
        grad_clip=args.grad_clip,
        perturb=args.perturb,
        seed=args.seed,
        hflip=not args.no_flip,
    )
    options = {
        "resume": args.resume,
        "device": distributed.device(args.device),
        "overwrite": args.overwrite,
        "progress": not args.quiet,
        "budget": args.budget * 60 if args.budget else None,
        "checkpoint_every": args.checkpoint_minutes * 60 if args.checkpoint_minutes else None,
    }
    return cfg, options


def _built(
    family: Any, config: dict[str, Any], data: Any, out: str, cfg: Any, options: dict[str, Any]
) -> Any:
    """A fresh model of ``family`` for the loaded images; a latent model's VQ-VAE trained first (its own
    checkpoint beside ``out``) and frozen in it."""
    stage = config.pop("first_stage", None)
    if stage is None:
        return family.build_for(data, **config)
    from roseood.models.diffusion import as_diffusion_model
    from roseood.models.diffusion.stages import first_stage_path, train_first_stage

    print(f"first stage: a VQ-VAE on the images ({stage}), checkpoint {first_stage_path(out)}")
    config["autoencoder"], weights = train_first_stage(data.images, stage, out, cfg, **options)
    model = as_diffusion_model(family.build_for(data, **config), "--autoencoder")
    assert model.autoencoder is not None  # built from the config just given
    model.autoencoder.net.load_state_dict(weights)
    return model


def _held_out(args: argparse.Namespace, shape: tuple[int, ...], resize: str) -> Any:
    """``--held-out N``: the first N test images of the named training set (of its classes, ``@7``; the
    same for every seed and machine), read as the training images were; a set without a test split, or
    named by another split, is refused in one line."""
    from roseood.data import load_images
    from roseood.data.registry import list_datasets, locate, split_of

    named = locate(args.data, split="train", data_dir=args.data_dir)  # what the training images are
    source = split_of(args.data, "test")  # of the same classes
    if named is None or named.split != "train" or source is None:
        raise RoseError(
            f"--held-out reads the test split of a named dataset trained on its training split "
            f"({', '.join(list_datasets())}); {args.data!r} is not one, so held-out images could overlap "
            "the training images"
        )
    test = load_images(
        source, channels=shape[1], size=shape[-1], resize=resize, data_dir=args.data_dir
    ).images
    if len(test) < args.held_out:
        raise RoseError(f"--held-out {args.held_out}: the test split of {args.data} has {len(test)}")
    return test[: args.held_out]


def cmd_check_model(args: argparse.Namespace) -> None:
    from roseood.contracts import Describes, Named
    from roseood.curvature import format_layer_report
    from roseood.models.base import model_name
    from roseood.models.check import check_model

    model = load_model_arg(args)
    name = model.name if isinstance(model, Named) and model.name else model_name(model)
    print(f"model: {name}, {model.input_kind} inputs of shape {model.input_shape}")
    if isinstance(model, Describes):
        print(model.describe())
    sets = model.layer_sets()
    counts = ", ".join(f"{set_name} ({len(names)})" for set_name, names in sets.items())
    print(f"layer sets for --layers, the first the default: {counts}; last:N takes the last N layers")
    reports = check_model(model)
    reported = {r.name for r in reports}
    unlisted = [n for n in dict.fromkeys(n for names in sets.values() for n in names) if n not in reported]
    if unlisted:  # a set naming modules without parameters of their own: shown, as the table cannot
        print(f"in a set, not a parameterised layer: {', '.join(unlisted)}")
    print()
    print(format_layer_report(reports, sets))
    print(f"\n{sum(r.usable for r in reports)} of {len(reports)} parameterised layers usable by ROSE")


def cmd_export_diffusers(args: argparse.Namespace) -> None:
    from roseood.models.diffusion import as_diffusion_model, export_diffusers

    out = checked_output(args, args.out, folder=True)
    export_diffusers(as_diffusion_model(load_model_arg(args), f"export-diffusers {args.model}").cpu(), out)
    print(f"wrote the diffusers pipeline folder {out} (unet/, scheduler/, model_index.json, roseood.json)")


def cmd_sample(args: argparse.Namespace) -> None:
    from roseood.contracts import Generates
    from roseood.evaluation.gallery import save_grid
    from roseood.memory import check_memory
    from roseood.models.base import model_name
    from roseood.serialization import save_npz

    if Path(args.out).suffix.lower() not in SAMPLE_FORMATS:  # refused before the model loads
        raise RoseError(f"--out {args.out}: name a {' or '.join(SAMPLE_FORMATS)} file ({SAMPLE_HELP})")
    out = checked_output(args, args.out)
    model = load_model_arg(args)
    if not isinstance(model, Generates):
        raise RoseError(
            f"sample: {args.model} is a {model_name(model)} model, which roseood cannot draw images from "
            "(a DDPM or a VAE can)"
        )
    options = {} if args.steps is None else {"steps": args.steps}
    pixels = math.prod(model.input_shape or (1,))
    check_memory(  # the noise (float32) and the images (uint8) of every draw, and the grid
        args.images * pixels * 6,
        f"{args.images:,} images of {model.input_shape} drawn at once",
        hint="draw fewer --images",
    )
    images = model.generate(args.images, seed=args.seed, progress=not args.quiet, **options).numpy()
    if out.suffix.lower() == ".npz":
        save_npz(out, {"images": images})
    else:
        save_grid(images, out)
    print(f"wrote {out}: {args.images} images drawn from the {model_name(model)} model (seed {args.seed})")


def _add_train_args(p: argparse.ArgumentParser) -> None:
    """Options every `rose train FAMILY` shares (architecture options come from the family)."""
    p.add_argument(
        "--data", default="fashion_mnist", help="dataset name (train split), .npz file or image folder"
    )
    p.add_argument("--out", required=True, help="model checkpoint to write (and resume from)")
    p.add_argument("--resume", action="store_true", help="continue the run stored in --out (same settings)")
    add_overwrite(p)
    p.add_argument("--epochs", type=v.count, help="epochs (unset: the family's, e.g. VAE 100, Glow 50)")
    p.add_argument("--subset", type=v.count, help="train on this many images (deterministic by --seed)")
    p.add_argument("--lr", type=v.positive_float, help="learning rate (unset: the family's, e.g. VAE 1e-3)")
    p.add_argument("--weight-decay", type=v.non_negative_float, help="weight decay (unset: 0)")
    p.add_argument("--warmup", type=v.non_negative, help="learning-rate warm-up steps (unset: 0)")
    p.add_argument("--grad-clip", type=v.non_negative_float, help="max gradient norm (unset: no clipping)")
    p.add_argument(
        "--perturb", help="train on perturbed inputs, e.g. random:0.3 (Likelihood-Ratio background)"
    )
    p.add_argument("--no-flip", action="store_true", help="disable random horizontal flips")
    p.add_argument(
        "--budget",
        type=v.positive_float,
        metavar="MINUTES",
        help="train at most this long: stop when it is spent, at the next batch, with a checkpoint "
        "(--resume continues from that batch)",
    )
    p.add_argument(
        "--checkpoint-minutes",
        type=v.non_negative_float,
        default=CHECKPOINT_EVERY_S / 60,
        metavar="MINUTES",
        help="also checkpoint inside an epoch this often, so --resume loses at most this much (0: only at "
        "epoch ends); Ctrl-C or SIGTERM checkpoints at the next batch and stops",
    )
    p.add_argument(
        "--held-out",
        type=v.count,
        metavar="N",
        help="after every epoch, score the first N images of the named dataset's test split (a DDPM: "
        "held-out ε-MSE and variational bound in bits/dim; other models: NLL in bits/dim)",
    )
    p.add_argument(
        "--curve", metavar="CSV", help="write each epoch's figures and the training seconds so far here"
    )
    add_data_args(p, seed=0)
    add_preset(p)
    add_quiet(p)
    p.set_defaults(func=cmd_train)


def _add_image_args(p: argparse.ArgumentParser) -> None:
    """The image size and colour a family is built for: the data's unless given."""
    p.add_argument(
        "--channels", type=v.channels, help="image channels, 1 or 3 (unset: 3 if any image is colour)"
    )
    p.add_argument(
        "--size", type=v.count, help="image size S: S×S pixels (unset: the data's most common size)"
    )
    p.add_argument(
        "--resize",
        choices=RESIZE_METHODS,
        default="crop",
        help="how images of another size are brought to S×S: crop (shorter side to S, centre crop, "
        "the paper's) or stretch",
    )


def trainable_families() -> dict[str, TrainOptions]:
    """The families ``rose train`` offers: the built-in ones from the torch-free catalogue, and those a
    plug-in registered in this process (which has then imported the family registry, torch with it)."""
    found = dict(TRAIN_OPTIONS)
    registry = sys.modules.get("roseood.models.families")
    if registry is not None:
        for f in registry.FAMILIES.values():
            if f.trainable:
                found[f.name] = TrainOptions(f.help, f.add_cli_arguments, f.from_cli_arguments)
    return found


def register(sub: Any) -> None:
    """Add the model commands to the ``rose`` sub-parsers ``sub``."""
    p = sub.add_parser("train", help=COMMANDS["train"])
    families = p.add_subparsers(
        dest="kind", required=True, metavar="FAMILY", help="model family (`rose train FAMILY --help`)"
    )
    for name, options in trainable_families().items():
        fp = families.add_parser(name, help=options.help)
        _add_train_args(fp)
        _add_image_args(fp)
        options.add_arguments(fp)
    fp = families.add_parser(
        USER_MODEL, help="your own model: --model-module FILE.py:FACTORY (trains its NLL)"
    )
    _add_train_args(fp)
    fp.add_argument("--model-module", required=True, metavar="FILE.py:FACTORY", help=MODEL_MODULE_HELP)

    p = sub.add_parser("sample", help=COMMANDS["sample"])
    p.add_argument("--model", required=True, help="a DDPM or VAE (checkpoint, diffusers folder or zoo name)")
    p.add_argument("--out", required=True, help=f"file to write: {SAMPLE_HELP}")
    p.add_argument("--images", type=v.count, default=64, help="images to generate")
    p.add_argument("--steps", type=v.count, help="DDIM steps (DDPMs only; unset: 50)")
    p.add_argument("--seed", type=v.seed, default=0, help="seed of the starting noise")
    add_condition(p, "drawn", "a class drawn at random for each image")
    add_device(p)
    add_overwrite(p)
    add_quiet(p)
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("check-model", help=COMMANDS["check-model"])
    add_model_args(p)
    add_device(p)
    p.set_defaults(func=cmd_check_model)

    p = sub.add_parser("export-diffusers", help=COMMANDS["export-diffusers"])
    p.add_argument(
        "--model", required=True, help="a diffusion model (roseood checkpoint or diffusers folder)"
    )
    p.add_argument("--out", required=True, help="folder to write")
    add_overwrite(p)
    p.set_defaults(func=cmd_export_diffusers, device="cpu")

    p = sub.add_parser("import-vae", help=COMMANDS["import-vae"])
    p.add_argument("--encoder", required=True, help="the authors' netE .pth file")
    p.add_argument("--decoder", required=True, help="the authors' netG .pth file")
    p.add_argument("--out", required=True, help="roseood model checkpoint to write")
    add_overwrite(p, "--force")
    p.set_defaults(func=cmd_import_vae)
