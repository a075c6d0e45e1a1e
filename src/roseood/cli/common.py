"""What every ``rose`` command shares: the parser class, option groups, output checks, model loading."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from roseood import validation as v
from roseood.catalogue import DECISION_TPR, FIT_COUNTS, GALLERY, add_loss_options, family_counts
from roseood.errors import RoseError
from roseood.serialization import check_output
from roseood.settings import LOSS_SETTINGS, ROSE_SETTING, ROSE_SETTINGS, Setting

if TYPE_CHECKING:
    from roseood.models.base import RoseModel

MODEL_MODULE_HELP = (
    "Python code building your model: a function returning roseood.wrap(...) or a GenerativeModel"
)
# Options that name files or folders a command reads: an output may never be one of them.
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
# ``--in`` / ``--fit-data`` help: what they accept, and how a set without a training split is used
SPLIT_HELP = (
    "a dataset name, .npz file or image folder; one without a training split (and no --fit-data) is "
    "split at random (--seed) into fit, held-out statistics and test images: --test-samples test images (at "
    "most a fifth of the set), --stats-samples held out (at most half of the rest), the rest to fit; the "
    "split is printed; NAME@7 (@0-6+8-9) keeps those classes, the training split's too"
)


def csv_list(text: str) -> list[str]:
    """``a, b,c`` → ``["a", "b", "c"]``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def cli_names(choices: Iterable[str], what: str) -> Any:
    """An argparse ``type=`` for a comma-separated list of known names."""
    return v.cli_type(lambda text, _: list(v.check_names(text, choices, what)), str)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to every option's help, except flags and options whose help says what
    happens when they are unset."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Shows every option's default in ``--help`` and reports a bad option as one ``error:`` line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but an unknown option is reported by the command it was given to, whose
        ``--help`` lists the options there are (argparse reports it from ``rose`` itself)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: Any) -> argparse.ArgumentParser:
        """The innermost sub-command parser that ``parsed`` went through (this one where there is none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if chosen is not None:
                    return chosen._chosen(parsed) if isinstance(chosen, Parser) else chosen
        return self


def add_overwrite(p: argparse.ArgumentParser, *aliases: str) -> None:
    p.add_argument("--overwrite", *aliases, action="store_true", help="replace existing output files")


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        type=v.device,
        default="auto",
        help="auto (CUDA, then Apple MPS, then the CPU), cpu, cuda, cuda:N or mps; "
        "under torchrun each process takes the GPU of its local rank",
    )


def add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir", help="folder of dataset .npz files (unset: $ROSEOOD_DATA or ~/.cache/roseood/data)"
    )


def add_data_args(p: argparse.ArgumentParser, seed: int = 2021) -> None:
    """Data folder, seed, device and batch size: the options of every command that reads images."""
    add_data_dir(p)
    p.add_argument("--seed", type=v.seed, default=seed, help="seed (0 ≤ seed < 2**32) for subsets and noise")
    add_device(p)
    p.add_argument("--batch-size", type=v.count, default=64, help="images per forward/backward pass")


def add_memory(p: argparse.ArgumentParser) -> None:
    """``--memory``: the budget of the commands that fit or score detectors."""
    p.add_argument(
        "--memory",
        type=v.cli_type(_memory_size, str),
        metavar="SIZE",
        help=ROSE_SETTING["memory"].help,
    )


def _memory_size(text: str, _name: str) -> int:
    from roseood.memory import parse_size

    return parse_size(text)


def add_model_args(p: argparse.ArgumentParser, several: str = "") -> None:
    """``--model`` (repeatable when ``several`` says what a repeat means) and ``--model-module``."""
    text = "roseood model checkpoint (with --model-module: its weights)"
    p.add_argument("--model", action="append" if several else "store", help=f"{text}{several}")
    p.add_argument("--model-module", metavar="FILE.py:FACTORY", help=MODEL_MODULE_HELP)


def add_report_args(p: argparse.ArgumentParser, what: str) -> None:
    """``--report DIR`` and ``--gallery K``: the HTML page with ``what`` and the most and least OOD images."""
    p.add_argument(
        "--report",
        metavar="DIR",
        help=f"write into this folder {what}, and the most and least OOD images as thumbnails with "
        "their file names and scores; open DIR/index.html in a browser",
    )
    p.add_argument(
        "--gallery",
        type=v.non_negative,
        default=GALLERY,
        metavar="K",
        help="images shown at each end (most and least OOD) of every set in the --report page",
    )


def add_tpr(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tpr",
        type=v.rate,
        default=DECISION_TPR,
        help="decision threshold: this fraction of the held-out in-distribution images counts as in",
    )


# Sizes that finish in minutes on a 2-core CPU: option defaults a command takes with --preset NAME
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": {
        "fit_samples": 1000,
        "stats_samples": 250,
        "test_samples": 500,
        "bootstrap": 200,
        "subset": 2000,
        "epochs": 10,
    },
}


def add_preset(p: argparse.ArgumentParser) -> None:
    """``--preset NAME``: the command's options of ``PRESETS[NAME]`` as defaults (options given win)."""
    dests = {a.dest for a in p._actions}
    presets = {name: {k: v for k, v in values.items() if k in dests} for name, values in PRESETS.items()}
    text = "; ".join(
        f"{name}: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in values.items())
        for name, values in presets.items()
    )
    p.add_argument(
        "--preset",
        choices=presets,
        help=f"sizes for a short run ({text}); options given win; a smaller set gives what it has",
    )
    p.set_defaults(preset_defaults=(p, presets))


