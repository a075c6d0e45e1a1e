"""Detector commands: ``rose fit`` (fit, calibrate, save) and ``rose score`` (a saved detector → CSV)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from roseood import validation as v
from roseood.cli.common import (
    add_data_args,
    add_eval_args,
    add_memory,
    add_model_args,
    add_overwrite,
    add_preset,
    add_quiet,
    add_report_args,
    add_tpr,
    checked_output,
    load_background_arg,
    load_models_arg,
    spec_from_args,
)
from roseood.errors import RoseError

if TYPE_CHECKING:
    import numpy as np

    from roseood.data import ImageStream
    from roseood.data.jpeg import JpegHistory, Storage
    from roseood.data.preprocess import Preprocessing
    from roseood.detectors import Detector
    from roseood.evaluation.splits import EvalSpec, FitImages

# The commands this group adds and their one-line help: `rose --help` lists them without building them.
FORECAST_IMAGES = 16  # images `rose score` times its detector on before a long run, to say its time
COMMANDS = {
    "fit": "fit one detector, calibrate its threshold and save it to a file",
    "score": "write one score and OOD decision per image (CSV) with a saved detector",
}


def cmd_fit(args: argparse.Namespace) -> None:
    from roseood.evaluation.evaluate import fit_calibrated
    from roseood.models.families import default_faster, default_method
    from roseood.progress import note

    checked_output(args, args.out)
    models = load_models_arg(args)
    if args.method is None:
        args.method = default_method(models[0])
        faster = default_faster(models[0])
        note(
            f"--method {args.method}: the default for this kind of model" + (f"; {faster}" if faster else "")
        )
    spec = spec_from_args(args, [args.method], models[0])
    model = models if len(models) > 1 else models[0]
    fitted = fit_calibrated(args.method, model, spec, tpr=args.tpr, progress=not args.quiet)
    det, fit = fitted.detector, fitted.fit
    _check_held_out_storage(det, fit, spec)
    det.save(args.out)
    what = args.method if len(models) == 1 else f"an ensemble of {len(models)} {args.method} detectors"
    print(
        f"wrote {args.out}: {what} fitted on {len(fit.whole)} images of {fit.whole.name}; OOD above "
        f"{det.threshold_:.6g} ({args.tpr:.0%} of {len(fit.held_out)} held-out in-distribution images below)"
    )


def _warn_stored_unlike(
    ref: Storage, images: np.ndarray, option: str, source: str, shown: str | None = None
) -> None:
    """Warn in one line where ``images`` (read from ``source``; named ``shown`` in the line) were stored
    unlike ``ref``: the check ``rose evaluate`` runs on its OOD sets (``compared``); ``option
    SOURCE+jpegQ`` would match them."""
    from roseood.data.jpeg import split_suffix
    from roseood.evaluation.histories import compared
    from roseood.progress import state

    def remedy(history: JpegHistory) -> str:
        return f"{option} {split_suffix(source)[0]}{history.tag()}"

    _, line = compared(ref, shown or source, images, remedy, source)
    if line:
        state(f"warning: {line}")


def _check_held_out_storage(det: Detector, fit: FitImages, spec: EvalSpec) -> None:
    """``rose fit``: warn where the held-out images its threshold is set on were stored unlike the images
    it fitted on (a fit set that mixes JPEG and lossless files)."""
    from dataclasses import replace

    from roseood.evaluation.splits import fit_source, splits_in_data

    if det.fit_storage_ is None or not len(fit.held_out):
        return
    ref = replace(det.fit_storage_, name=f"the {len(fit.fisher)} images it is fitted on")
    source = spec.in_data if splits_in_data(spec) else fit_source(spec)
    shown = f"the {len(fit.held_out)} held-out images of {fit.whole.name}"
    _warn_stored_unlike(ref, fit.held_out, "--fit-data", source, shown)


def _check_storage(det: Detector, path: str, data: ImageStream, source: str) -> None:
    """``rose score``: warn where the images to score were stored unlike the detector's fit images (as
    its file records them); a file that records none says so in one line."""
    from dataclasses import replace

    from roseood.evaluation.histories import stream_sample
    from roseood.progress import state

    if det.fit_storage_ is None:
        state(
            f"{path} records no compression history of its fit images (a file written before roseood "
            f"recorded it, or a detector fitted from Python): {source} is not checked against them"
        )
        return
    ref = replace(det.fit_storage_, name=f"the detector's fit images ({det.fit_storage_.name})")
    _warn_stored_unlike(ref, stream_sample(data), "--data", source)


def _images_to_score(args: argparse.Namespace, prep: Preprocessing) -> ImageStream:
    """``rose score``'s images, read lazily with the model's preprocessing (stated on stderr); an
    unreadable file of a folder is skipped, not fatal."""
    from roseood.data import open_images

    data = open_images(
        args.data,
        split=args.split,
        n=args.subset,
        seed=args.seed,
        data_dir=args.data_dir,
        errors="skip",
        **prep.options(),
    )
    data.state_preprocessing()
    return data


def _score_settings(args: argparse.Namespace, source: str) -> dict[str, Any]:
    """What a ``--resume``d run must share with the partial file it continues."""
    from roseood.serialization import file_digest

    return {
        "detector": file_digest(Path(args.detector)),
        "data": source,
        "split": args.split,
        "subset": args.subset,
        "seed": args.seed,
    }


def cmd_score(args: argparse.Namespace) -> None:
    import numpy as np

    from roseood import distributed
    from roseood.detectors import load_detector
    from roseood.evaluation.scoring import write_scores
    from roseood.evaluation.splits import model_preprocessing

    to_stdout = str(args.out) == "-"
    out = _score_output(args)
    if args.report:
        from roseood.evaluation.html_report import PAGE_OUTPUTS

        checked_output(args, args.report, folder=True, markers=PAGE_OUTPUTS, resumed=False)
    models = load_models_arg(args)
    prep = model_preprocessing(models[0])
    det = load_detector(
        args.detector, models if len(models) > 1 else models[0], background=load_background_arg(args)
    )
    data = _images_to_score(args, prep)
    _check_storage(det, args.detector, data, args.data)
    log = sys.stderr if to_stdout else sys.stdout
    _state_scoring(args, models[0], det, data, prep.channels * prep.size**2, log)
    unreadable: list[int] = []

    def skipped(index: int, message: str) -> None:
        unreadable.append(index)
        print(f"skipped: {message}", file=sys.stderr)

    chunks: list[np.ndarray] = []  # every score, for the count flagged and the report
    threshold = write_scores(
        det,
        data,
        out,
        threshold=args.threshold,
        chunk=args.chunk,
        progress=not args.quiet,
        collect=chunks,
        resume=args.resume,
        overwrite=args.overwrite,
        settings=_score_settings(args, data.source),
        on_error=skipped,
    )
    cut = "no threshold (column ood empty)" if threshold is None else f"OOD above {threshold:.6g}"
    where = "standard output" if to_stdout else out
    bad = f"; {len(unreadable)} unreadable files skipped (score empty)" if unreadable else ""
    print(
        f"wrote {len(data)} {det.name} scores for {data.title} to {where}; {cut}{bad}",
        file=log,
    )
    if distributed.is_main():
        scores = np.concatenate(chunks) if chunks else np.empty(0)
        _summarise(args, det.name, data, scores, threshold, None if to_stdout else str(out), log)


def _summarise(
    args: argparse.Namespace,
    method: str,
    data: ImageStream,
    scores: np.ndarray,
    threshold: float | None,
    csv: str | None,
    log: TextIO,
) -> None:
    """After scoring: how many images the threshold calls OOD (each class's too, for a folder of class
    folders), and the ``--report`` page (its histogram, a class's each, and the most and least OOD
    images; files that could not be read, NaN, left out)."""
    import numpy as np

    from roseood.evaluation.gallery import extremes
    from roseood.evaluation.html_report import write_score_page
    from roseood.evaluation.scoring import flagged_text

    classes, readable = by_class(data, scores), scores[~np.isnan(scores)]  # unreadable files (NaN) left out
    if threshold is not None:
        print(flagged_text(readable, threshold), file=log)
        for name, part in classes.items():
            print(f"  {name}: {flagged_text(part, threshold)}", file=log)
    if args.report:
        shown = extremes(scores, lambda i: data.read(i, i + 1)[0], data.files, args.gallery)
        page = write_score_page(
            args.report,
            readable,
            shown,
            method=method,
            data_name=data.name,
            source=data.source,
            threshold=threshold,
            csv=csv,
            classes=classes,
        )
        print(f"wrote {page}", file=log)


def by_class(data: ImageStream, scores: np.ndarray) -> dict[str, np.ndarray]:
    """A folder of class folders' scores, class by class (``cats/``: its readable images' scores), for
    the classes it holds (a selection, ``@1``, keeps some); empty for any other set."""
    import numpy as np

    read = ~np.isnan(scores)
    labels = data.labels
    kept = [(k, name) for k, name in enumerate(data.classes or ()) if (labels == k).any()]
    return {f"{name}/": scores[read & (labels == k)] for k, name in kept}


def _state_scoring(
    args: argparse.Namespace, model: Any, det: Detector, data: ImageStream, pixels: int, log: TextIO
) -> None:
    """The lines before scoring: a DDPM's loss pairs as the detector set them, what a chunk holds, and a
    long run's time (its first progress line comes after a chunk), timed on a few of the images."""
    from roseood.contracts import SettableLoss
    from roseood.data.loading import read_readable
    from roseood.evaluation.forecast import forecast_scoring

    if isinstance(model, SettableLoss):  # a DDPM: the pairs its scores depend on, as the detector set them
        shown = ", ".join(f"{k} = {v}" for k, v in model.loss_settings().items())
        print(f"the model's per-image loss, as the detector was fitted: {shown}", file=log)
    print(
        f"scoring {len(data)} images, {args.chunk} read at a time per process (≈ "
        f"{5 * args.chunk * pixels / 2**20:.0f} MiB of decoded pixels, uint8 and float32, besides the "
        "detector's own)",
        file=log,
    )
    if not args.resume:
        timed, _ = read_readable(data, 0, min(len(data), FORECAST_IMAGES), lambda i, message: None)
        forecast_scoring(det, timed, len(data))


