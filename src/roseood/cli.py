"""The ``rose`` command line: thin wrappers that parse arguments, call the library and print."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from roseood import validation as v
from roseood.errors import RoseError
from roseood.serialization import check_output

if TYPE_CHECKING:
    from torch import Tensor

    from roseood.evaluation.evaluate import EvalSpec
    from roseood.evaluation.result import AcrossModels, EvaluationResult
    from roseood.models.base import RoseModel


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _model(args: argparse.Namespace, path: str | None = None) -> RoseModel:
    """The model of ``--model`` (a checkpoint; ``path`` when it was given several times) and/or
    ``--model-module`` (user code; ``--model`` then holds its weights: a roseood checkpoint or a plain
    state_dict file)."""
    from roseood import distributed
    from roseood.models import load_factory, load_model, load_weights

    module = getattr(args, "model_module", None)
    path = path or args.model
    if module is None and path is None:
        raise RoseError("name the model: --model CHECKPOINT and/or --model-module FILE.py:FACTORY")
    if module is None:
        model = load_model(path)
    else:
        model = load_factory(module)
        if path is not None:
            model = load_weights(model, path)
    return model.to(distributed.device(args.device))


INPUT_OPTIONS = (
    "model",
    "detector",
    "background",
    "encoder",
    "decoder",
    "data",
    "in_data",
    "fit_data",
    "ood",
)


def _input_paths(args: argparse.Namespace) -> Iterator[Path]:
    """Every file or folder a command reads: path options as given and, for dataset names, their files."""
    from roseood.data import DATASETS, resolve_data_dir

    for option in INPUT_OPTIONS:
        value = getattr(args, option, None)
        items = value if isinstance(value, list) else _csv(value) if option == "ood" and value else [value]
        for item in (i for i in items if i):
            yield Path(item)
            spec = DATASETS.get(item.split(":")[0].strip().lower().replace("-", "_"))
            if spec is not None:
                yield from (resolve_data_dir(args.data_dir) / spec.filename(s) for s in spec.splits)


def _output(args: argparse.Namespace, path: str, *, folder: bool = False, marker: str | None = None) -> Path:
    """Check one output of this command before any work (see ``serialization.check_output``): never an
    input, replaced only with ``--overwrite``, its folder writable."""
    overwrite = getattr(args, "overwrite", False) or getattr(args, "resume", False)
    hint = "pass --resume to continue it, --overwrite to replace it" if "resume" in args else ""
    return check_output(
        path,
        inputs=_input_paths(args),
        overwrite=overwrite,
        folder=folder,
        marker=marker,
        hint=hint or "pass --overwrite to replace it",
    )


def cmd_import_vae(args: argparse.Namespace) -> None:
    from roseood.models import load_authors_vae, save_model

    out = _output(args, args.out)
    model = load_authors_vae(args.encoder, args.decoder)
    save_model(model, out)
    print(f"wrote {out}: VAE {model.config()}")


def cmd_train(args: argparse.Namespace) -> None:
    from roseood import distributed
    from roseood.data import load_images
    from roseood.evaluation.evaluate import model_preprocessing
    from roseood.models import get_family, load_factory
    from roseood.models.train import TrainConfig, seeded, train

    _output(args, args.out)
    with seeded(args.seed):  # model initialisation and training repeat bit for bit
        model: RoseModel | None = None
        if args.kind == USER_MODEL:
            model, kind = load_factory(args.model_module), None
            prep = model_preprocessing(model)
            channels, size, resize = prep.channels, prep.size, prep.resize
        else:  # unset --size/--channels: from the data
            kind, channels, size, resize = args.kind, args.channels, args.size, args.resize
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
        if model is None:
            family = get_family(args.kind)
            model = family.build_for(data, **family.from_cli_arguments(args))
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
        train(
            model,
            data.images,
            cfg,
            args.out,
            resume=args.resume,
            device=distributed.device(args.device),
            overwrite=args.overwrite,
            progress=not args.quiet,
        )
    print(f"wrote {args.out} after {time.time() - t0:.0f} s in this run")


def _spec(args: argparse.Namespace, methods: list[str]) -> EvalSpec:
    from roseood.evaluation.evaluate import EvalSpec

    kwargs: dict[str, dict[str, Any]] = {m: {} for m in methods}
    if args.background:
        from roseood import distributed
        from roseood.models import load_model

        device = distributed.device(args.device)
        kwargs["lratio"] = {"background": load_model(args.background).to(device)}
    from roseood.detectors import METHODS, ROSE

    for m in methods:
        if m in METHODS and issubclass(METHODS[m][0], ROSE):
            given = {k: getattr(args, k, None) for k in ("layers", "aggregate", "adjust")}
            kwargs[m] |= {k: v for k, v in given.items() if v}
    optional = {k: getattr(args, k) for k in ("test_samples", "brightness", "bootstrap") if hasattr(args, k)}
    return EvalSpec(
        in_data=args.in_data,
        ood=_csv(getattr(args, "ood", "")),
        methods=methods,
        fit_data=args.fit_data,
        fit_samples=args.fit_samples,
        stats_samples=args.stats_samples,
        seed=args.seed,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        detector_kwargs=kwargs,
        **optional,
    )


def _print_grid(
    title: str, methods: list[str], sets: list[str], cell: Callable[[str, str], str], width: int
) -> None:
    """One metric as a text table: a row per OOD set, a column per method, ``cell(method, set)``."""
    print(f"\n{title}")
    print(f"{'OOD set':<22}" + "".join(f"{m:>{width + 2}}" for m in methods))
    for s in sets:
        print(f"{s:<22}" + "".join(f"{cell(m, s):>{width + 2}}" for m in methods))


def print_table(result: EvaluationResult) -> None:
    from roseood.evaluation.metrics import METRICS
    from roseood.evaluation.result import metric_text

    metrics = result.metrics()
    width = max(20 if result.bootstrap else 12, *(len(m) for m in result.methods))
    for metric in METRICS:

        def cell(m: str, s: str, metric: str = metric) -> str:
            return metric_text(f"{metrics[m][s][metric]:.3f}", result.interval(m, s, metric))

        title = f"{metric.upper()}  (in-distribution: {result.in_name}; in-distribution = positive class)"
        _print_grid(title, result.methods, result.ood_sets, cell, width)
        for s, why in result.missing.items():
            print(f"{s:<22}  no data ({why})")
    print(
        "\nimages/s (scoring the in-distribution test set): "
        + ", ".join(f"{m} {v:.1f}" for m, v in result.images_per_second.items())
    )


def cmd_evaluate(args: argparse.Namespace) -> None:
    from roseood import distributed

    if args.json:
        _output(args, args.json)
    if args.report:
        _output(args, args.report, folder=True, marker="report.md")
    if args.cache:
        _output(args, args.cache, folder=True)  # an existing cache is the point: only writable, a folder
    paths = args.model or [None]
    if args.ensemble:
        if len(paths) < 2:
            raise RoseError("--ensemble needs two or more --model")
        _model_names(paths)  # refuses a model named twice
        outcome: EvaluationResult | AcrossModels = _evaluate_one(args, paths)
    else:
        outcome = _evaluate_one(args, paths[0]) if len(paths) == 1 else _evaluate_models(args, paths)
    if not distributed.is_main():
        return
    if args.json:
        outcome.write_json(args.json)
        print(f"wrote {args.json}")
    if args.report:
        from roseood.evaluation.report import write_across_report, write_report
        from roseood.evaluation.result import AcrossModels

        if isinstance(outcome, AcrossModels):
            print(f"wrote {write_across_report(outcome, Path(args.report))}")
        else:
            print(f"wrote {write_report(outcome, Path(args.report))}")


def _evaluate(args: argparse.Namespace, path: str | list[str] | None, spec: EvalSpec) -> EvaluationResult:
    """One model's evaluation (a list of paths: their ensemble's), through the result cache when
    ``--cache`` names one."""
    from roseood.evaluation.cache import ResultCache
    from roseood.evaluation.evaluate import evaluate

    cache = ResultCache(args.cache) if args.cache else None
    model = [_model(args, p) for p in path] if isinstance(path, list) else _model(args, path)
    return evaluate(model, spec, progress=not args.quiet, cache=cache)


def _evaluate_one(args: argparse.Namespace, path: str | list[str] | None) -> EvaluationResult:
    result = _evaluate(args, path, _spec(args, list(args.methods)))
    print(json.dumps({k: v for k, v in result.settings.items() if k != "model_config"}, indent=1))
    print_table(result)
    return result


def _model_names(paths: list[str]) -> list[str]:
    """Short names for checkpoints: file stems, or the paths as given where two stems are the same."""
    stems = [Path(p).stem for p in paths]
    if len(set(paths)) < len(paths):
        raise RoseError(f"a model is named twice: {', '.join(paths)}")
    return stems if len(set(stems)) == len(stems) else list(paths)


def _evaluate_models(args: argparse.Namespace, paths: list[str]) -> AcrossModels:
    """``rose evaluate`` with several ``--model``: one evaluation each (same images and settings), then
    every metric's spread across them. With ``--json``, the file holds every model finished so far."""
    from roseood import distributed
    from roseood.evaluation.metrics import METRICS
    from roseood.evaluation.result import AcrossModels, spread_text

    spec = _spec(args, list(args.methods))
    results: dict[str, EvaluationResult] = {}
    for name, path in zip(_model_names(paths), paths, strict=True):
        print(f"\n=== model {name} ({path}) ===")
        results[name] = _evaluate(args, path, spec)
        print_table(results[name])
        if args.json and distributed.is_main() and 1 < len(results) < len(paths):  # the last: by the caller
            AcrossModels(results).write_json(args.json)
    across = AcrossModels(results)
    spread, first = across.spread(), across.first
    print(json.dumps(across.shared_settings(), indent=1))
    width = max(30, *(len(m) for m in first.methods))
    for metric in METRICS:

        def cell(m: str, s: str, metric: str = metric) -> str:
            return spread_text(spread[m][s][metric])

        title = f"{metric.upper()} across {len(results)} models: mean ± sd (min–max)"
        _print_grid(title, first.methods, first.ood_sets, cell, width)
    return across