def apply_preset(parser: argparse.ArgumentParser, argv: Sequence[str] | None, args: Any) -> Any:
    """``args`` parsed again with the ``--preset``'s values as the command's defaults (unchanged without)."""
    if not getattr(args, "preset", None):
        return args
    command, presets = args.preset_defaults
    command.set_defaults(**presets[args.preset])
    return parser.parse_args(argv)


def add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or progress lines")


def _input_paths(args: argparse.Namespace) -> Iterator[Path]:
    """Every file or folder a command reads: path options as given and, for dataset names, their files."""
    from roseood.data import dataset_spec, resolve_data_dir

    for option in INPUT_OPTIONS:
        value = getattr(args, option, None)
        items = (
            value if isinstance(value, list) else csv_list(value) if option == "ood" and value else [value]
        )
        for item in (i for i in items if i):
            yield Path(item)
            spec = dataset_spec(item)
            if spec is not None:
                yield from (resolve_data_dir(args.data_dir) / spec.filename(s) for s in spec.splits)


def checked_output(
    args: argparse.Namespace,
    path: str,
    *,
    folder: bool = False,
    markers: Sequence[str] = (),
    stdout: bool = False,
    resumed: bool = True,
) -> Path:
    """Check one output of this command before any work (see ``serialization.check_output``): never an
    input, replaced only with ``--overwrite`` or, where ``resumed`` (a checkpoint ``rose train --resume``
    continues), ``--resume``; its folder writable (``stdout``: ``-`` allowed). Not ``resumed``: an output
    that ``--resume`` never continues (``rose score`` resumes a partial file beside it)."""
    resume = resumed and getattr(args, "resume", False)
    hint = "pass --resume to continue it, --overwrite to replace it" if resumed and "resume" in args else ""
    return check_output(
        path,
        inputs=_input_paths(args),
        overwrite=getattr(args, "overwrite", False) or resume,
        folder=folder,
        markers=markers,
        hint=hint or "pass --overwrite to replace it",
        stdout=stdout,
    )


def model_names(paths: list[str]) -> list[str]:
    """Short names for checkpoints: file stems, or the paths as given where two stems are the same."""
    stems = [Path(p).stem for p in paths]
    if len(set(paths)) < len(paths):
        raise RoseError(f"a model is named twice: {', '.join(paths)}")
    return stems if len(set(stems)) == len(stems) else list(paths)


def load_model_arg(args: argparse.Namespace, path: str | None = None) -> RoseModel:
    """The model of ``--model`` (``path`` when it was given several times) and/or ``--model-module``,
    on ``--device``."""
    from roseood import distributed
    from roseood.models import open_model

    model = open_model(path or args.model, getattr(args, "model_module", None))
    set_loss_args(args, model)
    return model.to(distributed.device(args.device))


