"""``rose evaluate``: fit detectors, compare them on in-distribution vs OOD sets (tables, JSON, reports)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roseood import validation as v
from roseood.cli.common import (
    add_eval_args,
    add_overwrite,
    add_preset,
    add_quiet,
    add_report_args,
    add_tpr,
    checked_output,
    cli_names,
    load_model_arg,
    model_names,
    spec_from_args,
)
from roseood.errors import RoseError

if TYPE_CHECKING:
    from roseood.evaluation.result import AcrossModels, EvaluationResult
    from roseood.evaluation.splits import EvalSpec
    from roseood.models.base import RoseModel


# The commands this group adds and their one-line help: `rose --help` lists them without building them.
COMMANDS = {
    "evaluate": "fit detectors and compare them on in-distribution vs OOD sets",
}


def _print_grid(
    title: str, methods: list[str], sets: list[str], cell: Callable[[str, str], str], width: int
) -> None:
    """One metric as a text table: a row per OOD set, a column per method, ``cell(method, set)``."""
    print(f"\n{title}")
    print(f"{'OOD set':<22}" + "".join(f"{m:>{width + 2}}" for m in methods))
    for s in sets:
        print(f"{s:<22}" + "".join(f"{cell(m, s):>{width + 2}}" for m in methods))


def print_table(result: EvaluationResult) -> None:
    """Every metric of one evaluation as a text table, then each method's scoring speed."""
    from roseood.evaluation.metrics import METRICS
    from roseood.evaluation.report import missing_lines
    from roseood.evaluation.result import metric_text

    metrics = result.metrics()
    width = max(20 if result.bootstrap else 12, *(len(m) for m in result.methods))
    for metric in METRICS:

        def cell(m: str, s: str, metric: str = metric) -> str:
            return metric_text(f"{metrics[m][s][metric]:.3f}", result.interval(m, s, metric))

        title = f"{metric.upper()}  (in-distribution: {result.in_name}; in-distribution = positive class)"
        _print_grid(title, result.methods, result.ood_sets, cell, width)
        for s in result.missing:
            print(f"{s:<22}  no data")
    print(
        "\nimages/s (scoring the in-distribution test set): "
        + ", ".join(f"{m} {v:.1f}" for m, v in result.images_per_second.items())
    )
    for line in missing_lines(result):
        print(line)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from roseood import distributed

    if args.json:
        checked_output(args, args.json)
    if args.report:
        from roseood.evaluation.html_report import PAGE_OUTPUTS

        checked_output(args, args.report, folder=True, markers=("report.md", *PAGE_OUTPUTS))
    if args.cache:
        checked_output(args, args.cache, folder=True)  # an existing cache is the point: only writable
    for option in ("scores", "save_detector"):
        if getattr(args, option):
            checked_output(args, getattr(args, option))
    paths = args.model or [None]
    if (args.scores or args.save_detector) and len(paths) > 1 and not args.ensemble:
        raise RoseError("--scores and --save-detector take one model (or --ensemble): evaluate one at a time")
    if args.save_detector and (args.methods is None or len(args.methods) != 1):
        given = "none" if args.methods is None else len(args.methods)
        raise RoseError(f"--save-detector saves one detector: name one --methods, not {given}")
    if args.ensemble:
        if len(paths) < 2:
            raise RoseError("--ensemble needs two or more --model")
        model_names(paths)  # refuses a model named twice
        outcome: EvaluationResult | AcrossModels = _evaluate_one(args, paths)
    else:
        outcome = _evaluate_one(args, paths[0]) if len(paths) == 1 else _evaluate_models(args, paths)
    if not distributed.is_main():
        return
    from roseood.evaluation.result import AcrossModels

    if args.json:
        outcome.write_json(args.json)
        print(f"wrote {args.json}")
    if args.scores or args.save_detector:
        assert not isinstance(outcome, AcrossModels)  # refused above
        _write_decisions(args, outcome)
    if args.report:
        from roseood.evaluation.html_report import write_evaluation_page
        from roseood.evaluation.report import safe_name, write_across_report, write_report
        from roseood.evaluation.result import AcrossModels

        report = Path(args.report)
        if isinstance(outcome, AcrossModels):
            print(f"wrote {write_across_report(outcome, report)}")
            for name, result in outcome.results.items():  # one page per model, beside its report.md
                page = write_evaluation_page(
                    result, report / safe_name(name), f"OOD evaluation: {name}", result.thresholds or None
                )
                print(f"wrote {page}")
        else:
            print(f"wrote {write_report(outcome, report)}")
            print(f"wrote {write_evaluation_page(outcome, report, thresholds=outcome.thresholds or None)}")