def _models(args: argparse.Namespace) -> list[RoseModel]:
    """Every model of a repeated ``--model`` (an ensemble's members, in order); one model otherwise."""
    paths = args.model or [None]
    _model_names([p for p in paths if p is not None])  # refuses a model named twice
    return [_model(args, path) for path in paths]


def cmd_fit(args: argparse.Namespace) -> None:
    from roseood.evaluation.evaluate import fisher_count, fit_detector, load_fit_images

    _output(args, args.out)
    models = _models(args)
    spec = _spec(args, [args.method])
    fit = load_fit_images(spec, models[0])
    det = fit_detector(
        args.method, models if len(models) > 1 else models[0], fit, spec, progress=not args.quiet
    )
    held_out = fit.images[fisher_count(spec, len(fit)) :]
    det.calibrate(held_out, tpr=args.tpr)
    det.save(args.out)
    what = args.method if len(models) == 1 else f"an ensemble of {len(models)} {args.method} detectors"
    print(
        f"wrote {args.out}: {what} fitted on {len(fit)} images of {fit.name}; OOD above "
        f"{det.threshold_:.6g} ({args.tpr:.0%} of {len(held_out)} held-out in-distribution images below)"
    )


def cmd_score(args: argparse.Namespace) -> None:
    from roseood import distributed
    from roseood.data import open_images
    from roseood.detectors import Detector, Ensemble
    from roseood.evaluation.evaluate import model_preprocessing
    from roseood.progress import progress
    from roseood.serialization import write_csv

    out = _output(args, args.out)
    models = _models(args)
    prep = model_preprocessing(models[0])
    det = (
        Ensemble.load(args.detector, models=models)
        if len(models) > 1
        else Detector.load(args.detector, models[0])
    )
    if args.background:
        from roseood.detectors import LikelihoodRatio
        from roseood.models import load_model

        if isinstance(det, LikelihoodRatio):
            det.set_background(load_model(args.background).to(distributed.device(args.device)))
    data = open_images(
        args.data,
        split=args.split,
        n=args.subset,
        seed=args.seed,
        data_dir=args.data_dir,
        channels=prep.channels,
        size=prep.size,
        resize=prep.resize,
    )
    data.state_preprocessing()
    threshold = args.threshold if args.threshold is not None else det.threshold_

    def rows() -> Iterator[list[Any]]:
        # Chunks in, rows out: memory stays bounded however many images there are.
        shown = distributed.is_main() and not args.quiet  # a bar on a terminal, periodic lines otherwise
        bar = progress(None, "scoring", total=len(data), unit="image", enabled=shown)
        for lo, scores in det.score_stream(data, chunk=args.chunk * distributed.world()):
            decisions = det.decide(scores, threshold) if threshold is not None else [None] * len(scores)
            for i, (s, d) in enumerate(zip(scores, decisions, strict=True), lo):
                name = data.files[i] if data.files is not None else ""
                yield [i, name, int(data.labels[i]), f"{s:.6g}", "" if d is None else str(bool(d)).lower()]
            bar.update(len(scores))
        bar.close()

    header = ["index", "file", "label", "score", "ood"]
    if distributed.is_main():
        write_csv(out, header, rows())
    else:
        for _ in rows():  # the other processes score their shares of every chunk
            pass
    cut = "no threshold (column ood empty)" if threshold is None else f"OOD above {threshold:.6g}"
    print(f"wrote {len(data)} {det.method} scores for {data.name} ({data.source}) to {out}; {cut}")