def set_loss_args(args: argparse.Namespace, model: RoseModel) -> None:
    """The loss settings the detecting commands offer (``--rose-k`` / ``--rose-t-range``) and
    ``--condition``: set a diffusion model's (timestep, noise) pairs and how a class-conditional one is
    judged before anything is fitted (a detector file then records them); refused in one line for a model
    whose loss has none."""
    from roseood.contracts import SettableLoss
    from roseood.progress import state

    offered = [s for s in LOSS_SETTINGS if s.detecting]
    options: dict[str, Any] = {}
    for setting in offered:
        if getattr(args, setting.dest, None) is not None:
            options |= setting.config(getattr(args, setting.dest))
    if getattr(args, "condition", None) is not None:
        options["condition"] = args.condition
    if not options:
        return
    if not isinstance(model, SettableLoss):
        raise RoseError(
            f"{', '.join(s.option for s in offered)} and --condition set a diffusion model's per-image loss; "
            "this model's loss has none"
        )
    model.set_loss_settings(**options)
    pairs = model.loss_settings()
    keys = [*(k for s in offered for k in s.keys), "condition"]
    shown = ", ".join(f"{k} = {pairs[k]}" for k in keys if k in pairs)
    state(f"the model's per-image loss: {shown}")


def load_background_arg(args: argparse.Namespace) -> RoseModel | None:
    """The ``--background`` model (a built-in family's checkpoint) on ``--device``, or None."""
    if not args.background:
        return None
    from roseood import distributed
    from roseood.models import load_model

    return load_model(args.background).to(distributed.device(args.device))


def load_models_arg(args: argparse.Namespace) -> list[RoseModel]:
    """Every model of a repeated ``--model`` (an ensemble's members, in order); one model otherwise."""
    paths = args.model or [None]
    model_names([p for p in paths if p is not None])  # refuses a model named twice
    return [load_model_arg(args, path) for path in paths]


def add_eval_args(p: argparse.ArgumentParser, in_help: str, several: str = "") -> None:
    """The options of commands that fit detectors (``evaluate``, ``fit``): model, images, ROSE options."""
    add_model_args(p, several)
    p.add_argument(
        "--in",
        dest="in_data",
        help=f"{in_help}; {SPLIT_HELP} (unset: --fit-data, else a zoo model's own data set, else "
        "fashion_mnist for a grayscale model)",
    )
    p.add_argument(
        "--fit-data",
        help="images to fit detectors on: a dataset name, .npz file or image folder (unset: the training "
        "split of --in, or a random part of --in)",
    )
    fit, stats = FIT_COUNTS
    p.add_argument(
        "--fit-samples",
        type=v.count,
        help=f"images for the Fisher / detector fit (unset: the model family's, {family_counts()}; "
        f"else {fit})",
    )
    p.add_argument(
        "--stats-samples",
        type=v.count,
        help=f"further held-out images: ROSE layer statistics and the decision threshold (unset: the model "
        f"family's, else {stats})",
    )
    p.add_argument("--background", help="background model checkpoint for the lratio method")
    add_rose_args(p)
    add_data_args(p)
    add_memory(p)


def add_rose_args(p: argparse.ArgumentParser) -> None:
    """ROSE's own options, one per setting declared with a ``flag`` (``roseood.settings``; unset: the
    method's own), and a diffusion model's (timestep, noise) pairs and condition."""
    for setting in ROSE_SETTINGS:
        if setting.flag:
            p.add_argument(
                setting.option, choices=setting.choices, metavar=setting.metavar, help=_option_help(setting)
            )
    add_loss_options(p, trained=False)
    add_condition(p, "judged", "the mean over the classes, C× the cost", "; recorded in the detector file")


def add_condition(p: argparse.ArgumentParser, done: str, marginal: str, tail: str = "") -> None:
    """``--condition``: the condition a conditional diffusion model is ``done`` under (judged, drawn)."""
    p.add_argument(
        "--condition",
        metavar="SPEC",
        help=f"conditional diffusion models: how p(x) is {done}: marginal ({marginal}), null (the "
        "condition-dropout label, where the model has one) or label:N (p(x | y = N)); unset: the folder's "
        "roseood.json, else null where there is one, else marginal; text-conditioned ones (Stable "
        f"Diffusion folders): prompt:TEXT, p(x | TEXT) (unset: the empty prompt){tail}",
    )


