"""``rose bench``: the paper's tables and figures (and the experiments beyond it) as reports."""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

from roseood import validation as v
from roseood.cli.common import add_data_dir, add_device, add_quiet, checked_output, csv_list
from roseood.errors import RoseWarning

# The commands this group adds and their one-line help: `rose --help` lists them without building them.
COMMANDS = {
    "bench": "regenerate the paper's tables and figures (reports with paper | ours | Δ)",
}


def cmd_bench(args: argparse.Namespace) -> None:
    from roseood.bench import EXPERIMENTS, Workspace, get_profile, run_experiment
    from roseood.bench.workspace import DEFAULT_DATASETS, DEFAULT_MODELS

    if args.list or not args.experiments:
        print("experiments (rose bench NAME [NAME ...] or all):")
        for name, exp in EXPERIMENTS.items():
            print(f"  {name:<12} {exp.paper_ref:<20} {exp.title}")
        return
    names = list(EXPERIMENTS) if args.experiments == ["all"] else args.experiments
    v.check_names(",".join(names), EXPERIMENTS, "experiment")
    ws = Workspace(
        root=Path(args.out),
        profile=get_profile(args.profile),
        data_dir=args.data_dir,
        device=args.device,
        progress=not args.quiet,
        models=tuple(csv_list(args.models)) if args.models else DEFAULT_MODELS,
        datasets=tuple(csv_list(args.datasets)) if args.datasets else DEFAULT_DATASETS,
        given=dict(args.model_file or []),
    )
    checked_output(args, args.out, folder=True)
    used: set[str] = set()  # the models the experiments used, to name a --model-file none did
    for name in names:
        t0 = time.time()
        report = run_experiment(name, ws)
        used |= set(ws.trained)
        print(f"{name}: {report} ({(time.time() - t0) / 60:.1f} min)")
    for recipe in sorted(set(ws.given) - used):
        warnings.warn(f"--model-file {recipe}: no experiment used a model of that name", RoseWarning, 2)
    print(f"index: {ws.root / 'index.html'}")


def register(sub: Any) -> None:
    """Add ``bench`` to the ``rose`` sub-parsers ``sub``."""
    p = sub.add_parser("bench", help=COMMANDS["bench"])
    p.add_argument("experiments", nargs="*", help="experiment names, or all (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--profile", default="cpu", help="smoke (seconds), cpu (this machine) or paper (GPU)")
    p.add_argument("--out", default="results/bench", help="results folder (models are cached in OUT/cache)")
    p.add_argument(
        "--models",
        help="generative models to include (vae, glow; table2 also pixelcnn; unset: vae,glow); a "
        "selection other than the default reports into its own folder, e.g. table2-pixelcnn",
    )
    p.add_argument(
        "--datasets",
        help="in-distribution sets to include (fashion_mnist, cifar10; unset: both), e.g. ablation-cifar10",
    )
    p.add_argument(
        "--model-file",
        action="append",
        type=_model_file,
        metavar="RECIPE=FILE",
        help="use FILE in place of training the model RECIPE (a name in a report's Models table), e.g. "
        "vae-fashion_mnist-c1-ngf32-nz100-nall-s0=src/roseood/assets/fmnist_vae_ngf32.pt, the authors' "
        "released VAE; repeatable",
    )
    add_data_dir(p)
    add_device(p)
    add_quiet(p)
    p.set_defaults(func=cmd_bench)


def _model_file(text: str) -> tuple[str, Path]:
    """``RECIPE=FILE`` → (recipe name, an existing file), refused in one line otherwise."""
    recipe, sep, file = text.partition("=")
    if not sep or not recipe or not file:
        raise argparse.ArgumentTypeError(f"{text!r}: expected RECIPE=FILE")
    if not Path(file).is_file():
        raise argparse.ArgumentTypeError(f"{file}: no such model file")
    return recipe, Path(file)
