"""The ``rose`` command line: thin wrappers that parse arguments, call the library and print."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from roseood.errors import RoseError

if TYPE_CHECKING:
    from roseood.evaluation.evaluate import EvalSpec
    from roseood.evaluation.result import EvaluationResult
    from roseood.models.base import RoseModel


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _model(args: argparse.Namespace) -> RoseModel:
    """The model of ``--model`` (a checkpoint) and/or ``--model-module`` (user code; ``--model`` then
    holds its weights: a roseood checkpoint or a plain state_dict file)."""
    from roseood.models import load_factory, load_model, load_weights

    module = getattr(args, "model_module", None)
    if module is None and args.model is None:
        raise RoseError("name the model: --model CHECKPOINT and/or --model-module FILE.py:FACTORY")
    if module is None:
        model = load_model(args.model)
    else:
        model = load_factory(module)
        if args.model is not None:
            model = load_weights(model, args.model)
    return model.to(args.device)


def cmd_import_vae(args: argparse.Namespace) -> None:
    from roseood.models import load_authors_vae, save_model

    out = Path(args.out)
    if out.exists() and not args.force:
        raise RoseError(f"{out} exists; pass --force to overwrite it")
    model = load_authors_vae(args.encoder, args.decoder)
    save_model(model, out)
    print(f"wrote {out}: VAE {model.config()}")


def cmd_train(args: argparse.Namespace) -> None:
    from roseood.data import load_images
    from roseood.evaluation.evaluate import image_options
    from roseood.models import get_family, load_factory
    from roseood.models.train import TrainConfig, train

    model: RoseModel
    if args.kind == USER_MODEL:
        model, kind = load_factory(args.model_module), None
        channels, size = image_options(model)
    else:
        family = get_family(args.kind)
        model, kind = family.build(args.channels, **family.from_cli_arguments(args)), args.kind
        channels, size = args.channels, 32
    data = load_images(
        args.data,
        split="train",
        n=args.subset,
        seed=args.seed,
        channels=channels,
        size=size,
        data_dir=args.data_dir,
    )
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
    print(f"training {args.kind} on {len(data)} images of {data.name} ({data.source}); {cfg}")
    t0 = time.time()
    train(model, data.images, cfg, args.out, resume=args.resume, device=args.device)
    print(f"wrote {args.out} after {time.time() - t0:.0f} s in this run")


def _spec(args: argparse.Namespace, methods: list[str]) -> EvalSpec:
    from roseood.evaluation.evaluate import EvalSpec

    kwargs: dict[str, dict[str, Any]] = {m: {} for m in methods}
    if args.background:
        from roseood.models import load_model

        kwargs["lratio"] = {"background": load_model(args.background).to(args.device)}
    from roseood.detectors import METHODS, ROSE

    for m in methods:
        if m in METHODS and issubclass(METHODS[m][0], ROSE) and args.layers:
            kwargs[m]["layers"] = args.layers
        if m.startswith("rose") and args.aggregate:
            kwargs[m]["aggregate"] = args.aggregate
    return EvalSpec(
        in_data=args.in_data,
        ood=_csv(getattr(args, "ood", "")),
        methods=methods,
        fit_data=args.fit_data,
        fit_samples=args.fit_samples,
        stats_samples=args.stats_samples,
        test_samples=getattr(args, "test_samples", 0),
        seed=args.seed,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        brightness=getattr(args, "brightness", 1.0),
        detector_kwargs=kwargs,
    )


def print_table(result: EvaluationResult) -> None:
    from roseood.evaluation.metrics import METRICS

    metrics = result.metrics()
    for metric in METRICS:
        print(f"\n{metric.upper()}  (in-distribution: {result.in_name}; in-distribution = positive class)")
        width = max(12, *(len(m) for m in result.methods))
        print(f"{'OOD set':<22}" + "".join(f"{m:>{width + 2}}" for m in result.methods))
        for s in result.ood_sets:
            print(f"{s:<22}" + "".join(f"{metrics[m][s][metric]:>{width + 2}.3f}" for m in result.methods))
        for s, why in result.missing.items():
            print(f"{s:<22}  no data ({why})")
    print(
        "\nimages/s (scoring the in-distribution test set): "
        + ", ".join(f"{m} {v:.1f}" for m, v in result.images_per_second.items())
    )


def cmd_evaluate(args: argparse.Namespace) -> None:
    from roseood.evaluation.evaluate import evaluate

    model = _model(args)
    result = evaluate(model, _spec(args, _csv(args.methods)), progress=not args.quiet)
    print(json.dumps({k: v for k, v in result.settings.items() if k != "model_config"}, indent=1))
    print_table(result)
    if args.json:
        result.write_json(args.json)
        print(f"wrote {args.json}")
    if args.report:
        from roseood.evaluation.report import write_report

        print(f"wrote {write_report(result, Path(args.report))}")


def cmd_fit(args: argparse.Namespace) -> None:
    from roseood.evaluation.evaluate import fit_detector, load_fit_images

    model = _model(args)
    spec = _spec(args, [args.method])
    fit = load_fit_images(spec, model)
    det = fit_detector(args.method, model, fit, spec, progress=True)
    det.save(args.out)
    print(f"wrote {args.out}: {args.method} fitted on {len(fit)} images of {fit.name}")


def cmd_score(args: argparse.Namespace) -> None:
    from roseood.data import load_images
    from roseood.detectors import Detector
    from roseood.evaluation.evaluate import image_options

    model = _model(args)
    channels, size = image_options(model)
    det = Detector.load(args.detector, model)
    if args.background:
        from roseood.detectors import LikelihoodRatio
        from roseood.models import load_model

        if isinstance(det, LikelihoodRatio):
            det.set_background(load_model(args.background).to(args.device))
    data = load_images(
        args.data,
        split=args.split,
        n=args.n,
        seed=args.seed,
        data_dir=args.data_dir,
        channels=channels,
        size=size,
    )
    det.progress = True
    scores = det.score(data.images)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "label", "score"])
        for i, (label, s) in enumerate(zip(data.labels, scores, strict=True)):
            w.writerow([i, int(label), f"{s:.6g}"])
    print(f"wrote {len(scores)} {det.method} scores for {data.name} ({data.source}) to {out}")


def layer_checks(model: RoseModel, batch: int = 2) -> list[tuple[str, str, str]]:
    """(name, type, verdict) for every module holding parameters: whether ROSE can take its per-sample
    gradients, and, for those it can, whether one forward/backward pass through ``rose_loss`` reaches it."""
    import torch
    from torch import nn

    from roseood.curvature import LayerGradients
    from roseood.curvature.grads import supports

    shape = model.input_shape
    if shape is None:
        raise RoseError(
            "check-model needs a model that declares its input_shape (wrap(..., input_shape=...))"
        )
    x = (
        torch.zeros(batch, *shape, dtype=torch.long)
        if model.input_kind == "tokens"
        else torch.full((batch, *shape), 0.5)
    )
    x = x.to(next(model.parameters()).device)
    model.eval()
    module_tree = cast(nn.Module, model)
    rows = []
    for name, module in model.named_modules():
        if not name or not any(True for _ in module.parameters(recurse=False)):
            continue
        verdict = "usable"
        if not supports(module):
            verdict = f"not usable: no per-sample gradient handler for {type(module).__name__}"
        else:
            try:
                LayerGradients(module_tree, [name])(model.rose_loss, x)
            except RoseError as exc:
                verdict = f"not usable: {exc}"
        rows.append((name, type(module).__name__, verdict))
    return rows


def cmd_check_model(args: argparse.Namespace) -> None:
    from roseood.models.base import model_name

    model = _model(args)
    name = getattr(model, "name", None) or model_name(model)
    print(f"model: {name}, {model.input_kind} inputs of shape {model.input_shape}")
    for set_name, names in model.layer_sets().items():
        print(f"layer set {set_name!r}: {', '.join(names) or '(empty)'}")
    rows = layer_checks(model)
    width = max([5, *(len(r[0]) for r in rows)])
    print(f"\n{'layer':<{width}}  {'type':<18} ROSE")
    for name, kind, verdict in rows:
        print(f"{name:<{width}}  {kind:<18} {verdict}")
    print(f"\n{sum(r[2] == 'usable' for r in rows)} of {len(rows)} parameterised layers usable by ROSE")


def cmd_datasets(args: argparse.Namespace) -> None:
    from roseood.data import DATASETS, resolve_data_dir

    root = resolve_data_dir(args.data_dir)
    print(f"data directory: {root}")
    for name, spec in DATASETS.items():
        if spec.generated:
            state = "generated"
        else:
            state = ", ".join(
                f"{s}: {'ok' if (root / spec.filename(s)).exists() else 'missing'}" for s in spec.splits
            )
        print(f"  {name:<14} {state:<34} {spec.description}")


def cmd_demo(args: argparse.Namespace) -> None:
    from roseood.demo import run_demo

    run_demo(fit_samples=args.fit_samples, test_samples=args.test_samples)


def cmd_bench(args: argparse.Namespace) -> None:
    from roseood.bench import EXPERIMENTS, Workspace, get_profile, run_experiment

    if args.list or not args.experiments:
        print("experiments (rose bench NAME [NAME ...] or all):")
        for name, exp in EXPERIMENTS.items():
            print(f"  {name:<12} {exp.paper_ref:<20} {exp.title}")
        return
    names = list(EXPERIMENTS) if args.experiments == ["all"] else args.experiments
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise RoseError(f"unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(EXPERIMENTS)}")
    ws = Workspace(
        root=Path(args.out),
        profile=get_profile(args.profile),
        data_dir=args.data_dir,
        device=args.device,
        progress=not args.quiet,
        models=tuple(_csv(args.models)),
        datasets=tuple(_csv(args.datasets)),
    )
    for name in names:
        t0 = time.time()
        report = run_experiment(name, ws)
        print(f"{name}: {report} ({(time.time() - t0) / 60:.1f} min)")
    print(f"index: {ws.root / 'index.html'}")


USER_MODEL = "module"  # `rose train module --model-module FILE.py:FACTORY`
MODEL_MODULE_HELP = (
    "Python code building your model: a function returning roseood.wrap(...) or a GenerativeModel"
)


def _add_train_args(p: argparse.ArgumentParser) -> None:
    """Options every `rose train FAMILY` shares (architecture options come from the family)."""
    p.add_argument(
        "--data", default="fashion_mnist", help="dataset name (train split), .npz file or image folder"
    )
    p.add_argument("--out", required=True, help="model checkpoint to write (and resume from)")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--epochs", type=int)
    p.add_argument("--subset", type=int, help="train on this many images (deterministic by --seed)")
    p.add_argument("--lr", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--warmup", type=int, help="learning-rate warm-up steps")
    p.add_argument("--grad-clip", type=float, help="max gradient norm")
    p.add_argument(
        "--perturb", help="train on perturbed inputs, e.g. random:0.3 (Likelihood-Ratio background)"
    )
    p.add_argument("--no-flip", action="store_true", help="disable random horizontal flips")
    _add_data_args(p)
    p.set_defaults(func=cmd_train, seed=0)


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir", help="folder of dataset .npz files (default: $ROSEOOD_DATA or ~/.cache/roseood/data)"
    )
    p.add_argument("--seed", type=int, default=2021, help="seed for subsampling and generated sets")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--batch-size", type=int, default=64)


def build_parser() -> argparse.ArgumentParser:
    from roseood.models.families import FAMILIES

    parser = argparse.ArgumentParser(prog="rose", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "import-vae", help="convert the ROSE authors' released VAE (netE/netG .pth) to a roseood model"
    )
    p.add_argument("--encoder", required=True)
    p.add_argument("--decoder", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.set_defaults(func=cmd_import_vae)

    p = sub.add_parser(
        "train", help="train a model family or your own model (per-epoch checkpoints, --resume)"
    )
    families = p.add_subparsers(dest="kind", required=True, metavar="FAMILY")
    for family in FAMILIES.values():
        if family.trainable:
            fp = families.add_parser(family.name, help=family.help)
            _add_train_args(fp)
            fp.add_argument("--channels", type=int, default=1)
            family.add_cli_arguments(fp)
    fp = families.add_parser(
        USER_MODEL, help="your own model: --model-module FILE.py:FACTORY (trains its NLL)"
    )
    _add_train_args(fp)
    fp.add_argument("--model-module", required=True, metavar="FILE.py:FACTORY", help=MODEL_MODULE_HELP)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", help="roseood model checkpoint (with --model-module: its weights)")
        p.add_argument("--model-module", metavar="FILE.py:FACTORY", help=MODEL_MODULE_HELP)

    def eval_args(p: argparse.ArgumentParser) -> None:
        model_args(p)
        p.add_argument(
            "--in", dest="in_data", default="fashion_mnist", help="in-distribution set (test split)"
        )
        p.add_argument("--fit-data", help="images to fit detectors on (default: training split of --in)")
        p.add_argument("--fit-samples", type=int, default=10000, help="images for the Fisher / detector fit")
        p.add_argument(
            "--stats-samples", type=int, default=2000, help="further images for ROSE layer statistics"
        )
        p.add_argument("--background", help="background model checkpoint for the lratio method")
        p.add_argument(
            "--layers", help="ROSE layer set of the model (VAE: encoder, decoder, all; Glow: invconv, all)"
        )
        p.add_argument(
            "--aggregate",
            metavar="NAME[:k=v,...]",
            help="how ROSE combines layer scores: relu-norm (the paper's, default; beta, p), max-z, log-z "
            "(p, beta), gaussian, gmm (k, reg, seed); e.g. relu-norm:beta=3 or gmm:k=4",
        )
        _add_data_args(p)

    p = sub.add_parser("evaluate", help="fit detectors and compare them on in-distribution vs OOD sets")
    eval_args(p)
    p.add_argument(
        "--ood",
        default="mnist,notmnist,omniglot,noise,constant",
        help="comma-separated OOD sets: names, .npz files or image folders",
    )
    p.add_argument("--methods", default="rose-ekfac,rose-diag,nll")
    p.add_argument("--test-samples", type=int, default=5000)
    p.add_argument("--brightness", type=float, default=1.0, help="brightness factor applied to the OOD sets")
    p.add_argument("--json", help="write settings and metrics as JSON")
    p.add_argument("--report", help="write a Markdown report with ROC curves and score histograms here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("fit", help="fit one detector and save it to a file")
    eval_args(p)
    p.add_argument("--method", default="rose-ekfac")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("score", help="write one score per image (CSV) with a saved detector")
    model_args(p)
    p.add_argument("--detector", required=True, help="file written by `rose fit`")
    p.add_argument("--data", required=True, help="dataset name, .npz file or image folder")
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=int, help="score a deterministic subset of this size")
    p.add_argument("--out", required=True, help="CSV file")
    p.add_argument("--background", help="background model, for a saved lratio detector")
    _add_data_args(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser(
        "bench", help="regenerate the paper's tables and figures (reports with paper | ours | Δ)"
    )
    p.add_argument("experiments", nargs="*", help="experiment names, or all (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--profile", default="cpu", help="smoke (seconds), cpu (this machine) or paper (GPU)")
    p.add_argument("--out", default="results/bench", help="results folder (models are cached in OUT/cache)")
    p.add_argument("--models", default="vae,glow", help="generative models to include")
    p.add_argument("--datasets", default="fashion_mnist,cifar10", help="in-distribution sets to include")
    p.add_argument("--data-dir")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "check-model", help="dry run: which layers of a model ROSE can use, and why not (one tiny batch)"
    )
    model_args(p)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.set_defaults(func=cmd_check_model)

    p = sub.add_parser("datasets", help="list the named datasets and whether their files are present")
    p.add_argument("--data-dir")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser(
        "demo", help="offline demo: the authors' FMNIST VAE, ROSE vs NLL on Fashion-MNIST vs MNIST"
    )
    p.add_argument("--fit-samples", type=int, default=2000)
    p.add_argument("--test-samples", type=int, default=1000)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except RoseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