def _probe_inputs(model: RoseModel, batch: int = 2) -> Tensor:
    """A couple of plain inputs of the model's declared shape, for a dry run."""
    import torch

    shape = model.input_shape
    if shape is None:
        raise RoseError(
            "check-model needs a model that declares its input_shape (wrap(..., input_shape=...))"
        )
    if model.input_kind == "tokens":
        x = torch.zeros(batch, *shape, dtype=torch.long)
    else:
        x = torch.full((batch, *shape), 0.5)
    return x.to(next(model.parameters()).device)


def cmd_check_model(args: argparse.Namespace) -> None:
    from torch import nn

    from roseood.curvature import check_layers, format_layer_report
    from roseood.models.base import model_name

    model = _model(args)
    name = getattr(model, "name", None) or model_name(model)
    print(f"model: {name}, {model.input_kind} inputs of shape {model.input_shape}")
    for set_name, names in model.layer_sets().items():
        print(f"layer set {set_name!r}: {', '.join(names) or '(empty)'}")
    model.eval()
    reports = check_layers(cast(nn.Module, model), model.rose_loss, _probe_inputs(model))
    print()
    print(format_layer_report(reports))
    print(f"\n{sum(r.usable for r in reports)} of {len(reports)} parameterised layers usable by ROSE")


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

    run_demo(fit_samples=args.fit_samples, test_samples=args.test_samples, progress=not args.quiet)


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
        models=tuple(_csv(args.models)) if args.models else DEFAULT_MODELS,
        datasets=tuple(_csv(args.datasets)) if args.datasets else DEFAULT_DATASETS,
    )
    _output(args, args.out, folder=True)
    for name in names:
        t0 = time.time()
        report = run_experiment(name, ws)
        print(f"{name}: {report} ({(time.time() - t0) / 60:.1f} min)")
    print(f"index: {ws.root / 'index.html'}")


