"""``rose bench``: the paper's tables and figures as reports; its options and runner, which the repository's
``python -m research`` reuses for the experiments beyond the paper."""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roseood import validation as v
from roseood.cli.common import add_data_dir, add_device, add_quiet, checked_output, csv_list
from roseood.errors import RoseError, RoseWarning

if TYPE_CHECKING:
    from roseood.bench import Experiment, Profile

# The commands this group adds and their one-line help: `rose --help` lists them without building them.
COMMANDS = {
    "bench": "regenerate the paper's tables and figures (reports with paper | ours | Δ)",
}
# The experiments beyond the paper, in the repository's research/ (python -m research, not installed): named
# here only so that `rose bench NAME` says where NAME is (tests/research checks the list against research/).
RESEARCH = ("ablation", "diffusion", "diffusion-zoo", "diffusion-kinds", "diffusion-defaults", "near-ood")


def cmd_bench(args: argparse.Namespace) -> None:
    from roseood.bench import EXPERIMENTS

    moved = [name for name in args.experiments if name in RESEARCH]
    if moved:
        raise RoseError(
            f"{', '.join(moved)}: beyond the paper, not in rose bench; from a checkout of the repository run "
            f"python -m research {' '.join(moved)}"
        )
    run_bench(args, EXPERIMENTS, "rose bench")
    if args.list or not args.experiments:
        print(f"beyond the paper ({', '.join(RESEARCH)}): python -m research, in a repository checkout")


def run_bench(
    args: argparse.Namespace,
    experiments: Mapping[str, Experiment],
    command: str,
    profile: Callable[[str], Profile] | None = None,
) -> None:
    """List ``experiments`` (``--list`` or none named) or run the named ones (``all``: every one) with the
    options of ``add_bench_options``; ``profile``: the profile of a name (the bench's ``get_profile``)."""
    from roseood.bench import Workspace, get_profile, run_experiment
    from roseood.bench.workspace import DEFAULT_DATASETS, DEFAULT_MODELS

    if args.list or not args.experiments:
        print(f"experiments ({command} NAME [NAME ...] or all):")
        width = max(map(len, experiments))
        for name, exp in experiments.items():
            print(f"  {name:<{width}} {exp.paper_ref:<20} {exp.title}")
        return
    names = list(experiments) if args.experiments == ["all"] else args.experiments
    v.check_names(",".join(names), experiments, "experiment")
    ws = Workspace(
        root=Path(args.out),
        profile=(profile or get_profile)(args.profile),
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
        report = run_experiment(name, ws, experiments)
        used |= set(ws.trained)
        print(f"{name}: {report} ({(time.time() - t0) / 60:.1f} min)")
    for recipe in sorted(set(ws.given) - used):
        warnings.warn(f"--model-file {recipe}: no experiment used a model of that name", RoseWarning, 2)
    print(f"index: {ws.root / 'index.html'}")


def register(sub: Any) -> None:
    """Add ``bench`` to the ``rose`` sub-parsers ``sub``."""
    p = sub.add_parser("bench", help=COMMANDS["bench"])
    add_bench_options(p)
    p.set_defaults(func=cmd_bench)


def add_bench_options(p: argparse.ArgumentParser) -> None:
    """The experiment names and every option ``run_bench`` reads."""
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
        help="in-distribution sets to include (fashion_mnist, cifar10; unset: both), e.g. table3-cifar10",
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


def _model_file(text: str) -> tuple[str, Path]:
    """``RECIPE=FILE`` → (recipe name, an existing file), refused in one line otherwise."""
    recipe, sep, file = text.partition("=")
    if not sep or not recipe or not file:
        raise argparse.ArgumentTypeError(f"{text!r}: expected RECIPE=FILE")
    if not Path(file).is_file():
        raise argparse.ArgumentTypeError(f"{file}: no such model file")
    return recipe, Path(file)
