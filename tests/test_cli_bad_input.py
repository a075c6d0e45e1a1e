"""Every class of bad input through the ``rose`` command: exit 2, exactly one ``error:`` line naming the
problem, no traceback, and every file in the working folder byte-identical afterwards (nothing written,
nothing overwritten). Most cases are refused before any data is loaded, which keeps the table fast.

``python -m docgen.bad_input_table`` runs the same table and prints it as "bad input → outcome".
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from roseood.cli import main
from roseood.detectors import NLL, ROSE
from roseood.models import VAE, save_model
from roseood.models.train import TrainConfig, train
from roseood.serialization import save_file

NO_GPU = not torch.cuda.is_available()


@dataclass(frozen=True)
class Case:
    """A bad command line (``{d}`` stands for the working folder) and a phrase its error must contain."""

    what: str
    args: tuple[str, ...]
    message: str


def _tiny_vae(seed: int) -> VAE:
    torch.manual_seed(seed)
    vae = VAE(ngf=4, nz=4)
    vae.train()
    with torch.no_grad():
        vae.train_loss(torch.rand(8, 1, 32, 32))
    return vae.eval()


def make_workdir(root: Path) -> Path:
    """Inputs the cases point at: tiny datasets, models (good, corrupt, 64×64, zero width), a fitted
    detector, a trained checkpoint, an image folder, existing outputs, a finished bench report."""
    rng = np.random.default_rng(0)
    data = root / "data"
    data.mkdir(parents=True)
    images = rng.integers(0, 256, (24, 28, 28), dtype=np.uint8)
    for name in ("fashion_mnist_train", "fashion_mnist_test", "mnist_test"):
        np.savez_compressed(data / f"{name}.npz", images=images, labels=np.zeros(24, np.int64))
    np.savez_compressed(root / "victim.npz", images=images)
    model = _tiny_vae(0)
    save_model(model, root / "model.pt")
    save_model(_tiny_vae(1), root / "other.pt")
    obj = torch.load(root / "model.pt", weights_only=True)
    save_file(obj | {"config": obj["config"] | {"image_size": 64}}, root / "big64.pt")  # edits: resealed
    save_file(obj | {"config": obj["config"] | {"ngf": 0}}, root / "zero.pt")
    (root / "corrupt.pt").write_bytes(b"not a checkpoint")
    torch.save(model.state_dict(), root / "weights.pt")  # weights alone, as torch.save writes them
    square = rng.integers(0, 256, (16, 1, 32, 32), dtype=np.uint8)
    NLL(model).fit(square[:4]).save(root / "det.pt")
    cfg = TrainConfig.for_model("vae", epochs=1, seed=0)
    train(VAE(ngf=4, nz=4), square, cfg, root / "trained.pt", progress=False)
    old = torch.load(root / "trained.pt", weights_only=False)  # as written before data digests existed
    old["train_state"].pop("data_digest")
    save_file(old, root / "undigested.pt")
    (root / "imgs").mkdir()
    for i in range(2):
        Image.fromarray(np.full((30, 30, 3), 60 * i, np.uint8)).save(root / "imgs" / f"{i}.png")
    (root / "existing.csv").write_text("keep\n")
    (root / "afile").write_text("a file, not a folder\n")
    (root / "adir").mkdir()
    (root / "rep").mkdir()
    (root / "rep" / "report.md").write_text("# an earlier report\n")
    (root / "bench" / "cpu" / "table2").mkdir(parents=True)
    (root / "bench" / "cpu" / "table2" / "report.md").write_text("# full report\n")
    make_poisoned_files(root, obj)
    det = torch.load(root / "det.pt", weights_only=True)
    save_file(det | {"method": "rose"}, root / "relabelled.pt")  # hand edits, checksum recomputed
    save_file(det | {"params": det["params"] | {"evil": 1}}, root / "unknown-param.pt")
    save_file(det | {"threshold": "high"}, root / "threshold-text.pt")
    rose = ROSE(model, fisher="diag", layers=["encoder.mu"], progress=False).fit(square[:8])
    rose.save(root / "rose.pt")
    saved = torch.load(root / "rose.pt", weights_only=True)
    kinds = dict.fromkeys(saved["state"]["kinds"], "ekfac")  # every layer claims an EKFAC it does not hold
    changed = {"params": saved["params"] | {"fisher": "ekfac"}, "state": saved["state"] | {"kinds": kinds}}
    save_file(saved | changed, root / "fisher-changed.pt")
    raw = (root / "rose.pt").read_bytes()
    at = raw.index(saved["state"]["fishers"]["encoder.mu"]["sq"].numpy().tobytes()) + 5
    (root / "flipped.pt").write_bytes(raw[:at] + bytes([raw[at] ^ 0x10]) + raw[at + 1 :])
    return root


PAYLOAD = """
from pathlib import Path
from typing import Any
Path(__file__).with_name("PWNED").write_text("a data file ran code")
def build():
    raise SystemExit("payload ran")