def _option_help(setting: Setting) -> str:
    """A setting's help with its default, which the option itself leaves unset (the method's own)."""
    return setting.help if setting.default is None else f"{setting.help} (default: {setting.default})"


# given to every method whose detector takes them
DETECTOR_OPTIONS = tuple(s.name for s in ROSE_SETTINGS if s.flag)


def in_data_arg(args: argparse.Namespace, model: RoseModel) -> str:
    """``--in``; unset: ``--fit-data`` (the user's own images), else the training data of the zoo model(s)
    ``--model`` names, else ``fashion_mnist`` (the demo's) for a model of grayscale images. A colour model
    must be told its data: fitting it on grayscale clothes repeated to RGB is never what was meant."""
    from roseood.models.zoo import zoo_data, zoo_named
    from roseood.progress import note

    if args.in_data:
        return str(args.in_data)
    if getattr(args, "fit_data", None):
        return str(args.fit_data)
    paths = args.model if isinstance(args.model, list) else [args.model]
    zoo = {zoo_data(named[0]) for p in paths if p and (named := zoo_named(p)) is not None}
    if len(zoo) == 1:
        data = zoo.pop()
        note(f"--in {data}: the data set the zoo model was trained on")
        return data
    shape = model.input_shape
    if model.input_kind == "image" and shape is not None and shape[0] != 1:
        raise RoseError(
            f"name the model's in-distribution data with --in (a dataset name, .npz file or image folder): "
            f"the default, fashion_mnist, is grayscale and this model takes {shape[0]}-channel images"
        )
    return "fashion_mnist"


def sample_counts(args: argparse.Namespace, model: RoseModel) -> tuple[int, int]:
    """``--fit-samples`` and ``--stats-samples`` (a ``--preset``'s where set), else the model family's,
    said on one line when a family's differ from the paper's 10 000 + 2 000."""
    from roseood.models.families import default_counts
    from roseood.progress import note

    asked = (args.fit_samples, args.stats_samples)
    family = default_counts(model)
    counts = (family[0] if asked[0] is None else asked[0], family[1] if asked[1] is None else asked[1])
    flags = ("--fit-samples", "--stats-samples")
    unset = [f"{flag} {n}" for flag, a, n in zip(flags, asked, family, strict=True) if a is None]
    if unset and family != FIT_COUNTS:
        note(f"{' '.join(unset)}: this model family's default (docs/diffusion.md: what it was measured on)")
    return counts


def spec_from_args(args: argparse.Namespace, methods: list[str], model: RoseModel) -> Any:
    """The ``EvalSpec`` of ``rose evaluate`` / ``rose fit`` for ``model`` (an ensemble's first member):
    images and sizes, and each method's detector options (``--background`` for detectors that need one,
    ``--layers`` etc. for those that take them)."""
    from roseood.detectors import METHODS
    from roseood.evaluation.splits import EvalSpec

    kwargs: dict[str, dict[str, Any]] = {m: {} for m in methods}
    background = load_background_arg(args)
    for m in methods:
        if m not in METHODS:
            continue  # EvalSpec's users name the unknown method
        cls = METHODS[m].cls
        given = {k: getattr(args, k, None) for k in DETECTOR_OPTIONS if k in cls.param_names()}
        kwargs[m] |= {k: v for k, v in given.items() if v}
        if background is not None and "background" in cls.extra_models:
            kwargs[m]["background"] = background
    fields = ("test_samples", "brightness", "bootstrap", "match_jpeg")
    optional = {k: getattr(args, k) for k in fields if hasattr(args, k)}
    counts = sample_counts(args, model)
    return EvalSpec(
        in_data=in_data_arg(args, model),
        ood=csv_list(getattr(args, "ood", "")),
        methods=methods,
        fit_data=args.fit_data,
        fit_samples=counts[0],
        stats_samples=counts[1],
        seed=args.seed,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        detector_kwargs=kwargs,
        **optional,
    )
