"""Commands that show what is there: ``rose datasets``, ``rose zoo`` and the offline ``rose demo``."""

from __future__ import annotations

import argparse
from typing import Any

from roseood import validation as v
from roseood.cli.common import add_data_dir, add_quiet

# The commands this group adds and their one-line help: `rose --help` lists them without building them.
COMMANDS = {
    "demo": "offline demo: the authors' FMNIST VAE, ROSE vs NLL on Fashion-MNIST vs MNIST",
    "zoo": "list the reference zoo's models and where they are, or show one model's card",
    "datasets": "list the named datasets and whether their files are present",
}


def cmd_datasets(args: argparse.Namespace) -> None:
    from roseood.data import DATASETS, resolve_data_dir
    from roseood.data.download import DOWNLOADS

    root = resolve_data_dir(args.data_dir)
    print(f"data directory: {root}")
    for name, spec in DATASETS.items():
        if spec.generated:
            state = "generated"
        else:
            fetched = DOWNLOADS[name].resources if name in DOWNLOADS else {}
            state = ", ".join(
                f"{s}: "
                + ("ok" if (root / spec.filename(s)).exists() else "download" if s in fetched else "missing")
                for s in spec.splits
            )
        print(f"  {name:<14} {state:<36} {spec.description}")
    print("download: fetched on first use; missing: its file placed by hand (docs/data.md says where from)")
    print("NAME:train reads a split, NAME@7 (@0-6+8-9) keeps those classes, NAME+jpeg75 adds a JPEG history")


def cmd_zoo(args: argparse.Namespace) -> None:
    from roseood.models.zoo import (
        HOW,
        ZOO_KINDS,
        ZOO_NAMES,
        model_bytes,
        model_card,
        zoo_data,
        zoo_dir,
        zoo_model,
    )

    if args.name:
        name, _, inner = args.name.partition("/")  # sd-fmnist-s0/sneaker-lora: its model's card
        if inner and name in ZOO_NAMES:
            zoo_model(name, inner)  # one line where the model holds no such folder
        print(model_card(name if inner else args.name))
        return
    root = zoo_dir()
    print(f"zoo folder: {root}")
    missing = [name for name in ZOO_NAMES if not (root / name).is_dir()]
    for name in ZOO_NAMES:
        state = "missing " if name in missing else f"{model_bytes(root / name) / 1e6:5.1f} MB"
        print(f"  {name:<16} {zoo_data(name):<14} {state}  {ZOO_KINDS[name.split('-')[0]]}")
    if missing:
        print(f"missing models: {HOW}")
    print("rose zoo NAME shows a model's card; rose check-model --model NAME checks and lists its layers")


def cmd_demo(args: argparse.Namespace) -> None:
    from roseood.demo import FOLDERS, run_demo, write_folders

    if args.folders is not None:
        from roseood.serialization import check_output

        root = check_output(
            args.folders, folder=True, markers=list(FOLDERS), hint="remove it or name another folder"
        )
        for name, what in write_folders(root).items():
            print(f"wrote {root / name}/: {what} (28×28 PNG)")
        return
    run_demo(fit_samples=args.fit_samples, test_samples=args.test_samples, progress=not args.quiet)


def register(sub: Any) -> None:
    """Add ``demo``, ``zoo`` and ``datasets`` to the ``rose`` sub-parsers ``sub``."""
    p = sub.add_parser("demo", help=COMMANDS["demo"])
    p.add_argument("--fit-samples", type=v.count, default=2000, help="Fashion-MNIST images for the Fisher")
    p.add_argument("--test-samples", type=v.count, default=1000, help="test images per set")
    p.add_argument(
        "--folders",
        metavar="DIR",
        help="instead of the demo, write the guides' example folders of PNG files into DIR from the "
        "shipped sample: clothes/ (1500 Fashion-MNIST training images), photos/ (150 Fashion-MNIST test "
        "images, 50 MNIST digits), held_out_clothes/ (200 other Fashion-MNIST test images), odd_images/ "
        "(200 other MNIST digits); an existing one is refused",
    )
    add_quiet(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("zoo", help=COMMANDS["zoo"])
    p.add_argument(
        "name",
        nargs="?",
        help="a zoo model (ddpm-fmnist-s0) or a folder in one (sd-fmnist-s0/sneaker-lora): its card",
    )
    p.set_defaults(func=cmd_zoo)

    p = sub.add_parser("datasets", help=COMMANDS["datasets"])
    add_data_dir(p)
    p.set_defaults(func=cmd_datasets)