"""


def make_poisoned_files(root: Path, model: dict[str, Any]) -> None:
    """Checkpoints that name code to run: a payload file (absolute and relative) and ``os:abort``, in a
    file sealed like a genuine one. Loading any of them must never run it (the payload would write
    ``PWNED``, which the snapshot comparison would see)."""
    (root / "payload.py").write_text(PAYLOAD)
    user = model | {"kind": "wrapped"}
    save_file(user | {"factory": f"{root}/payload.py:build"}, root / "poison.pt")
    save_file(user | {"factory": "payload.py:build"}, root / "poison-relative.pt")
    save_file(user | {"factory": "os:abort"}, root / "poison-abort.pt")


TRAIN = ("train", "vae", "--subset", "16", "--size", "32", "--ngf", "4", "--nz", "4", "--epochs", "1")
GLOW = ("train", "glow", "--subset", "16", "--epochs", "1", "--out", "{d}/g.pt")
EVAL = ("evaluate", "--model", "{d}/model.pt", "--ood", "mnist", "--fit-samples", "8", "--stats-samples", "4")
FIT = ("fit", "--model", "{d}/model.pt", "--method", "nll", "--fit-samples", "8", "--stats-samples", "4")
SCORE = ("score", "--model", "{d}/model.pt", "--detector", "{d}/det.pt", "--data", "mnist")
BENCH = ("bench", "table2", "--profile", "smoke", "--out", "{d}/bench")
DEMO = ("demo",)
POISON = ("score", "--detector", "{d}/det.pt", "--data", "mnist", "--out", "{d}/o.csv", "--model")


def _c(what: str, message: str, *args: str) -> Case:
    return Case(what, args, message)


CASES = [
    # counts, floats, seeds, devices, model config: refused while parsing, before any work
    _c("train --epochs 0", "positive integer", *TRAIN[:-2], "--epochs", "0", "--out", "{d}/m0.pt"),
    _c("train --epochs -1", "positive integer", *TRAIN[:-2], "--epochs", "-1", "--out", "{d}/m.pt"),
    _c("train --epochs 1.5", "expected an integer", *TRAIN[:-2], "--epochs", "1.5", "--out", "{d}/m.pt"),
    _c("train --batch-size 0", "positive integer", *TRAIN, "--batch-size", "0", "--out", "{d}/m.pt"),
    _c("train --seed -1", "non-negative integer", *TRAIN, "--seed", "-1", "--out", "{d}/m.pt"),
    _c("train --seed 2**70", "< 2**32", *TRAIN, "--seed", str(2**70), "--out", "{d}/m.pt"),
    _c("train --seed 2**32", "< 2**32", *TRAIN, "--seed", str(2**32), "--out", "{d}/m.pt"),
    _c("train --seed abc", "expected an integer", *TRAIN, "--seed", "abc", "--out", "{d}/m.pt"),
    _c("train --device foo", "not a device", *TRAIN, "--device", "foo", "--out", "{d}/m.pt"),
    _c("train --device tpu", "not a device", *TRAIN, "--device", "tpu", "--out", "{d}/m.pt"),
    _c("train --device cuda (no GPU)", "no CUDA GPU", *TRAIN, "--device", "cuda", "--out", "{d}/m.pt"),
    _c("train --device cuda:7", "CUDA", *TRAIN, "--device", "cuda:7", "--out", "{d}/m.pt"),
    _c("train --lr nan", "finite", *TRAIN, "--lr", "nan", "--out", "{d}/m.pt"),
    _c("train --lr inf", "finite", *TRAIN, "--lr", "inf", "--out", "{d}/m.pt"),
    _c("train --lr 0", "must be in (0", *TRAIN, "--lr", "0", "--out", "{d}/m.pt"),
    _c("train --lr -1", "must be in (0", *TRAIN, "--lr", "-1", "--out", "{d}/m.pt"),
    _c("train --lr x", "expected a number", *TRAIN, "--lr", "x", "--out", "{d}/m.pt"),
    _c("train --ngf 0", "positive integer", *TRAIN, "--ngf", "0", "--out", "{d}/m.pt"),
    _c("train --nz -3", "positive integer", *TRAIN, "--nz", "-3", "--out", "{d}/m.pt"),
    _c("train glow --levels 0", "positive integer", *GLOW, "--levels", "0"),
    _c("train glow --steps 0", "positive integer", *GLOW, "--steps", "0"),
    _c("train glow --hidden -1", "positive integer", *GLOW, "--hidden", "-1"),
    _c("train --channels 2", "channel count", *TRAIN, "--channels", "2", "--out", "{d}/m.pt"),
    _c("train --subset -5", "positive integer", *TRAIN, "--subset", "-5", "--out", "{d}/m.pt"),
    _c("train --subset 0", "positive integer", *TRAIN, "--subset", "0", "--out", "{d}/m.pt"),
    _c("train --weight-decay -1", "must be in [0", *TRAIN, "--weight-decay", "-1", "--out", "{d}/m.pt"),
    _c("train --grad-clip nan", "finite", *TRAIN, "--grad-clip", "nan", "--out", "{d}/m.pt"),
    _c("train --warmup -1", "non-negative", *TRAIN, "--warmup", "-1", "--out", "{d}/m.pt"),
    _c("train unknown model kind", "invalid choice", "train", "pixel", "--out", "{d}/m.pt"),
    _c("train without --out", "required", "train", "vae"),
    # outputs: checked before the work
    _c("train --out an existing model", "--resume", *TRAIN, "--out", "{d}/model.pt"),
    _c("train --out a folder", "is a folder", *TRAIN, "--out", "{d}/adir"),
    _c("train --out unwritable (/proc)", "cannot write", *TRAIN, "--out", "/proc/rose-m.pt"),
    _c("train --out under a file", "is a file", *TRAIN, "--out", "{d}/afile/m.pt"),
    _c(
        "train --out = --data", "also an input", *TRAIN, "--data", "{d}/victim.npz", "--out", "{d}/victim.npz"
    ),
    _c("train --out = dataset file", "also an input", *TRAIN, "--out", "{d}/data/fashion_mnist_train.npz"),
    _c(
        "train --resume on other data",
        "trained on other data",
        *TRAIN[:-2],
        "--epochs",
        "2",
        "--resume",
        "--out",
        "{d}/trained.pt",
    ),
    _c(
        "train --resume a checkpoint without a data digest",
        "records no digest of its training data",
        *TRAIN[:-2],
        "--epochs",
        "2",
        "--resume",
        "--out",
        "{d}/undigested.pt",
    ),
    _c(
        "train --resume other settings",
        "other settings",
        *TRAIN,
        "--lr",
        "0.1",
        "--resume",
        "--out",
        "{d}/trained.pt",
    ),
    _c("train --resume a detector", "expected a roseood-model", *TRAIN, "--resume", "--out", "{d}/det.pt"),
    _c(
        "train --data missing",
        "neither a known dataset",
        *TRAIN,
        "--data",
        "{d}/nothere.npz",
        "--out",
        "{d}/m.pt",
    ),
    _c("train --perturb bogus", "perturbation", *TRAIN, "--perturb", "bogus:1", "--out", "{d}/m.pt"),
    # evaluate
    _c("evaluate --fit-samples -5", "positive integer", *EVAL, "--fit-samples", "-5"),
    _c("evaluate --fit-samples 0", "positive integer", *EVAL, "--fit-samples", "0"),
    _c("evaluate --test-samples -1", "positive integer", *EVAL, "--test-samples", "-1"),
    _c("evaluate --stats-samples 0", "positive integer", *EVAL, "--stats-samples", "0"),
    _c("evaluate --brightness 0", "must be in (0", *EVAL, "--brightness", "0"),
    _c("evaluate --brightness nan", "finite", *EVAL, "--brightness", "nan"),
    _c("evaluate --batch-size 0", "positive integer", *EVAL, "--batch-size", "0"),
    _c("evaluate --seed -1", "non-negative", *EVAL, "--seed", "-1"),
    _c("evaluate --methods magic", "unknown method", *EVAL, "--methods", "magic"),
    _c("evaluate --methods ''", "no methods", *EVAL, "--methods", ","),
    _c("evaluate --model missing", "no such file", *EVAL, "--model", "{d}/missing.pt"),
    _c("evaluate --model corrupt", "not a readable checkpoint", *EVAL, "--model", "{d}/corrupt.pt"),
    _c("evaluate --model config 64×64", "weights do not match", *EVAL, "--model", "{d}/big64.pt"),
    _c("evaluate --model config ngf 0", "ngf must be", *EVAL, "--model", "{d}/zero.pt"),
    _c("evaluate --model a dataset", "not a readable checkpoint", *EVAL, "--model", "{d}/victim.npz"),
    _c("evaluate --json = --model", "also an input", *EVAL, "--json", "{d}/model.pt"),
    _c(
        "evaluate --json = an OOD file",
        "also an input",
        *EVAL,
        "--ood",
        "{d}/victim.npz",
        "--json",
        "{d}/victim.npz",
    ),
    _c("evaluate --json a folder", "is a folder", *EVAL, "--json", "{d}/adir"),
    _c("evaluate --json existing", "--overwrite", *EVAL, "--json", "{d}/existing.csv"),
    _c("evaluate --json unwritable", "cannot write", *EVAL, "--json", "/proc/rose-r.json"),
    _c("evaluate --report a file", "is a file", *EVAL, "--report", "{d}/afile"),
    _c("evaluate --report existing report", "--overwrite", *EVAL, "--report", "{d}/rep"),
    _c(
        "evaluate --report = image folder",
        "also an input",
        *EVAL,
        "--ood",
        "{d}/imgs",
        "--report",
        "{d}/imgs",
    ),
    _c("evaluate --in unknown", "neither a known dataset", *EVAL, "--in", "imagenet"),
    _c("evaluate --layers unknown", "layer set", *EVAL, "--methods", "rose-diag", "--layers", "middle"),
    _c("evaluate --ood missing file", "nothere", *EVAL, "--ood", "{d}/nothere.npz"),
    _c("evaluate --in a class it lacks", "no images of class 12", *EVAL, "--in", "fashion_mnist@12"),
    _c("evaluate --ood classes of noise", "no classes to select", *EVAL, "--ood", "noise@3"),
    _c("evaluate --in a backward range", "runs backwards", *EVAL, "--in", "fashion_mnist@5-2"),
    _c("evaluate --ood classes before the split", "after the split", *EVAL, "--ood", "mnist@7:test"),
    _c("evaluate --ood the --in set", "is the in-distribution set itself", *EVAL, "--in", "mnist"),
    # fit
    _c("fit --out = --model", "also an input", *FIT, "--out", "{d}/model.pt"),
    _c("fit --out existing detector", "--overwrite", *FIT, "--out", "{d}/det.pt"),
    _c("fit --out a folder", "is a folder", *FIT, "--out", "{d}/adir"),
    _c("fit --tpr 0", "must be in (0", *FIT, "--tpr", "0", "--out", "{d}/d.pt"),
    _c("fit --tpr 1.5", "must be in (0", *FIT, "--tpr", "1.5", "--out", "{d}/d.pt"),
    _c("fit --tpr nan", "finite", *FIT, "--tpr", "nan", "--out", "{d}/d.pt"),
    _c("fit --method magic", "unknown method", *FIT, "--method", "magic", "--out", "{d}/d.pt"),
    _c("fit rose-bands on a VAE", "one row per image", *FIT, "--method", "rose-bands", "--out", "{d}/d.pt"),
    _c(
        "evaluate --save-detector two methods",
        "saves one detector",
        *EVAL,
        "--methods",
        "nll,rose-diag",
        "--save-detector",
        "{d}/d.pt",
    ),
    # score
    _c(
        "score --out = --data",
        "also an input",
        *SCORE[:-2],
        "--data",
        "{d}/victim.npz",
        "--out",
        "{d}/victim.npz",
    ),
    _c("score --out = --model", "also an input", *SCORE, "--out", "{d}/model.pt"),
    _c("score --out = --detector", "also an input", *SCORE, "--out", "{d}/det.pt"),
    _c("score --out = image folder", "also an input", *SCORE[:-2], "--data", "{d}/imgs", "--out", "{d}/imgs"),
    _c("score --out existing", "--overwrite", *SCORE, "--out", "{d}/existing.csv"),
    _c("score --out a folder", "is a folder", *SCORE, "--out", "{d}/adir"),
    _c("score --out unwritable", "cannot write", *SCORE, "--out", "/proc/rose-s.csv"),
    _c("score --threshold nan", "finite", *SCORE, "--threshold", "nan", "--out", "{d}/s.csv"),
    _c("score --subset 0", "positive integer", *SCORE, "--subset", "0", "--out", "{d}/s.csv"),
    _c(
        "score --detector a model",
        "expected a roseood-detector",
        *SCORE[:4],
        "{d}/model.pt",
        "--data",
        "mnist",
        "--out",
        "{d}/s.csv",
    ),
    _c(
        "score detector of another model",
        "fitted on model",
        "score",
        "--model",
        "{d}/other.pt",
        *SCORE[3:],
        "--out",
        "{d}/s.csv",
    ),
    _c(
        "score one detector with two models",
        "not an ensemble",
        *SCORE,
        "--model",
        "{d}/other.pt",
        "--out",
        "{d}/s.csv",
    ),
    _c(
        "score --data missing",
        "neither a known dataset",
        *SCORE[:-2],
        "--data",
        "nothere",
        "--out",
        "{d}/s.csv",
    ),
    _c("score --split unknown", "has no split", *SCORE, "--split", "valid", "--out", "{d}/s.csv"),
    # import-vae
    _c(
        "import-vae --out existing",
        "--overwrite",
        "import-vae",
        "--encoder",
        "{d}/e",
        "--decoder",
        "{d}/g",
        "--out",
        "{d}/model.pt",
    ),
    _c(
        "import-vae --out = --encoder",
        "also an input",
        "import-vae",
        "--encoder",
        "{d}/det.pt",
        "--decoder",
        "{d}/g",
        "--out",
        "{d}/det.pt",
    ),
    _c(
        "import-vae missing files",
        "no such file",
        "import-vae",
        "--encoder",
        "{d}/e",
        "--decoder",
        "{d}/g",
        "--out",
        "{d}/new.pt",
    ),
    # bench: refused before any report or folder is touched
    _c("bench --datasets typo", "unknown bench dataset", *BENCH, "--datasets", "fashon_mnist"),
    _c("bench --models typo", "unknown bench model", *BENCH, "--models", "vea"),
    _c("bench unknown experiment", "unknown experiment", "bench", "table99", "--out", "{d}/bench"),
    _c("bench --profile unknown", "unknown profile", *BENCH, "--profile", "huge"),
    _c("bench --out a file", "is a file", "bench", "table2", "--profile", "smoke", "--out", "{d}/afile"),
    _c("bench --device cuda (no GPU)", "no CUDA GPU", *BENCH, "--device", "cuda"),
    # demo
    _c("demo --fit-samples -1", "positive integer", *DEMO, "--fit-samples", "-1"),
    _c("demo --test-samples -1", "positive integer", *DEMO, "--test-samples", "-1"),
    _c("unknown command", "invalid choice", "frobnicate"),
    # files that name code, damaged or edited files, outputs that are no files (issue 30)
    _c(
        "check-model --model weights alone",
        "--model-module FILE.py:FACTORY and this file as --model",
        "check-model",
        "--model",
        "{d}/weights.pt",
    ),
    _c(
        "check-model --model a folder of images",
        "a folder without a model",
        "check-model",
        "--model",
        "{d}/imgs",
    ),
    _c(
        "score --detector a folder",
        "imgs: a folder, not a file",
        *SCORE[:4],
        "{d}/imgs",
        *SCORE[5:],
        "--out",
        "{d}/o.csv",
    ),
    _c(
        "score --detector weights alone",
        "expected a roseood-detector file, found a bare state dict",
        *SCORE[:4],
        "{d}/weights.pt",
        *SCORE[5:],
        "--out",
        "{d}/o.csv",
    ),
    _c("score --model names a payload file", "never run from a file", *POISON, "{d}/poison.pt"),
    _c(
        "fit --model names a payload file",
        "never run from a file",
        *FIT[:2],
        "{d}/poison.pt",
        *FIT[3:],
        "--out",
        "{d}/o.pt",
    ),
    _c(
        "check-model names a relative payload",
        "pass --model-module payload.py:build",
        "check-model",
        "--model",
        "{d}/poison-relative.pt",
    ),
    _c(
        "evaluate --model names os:abort",
        "pass --model-module os:abort",
        "evaluate",
        "--model",
        "{d}/poison-abort.pt",
        *EVAL[3:],
    ),
    _c(
        "evaluate --background names a payload",
        "never run from a file",
        *EVAL,
        "--methods",
        "lratio",
        "--background",
        "{d}/poison.pt",
    ),
    _c(
        "score --detector with a flipped byte",
        "checksum mismatch",
        *SCORE[:-4],
        "--detector",
        "{d}/flipped.pt",
        *SCORE[-2:],
        "--out",
        "{d}/o.csv",
    ),
    _c(
        "score --detector method relabelled",
        "unknown parameter of a rose detector",
        *SCORE[:-4],
        "--detector",
        "{d}/relabelled.pt",
        *SCORE[-2:],
        "--out",
        "{d}/o.csv",
    ),
    _c(
        "score --detector unknown parameter",
        "params.'evil': unknown parameter",
        *SCORE[:-4],
        "--detector",
        "{d}/unknown-param.pt",
        *SCORE[-2:],
        "--out",
        "{d}/o.csv",
    ),
    _c(
        "score --detector threshold as text",
        "field 'threshold' must be",
        *SCORE[:-4],
        "--detector",
        "{d}/threshold-text.pt",
        *SCORE[-2:],
        "--out",
        "{d}/o.csv",
    ),
    _c(
        "score --detector Fisher type changed",
        "ekfac Fisher of layer encoder.mu: field 'u_in' is missing",
        *SCORE[:-4],
        "--detector",
        "{d}/fisher-changed.pt",
        *SCORE[-2:],
        "--out",
        "{d}/o.csv",
    ),
    _c("fit --out - (a checkpoint to stdout)", "cannot be standard output", *FIT, "--out", "-"),
    *(  # a device or FIFO --out is refused before any work (a FIFO with no reader blocked forever)
        [_c("score --out /dev/full", "is not a regular file", *SCORE, "--out", "/dev/full", "--overwrite")]
        if Path("/dev/full").exists()
        else []
    ),
    # reported by the command it was given to, whose --help lists the options there are
    _c("unknown option", "--colour (see `rose datasets --help`)", "datasets", "--colour"),
    _c("unknown option, nested", "--bad (see `rose train vae --help`)", *TRAIN, "--bad", "--out", "{d}/m"),
]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones included) with a hash of its bytes."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run_case(case: Case, root: Path) -> tuple[int, str]:
    """Run one case in-process from ``root``; return the exit status and what went to stderr."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([a.replace("{d}", str(root)) for a in case.args])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workdir(tmp_path_factory.mktemp("bad-input"))