def _write_decisions(args: argparse.Namespace, result: EvaluationResult) -> None:
    """``--scores``: every test image's score and decision; ``--save-detector``: the fitted detector."""
    from roseood.evaluation.scoring import flagged_text, write_decisions

    cuts = ", ".join(f"{m} above {t:.6g}" for m, t in result.thresholds.items())
    if args.scores:
        write_decisions(result, args.scores)
        print(f"wrote {args.scores}: each test image's score and decision (OOD: {cuts})")
        for method, cut in result.thresholds.items():  # what the threshold decides, set by set
            for name, scores in result.scores[method].items():
                print(f"  {method}, {name}: {flagged_text(scores, cut)}")
    if args.save_detector:
        (method,) = result.methods
        result.detectors[method].save(args.save_detector)
        print(f"wrote {args.save_detector}: the fitted {method} detector (OOD: {cuts}), for `rose score`")


def _evaluate(
    args: argparse.Namespace, model: RoseModel | list[RoseModel], spec: EvalSpec
) -> EvaluationResult:
    """One model's evaluation (a list: their ensemble's), through the result cache when ``--cache``
    names one."""
    from roseood.evaluation.cache import ResultCache
    from roseood.evaluation.evaluate import evaluate

    cache = ResultCache(args.cache) if args.cache else None
    examples = args.gallery if args.report else 0
    tpr = args.tpr if args.scores or args.save_detector or args.report else None  # the page draws it
    return evaluate(model, spec, progress=not args.quiet, cache=cache, examples=examples, tpr=tpr)


def _methods(args: argparse.Namespace, model: RoseModel) -> list[str]:
    """``--methods``, else the model family's method followed by rose-ekfac, rose-diag and nll."""
    from roseood.models.families import default_method

    if args.methods is not None:
        return list(args.methods)
    return list(dict.fromkeys([default_method(model), "rose-ekfac", "rose-diag", "nll"]))


def _evaluate_one(args: argparse.Namespace, path: str | list[str] | None) -> EvaluationResult:
    model = [load_model_arg(args, p) for p in path] if isinstance(path, list) else load_model_arg(args, path)
    first = model[0] if isinstance(model, list) else model
    result = _evaluate(args, model, spec_from_args(args, _methods(args, first), first))
    if args.verbose:
        settings = {k: v for k, v in result.settings.items() if k != "model_config"}
        print(json.dumps(settings, indent=1, ensure_ascii=False))
    print_table(result)
    return result


def _evaluate_models(args: argparse.Namespace, paths: list[str]) -> AcrossModels:
    """``rose evaluate`` with several ``--model``: one evaluation each (same images and settings), then
    every metric's spread across them. With ``--json``, the file holds every model finished so far."""
    from roseood import distributed
    from roseood.evaluation.metrics import METRICS
    from roseood.evaluation.result import AcrossModels, spread_text

    names = model_names(paths)
    models = [load_model_arg(args, p) for p in paths]  # every file checked before hours of work on any
    spec = spec_from_args(args, _methods(args, models[0]), models[0])
    results: dict[str, EvaluationResult] = {}
    for name, path, model in zip(names, paths, models, strict=True):
        print(f"\n=== model {name} ({path}) ===")
        results[name] = _evaluate(args, model, spec)
        print_table(results[name])
        if args.json and distributed.is_main() and 1 < len(results) < len(paths):  # the last: by the caller
            AcrossModels(results).write_json(args.json)
    across = AcrossModels(results)
    spread, first = across.spread(), across.first
    if args.verbose:
        print(json.dumps(across.shared_settings(), indent=1, ensure_ascii=False))
    width = max(30, *(len(m) for m in first.methods))
    for metric in METRICS:

        def cell(m: str, s: str, metric: str = metric) -> str:
            return spread_text(spread[m][s][metric])

        title = f"{metric.upper()} across {len(results)} models: mean ± sd (min–max)"
        _print_grid(title, first.methods, first.ood_sets, cell, width)
    return across