USER_MODEL = "module"  # `rose train module --model-module FILE.py:FACTORY`
MODEL_MODULE_HELP = (
    "Python code building your model: a function returning roseood.wrap(...) or a GenerativeModel"
)


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to every option's help, except flags and options whose help says what
    happens when they are unset."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Shows every option's default in ``--help`` and reports a bad option as one ``error:`` line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def _add_train_args(p: argparse.ArgumentParser) -> None:
    """Options every `rose train FAMILY` shares (architecture options come from the family)."""
    p.add_argument(
        "--data", default="fashion_mnist", help="dataset name (train split), .npz file or image folder"
    )
    p.add_argument("--out", required=True, help="model checkpoint to write (and resume from)")
    p.add_argument("--resume", action="store_true", help="continue the run stored in --out (same settings)")
    _add_overwrite(p)
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
    _add_data_args(p, seed=0)
    _add_quiet(p)
    p.set_defaults(func=cmd_train)


def _add_data_args(p: argparse.ArgumentParser, seed: int = 2021) -> None:
    p.add_argument(
        "--data-dir", help="folder of dataset .npz files (unset: $ROSEOOD_DATA or ~/.cache/roseood/data)"
    )
    p.add_argument("--seed", type=v.seed, default=seed, help="seed (0 ≤ seed < 2**32) for subsets and noise")
    _add_device(p)
    p.add_argument("--batch-size", type=v.count, default=64, help="images per forward/backward pass")


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        type=v.device,
        default="auto",
        help="auto (CUDA, then Apple MPS, then the CPU), cpu, cuda, cuda:N or mps; "
        "under torchrun each process takes the GPU of its local rank",
    )