def _score_output(args: argparse.Namespace) -> Path:
    """``--out`` checked before any work: a file may be resumed (``--resume``), standard output or a
    device not; a partial file an interrupted run left is neither resumed nor replaced silently."""
    from roseood import distributed
    from roseood.csvfiles import GrowingCsv
    from roseood.serialization import written_in_place

    out = checked_output(args, args.out, stdout=True, resumed=False)
    if args.resume and written_in_place(out):
        raise RoseError(
            f"--resume continues a CSV file; {args.out} is written as it goes and cannot be resumed"
        )
    if not written_in_place(out):
        GrowingCsv.check(out, resume=args.resume, overwrite=args.overwrite)
    distributed.barrier()  # under torchrun every process checks before rank 0 starts the partial file
    return out


def register(sub: Any) -> None:
    """Add ``fit`` and ``score`` to the ``rose`` sub-parsers ``sub``."""
    from roseood.catalogue import family_methods, offered_methods

    offered = offered_methods()
    methods = ", ".join(offered)
    p = sub.add_parser("fit", help=COMMANDS["fit"])
    ensemble = "; give it again for an ensemble (one detector per model, their z-scores averaged)"
    add_eval_args(p, "in-distribution set (detectors are fitted on its training split)", ensemble)
    p.add_argument(
        "--method",
        type=v.cli_type(lambda text, _: v.check_choice(text, list(offered), "method"), str),
        help=f"one of: {methods} (unset: the model family's: {family_methods()})",
    )
    add_tpr(p)
    p.add_argument("--out", required=True, help="detector file to write")
    add_overwrite(p)
    add_preset(p)
    add_quiet(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("score", help=COMMANDS["score"])
    add_model_args(p, "; an ensemble's models again, in the order given to rose fit")
    p.add_argument("--detector", required=True, help="file written by `rose fit`")
    p.add_argument("--data", required=True, help="dataset name, .npz file or image folder")
    p.add_argument("--split", default="test", help="split of a named dataset")
    # not --n: torchrun's parser would take it for an abbreviation of --nnodes / --nproc-per-node
    p.add_argument("--subset", type=v.count, help="score a deterministic subset of this size (unset: all)")
    p.add_argument(
        "--threshold", type=v.finite_float, help="call scores above this OOD (unset: the detector's own)"
    )
    p.add_argument(
        "--out", required=True, help="CSV file: index, file, label, score, ood (- for standard output)"
    )
    add_overwrite(p)
    p.add_argument("--background", help="background model, for a saved lratio detector")
    p.add_argument("--chunk", type=v.count, default=2048, help="images read at a time per process")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run: the rows in OUT.partial are kept, the rest scored (the same "
        "detector, data and threshold)",
    )
    add_report_args(p, "an HTML page (index.html) with the histogram of the scores and the threshold")
    add_data_args(p)
    add_memory(p)
    add_quiet(p)
    p.set_defaults(func=cmd_score)
