"""``rose bench``: the paper's tables and figures (and the experiments beyond it) as reports."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from roseood import validation as v
from roseood.cli.common import add_data_dir, add_device, add_quiet, checked_output, csv_list

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
    )
    checked_output(args, args.out, folder=True)
    for name in names:
        t0 = time.time()
        report = run_experiment(name, ws)
        print(f"{name}: {report} ({(time.time() - t0) / 60:.1f} min)")
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
    add_data_dir(p)
    add_device(p)
    add_quiet(p)
    p.set_defaults(func=cmd_bench)