def test_the_table_covers_sixty_cases() -> None:
    assert len(CASES) >= 60 and len({c.what for c in CASES}) == len(CASES)


def shown(err: str, root: Path) -> str:
    """What a case printed, as bad-input.md's table shows it: one line, paths relative to ``root``."""
    return " / ".join(err.strip().splitlines()).replace(str(root), ".").replace("|", r"\|")


RECORDED = Path(__file__).parents[1] / "docs" / "generated" / "bad-input-cases.md"
ROW = r"^\| \d+ \| `(.*?)` \| \d+ \| (.*) \| (?:yes|\*\*no\*\*) \|$"


RECORDED_UNDER = "<!-- recorded under Python {}.{} -->"


@functools.cache
def recorded() -> dict[str, str] | None:
    """bad-input.md's recorded table (``docgen.bad_input_table``): each case's shown output; None under
    another Python than the one it was recorded under (argparse words its errors by version)."""
    table = RECORDED.read_text("utf-8")
    if not table.startswith(RECORDED_UNDER.format(*sys.version_info[:2])):
        return None
    return dict(re.findall(ROW, table, re.MULTILINE))


def assert_one_error_line(case: Case, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``case`` run in ``workdir``: exit 2, one error line with its message, no traceback, no file touched;
    what it printed (``shown``)."""
    monkeypatch.setenv("ROSEOOD_DATA", str(workdir / "data"))
    monkeypatch.chdir(workdir)
    before = snapshot(workdir)
    code, err = run_case(case, workdir)
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 2, err
    assert len(lines) == 1 and case.message in lines[0], err
    assert "Traceback" not in err
    assert snapshot(workdir) == before
    return shown(err, workdir)


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_bad_input_gives_one_error_line_and_touches_nothing(
    case: Case, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "cuda" in case.what and not NO_GPU:
        pytest.skip("a GPU is present")
    line = assert_one_error_line(case, workdir, monkeypatch)
    # bad-input.md shows each case's recorded output: a changed message needs it recorded again
    table = recorded()
    assert table is None or table.get(case.what) == line, f"python -m docgen.bad_input_table > {RECORDED}"