def _jpeg_match(value: str, name: str) -> str | None:
    """``--match-jpeg``'s value checked when the command line is read (numpy and Pillow only then)."""
    from roseood.evaluation.histories import parse_match

    return parse_match(value)


def register(sub: Any) -> None:
    """Add ``evaluate`` to the ``rose`` sub-parsers ``sub``."""
    from roseood.catalogue import family_methods, offered_methods

    p = sub.add_parser("evaluate", help=COMMANDS["evaluate"])
    offered = offered_methods()
    several = "; give it again for more models, e.g. one per training seed: each is evaluated alike, then "
    add_eval_args(
        p,
        "in-distribution set (its test split is scored, its training split fitted on)",
        several + "every metric's spread",
    )
    p.add_argument(
        "--ood",
        default="mnist,notmnist,omniglot,noise,constant",
        help="comma-separated OOD sets: names, .npz files or image folders; NAME@0-6+8-9 keeps classes",
    )
    p.add_argument(
        "--methods",
        type=cli_names(offered, "method"),
        help=f"comma-separated detection methods, of: {', '.join(offered)} (unset: the model family's "
        f"method, then rose-ekfac, rose-diag and nll; the family's: {family_methods()})",
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
        "--match-jpeg",
        type=v.cli_type(_jpeg_match, str),
        metavar="QUALITY[:SUBSAMPLING]|auto",
        help="put every stored OOD set through this JPEG round-trip (e.g. 75 or 75:4:2:0) at the model's "
        "size, so that it shares the in-distribution set's compression history (auto: the history found "
        "in the in-distribution images); the sets are named with it (celeba+jpeg75). Unset: a set stored "
        "unlike the in-distribution set is only warned about",
    )
    p.add_argument(
        "--bootstrap",
        type=v.non_negative,
        default=1000,
        metavar="N",
        help="95 %% interval of every metric from N bootstrap resamples of the test images (0: none); "
        "it shows the test-image noise, not that of the Fisher images or of the model's training",
    )
    _add_outputs(p)
    add_overwrite(p)
    add_preset(p)
    add_quiet(p)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="print every setting (as JSON) before the metrics"
    )
    p.set_defaults(func=cmd_evaluate)


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """What ``rose evaluate`` writes besides its metrics: JSON, report, scores, a detector, a cache."""
    p.add_argument("--json", help="write settings and metrics as JSON to this file")
    add_report_args(
        p,
        "a Markdown report (report.md: metrics with intervals, ROC curves, histograms) and an HTML page "
        "(index.html: AUROCs, ROC curves, each method's histograms with its threshold)",
    )
    p.add_argument(
        "--scores",
        metavar="CSV",
        help="write every test image's score and OOD decision here: method, set, index, file, label, "
        "score, ood (the threshold calibrated as `rose fit` does, see --tpr)",
    )
    p.add_argument(
        "--save-detector",
        metavar="FILE",
        help="save the fitted, calibrated detector (one method) for `rose score`",
    )
    add_tpr(p)
    p.add_argument(
        "--cache",
        metavar="DIR",
        help="keep fitted detectors and per-image scores here, keyed by everything that defines them: "
        "a re-run after an interruption computes only what is missing",
    )