def _add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or progress lines")


def _add_overwrite(p: argparse.ArgumentParser, *aliases: str) -> None:
    p.add_argument("--overwrite", *aliases, action="store_true", help="replace existing output files")


def build_parser() -> argparse.ArgumentParser:
    from roseood.data.preprocess import RESIZE_METHODS
    from roseood.detectors import METHODS
    from roseood.detectors.adjustment import ADJUSTMENTS
    from roseood.models.families import FAMILIES

    parser = _Parser(prog="rose", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "import-vae", help="convert the ROSE authors' released VAE (netE/netG .pth) to a roseood model"
    )
    p.add_argument("--encoder", required=True, help="the authors' netE .pth file")
    p.add_argument("--decoder", required=True, help="the authors' netG .pth file")
    p.add_argument("--out", required=True, help="roseood model checkpoint to write")
    _add_overwrite(p, "--force")
    p.set_defaults(func=cmd_import_vae)

    p = sub.add_parser(
        "train", help="train a model family or your own model (per-epoch checkpoints, --resume)"
    )
    families = p.add_subparsers(
        dest="kind", required=True, metavar="FAMILY", help="model family (`rose train FAMILY --help`)"
    )
    for family in FAMILIES.values():
        if family.trainable:
            fp = families.add_parser(family.name, help=family.help)
            _add_train_args(fp)
            fp.add_argument(
                "--channels",
                type=v.channels,
                help="image channels, 1 or 3 (unset: 3 if any image is colour)",
            )
            fp.add_argument(
                "--size", type=v.count, help="image size S: S×S pixels (unset: the data's most common size)"
            )
            fp.add_argument(
                "--resize",
                choices=RESIZE_METHODS,
                default="crop",
                help="how images of another size are brought to S×S: crop (shorter side to S, centre crop, "
                "the paper's) or stretch",
            )
            family.add_cli_arguments(fp)
    fp = families.add_parser(
        USER_MODEL, help="your own model: --model-module FILE.py:FACTORY (trains its NLL)"
    )
    _add_train_args(fp)
    fp.add_argument("--model-module", required=True, metavar="FILE.py:FACTORY", help=MODEL_MODULE_HELP)

    def model_args(p: argparse.ArgumentParser, several: str = "") -> None:
        text = "roseood model checkpoint (with --model-module: its weights)"
        p.add_argument("--model", action="append" if several else "store", help=f"{text}{several}")
        p.add_argument("--model-module", metavar="FILE.py:FACTORY", help=MODEL_MODULE_HELP)

    def eval_args(p: argparse.ArgumentParser, in_help: str, several: str = "") -> None:
        model_args(p, several)
        p.add_argument("--in", dest="in_data", default="fashion_mnist", help=in_help)
        p.add_argument("--fit-data", help="images to fit detectors on (unset: training split of --in)")
        p.add_argument(
            "--fit-samples", type=v.count, default=10000, help="images for the Fisher / detector fit"
        )
        p.add_argument(
            "--stats-samples",
            type=v.count,
            default=2000,
            help="further held-out images: ROSE layer statistics and the decision threshold",
        )
        p.add_argument("--background", help="background model checkpoint for the lratio method")
        p.add_argument(
            "--layers",
            help="ROSE layer set (VAE: encoder, decoder, all; Glow: invconv, all; "
            "PixelCNN: all, first, last, body; gated PixelCNN: vertical, ...)",
        )
        p.add_argument(
            "--aggregate",
            metavar="NAME[:k=v,...]",
            help="how ROSE combines layer scores: relu-norm (the paper's, default; beta, p), max-z, log-z "
            "(p, beta), gaussian, gmm (k, reg, seed); e.g. relu-norm:beta=3 or gmm:k=4",
        )
        p.add_argument(
            "--adjust",
            choices=ADJUSTMENTS,
            help="beyond the paper: nll divides each ROSE layer score by its in-distribution trend in the "
            "image's −log p(x); both aggregates raw and adjusted layer scores (default: none, the paper)",
        )
        _add_data_args(p)

    methods = ", ".join(METHODS)
    p = sub.add_parser("evaluate", help="fit detectors and compare them on in-distribution vs OOD sets")
    several = "; give it again for more models, e.g. one per training seed: each is evaluated alike, then "
    eval_args(
        p,
        "in-distribution set: its test split is scored, its training split fitted on",
        several + "every metric's spread",
    )
    p.add_argument(
        "--ood",
        default="mnist,notmnist,omniglot,noise,constant",
        help="comma-separated OOD sets: names, .npz files or image folders",
    )
    p.add_argument(
        "--methods",
        type=cli_names(METHODS, "method"),
        default="rose-ekfac,rose-diag,nll",
        help=f"comma-separated detection methods, of: {methods}",
    )
    p.add_argument("--test-samples", type=v.count, default=5000, help="images scored per test set")
    p.add_argument(
        "--ensemble",
        action="store_true",
        help="with several --model: evaluate each method as one ensemble over them (z-scores averaged) "
        "instead of each model alone",
    )
    p.add_argument(
        "--brightness", type=v.positive_float, default=1.0, help="brightness factor applied to the OOD sets"
    )
    p.add_argument(
        "--bootstrap",
        type=v.non_negative,
        default=1000,
        metavar="N",
        help="95 %% interval of every metric from N bootstrap resamples of the test images (0: none); "
        "it shows the test-image noise, not that of the Fisher images or of the model's training",
    )
    p.add_argument("--json", help="write settings and metrics as JSON to this file")
    p.add_argument("--report", help="write a Markdown report with ROC curves and histograms into this folder")
    p.add_argument(
        "--cache",
        metavar="DIR",
        help="keep fitted detectors and per-image scores here, keyed by everything that defines them: "
        "a re-run after an interruption computes only what is missing",
    )
    _add_overwrite(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("fit", help="fit one detector, calibrate its threshold and save it to a file")
    ensemble = "; give it again for an ensemble (one detector per model, their z-scores averaged)"
    eval_args(p, "in-distribution set: detectors are fitted on its training split", ensemble)
    p.add_argument(
        "--method",
        type=v.cli_type(lambda text, _: v.check_choice(text, list(METHODS), "method"), str),
        default="rose-ekfac",
        help=f"one of: {methods}",
    )
    p.add_argument(
        "--tpr",
        type=v.rate,
        default=0.95,
        help="decision threshold: this fraction of the held-out in-distribution images counts as in",
    )
    p.add_argument("--out", required=True, help="detector file to write")
    _add_overwrite(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("score", help="write one score and OOD decision per image (CSV) with a saved detector")
    model_args(p, "; an ensemble's models again, in the order given to rose fit")
    p.add_argument("--detector", required=True, help="file written by `rose fit`")
    p.add_argument("--data", required=True, help="dataset name, .npz file or image folder")
    p.add_argument("--split", default="test", help="split of a named dataset")
    p.add_argument("--subset", type=v.count, help="score a deterministic subset of this size (unset: all)")
    p.add_argument(
        "--threshold", type=v.finite_float, help="call scores above this OOD (unset: the detector's own)"
    )
    p.add_argument("--out", required=True, help="CSV file: index, file, label, score, ood")
    _add_overwrite(p)
    p.add_argument("--background", help="background model, for a saved lratio detector")
    p.add_argument("--chunk", type=v.count, default=2048, help="images read at a time per process")
    _add_data_args(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser(
        "bench", help="regenerate the paper's tables and figures (reports with paper | ours | Δ)"
    )
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
    p.add_argument("--data-dir", help="folder of dataset .npz files (unset: $ROSEOOD_DATA or the cache)")
    _add_device(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "check-model", help="dry run: which layers of a model ROSE can use, and why not (one tiny batch)"
    )
    model_args(p)
    _add_device(p)
    p.set_defaults(func=cmd_check_model)

    p = sub.add_parser("datasets", help="list the named datasets and whether their files are present")
    p.add_argument("--data-dir", help="folder of dataset .npz files (unset: $ROSEOOD_DATA or the cache)")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser(
        "demo", help="offline demo: the authors' FMNIST VAE, ROSE vs NLL on Fashion-MNIST vs MNIST"
    )
    p.add_argument("--fit-samples", type=v.count, default=2000, help="Fashion-MNIST images for the Fisher")
    p.add_argument("--test-samples", type=v.count, default=1000, help="test images per set")
    _add_quiet(p)
    p.set_defaults(func=cmd_demo)
    return parser


def cli_names(choices: Iterable[str], what: str) -> Any:
    """An argparse ``type=`` for a comma-separated list of known names."""
    return v.cli_type(lambda text, _: list(v.check_names(text, choices, what)), str)


def _quiet_stdout() -> None:
    """After a closed pipe (``rose datasets | head``), send the rest of stdout nowhere, so Python's own
    flush at exit prints no BrokenPipeError either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (2: bad input, 130: interrupted). Under torchrun
    (``torchrun --nproc-per-node N -m roseood ...``) every process runs it on its share of the work and only
    rank 0 prints and writes files."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad option (2, already reported on one line)
        return exc.code if isinstance(exc.code, int) else 2
    from roseood import distributed
    from roseood.progress import show_warnings_as_notes

    show_warnings_as_notes()
    where = f" (rank {distributed.rank()})" if distributed.launched() else ""
    joined = not distributed.active()  # leave at the end only a process group this call joined
    try:
        distributed.init()
        where = f" (rank {distributed.rank()})" if distributed.active() else ""
        with contextlib.ExitStack() as stack:
            if not distributed.is_main():
                stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            args.func(args)
        if joined:
            distributed.barrier()  # finish together before leaving the group (see finally)
    except RoseError as exc:
        print(f"error{where}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    finally:
        if joined:
            distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
