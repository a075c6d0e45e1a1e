"""torchrun, 2 CPU processes (gloo): fit and scores equal 1 process (a VAE, five Fisher kinds fitted
together, a latent diffusion model, a DiT and a Stable Diffusion folder's LoRA), DDP training resumes
(inside an epoch too), a failing rank ends the job.

The test launches this very file under ``python -m torch.distributed.run``; run as a script it is the
worker (see ``worker``), which writes what rank 0 saw for the test to compare with a 1-process run, then
fails on rank 1. One job for both: each launch starts three Python processes that import torch (about
9 s of CPU).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import roseood
from roseood import distributed
from roseood.cli import main
from roseood.detectors import NLL, ROSE, Detector, Ensemble, LikelihoodRegret
from roseood.detectors.rose import fit_together
from roseood.errors import RoseError
from roseood.evaluation.metrics import ood_metrics
from roseood.models import VAE, load_model, save_model

LAYERS = ["encoder.conv0", "encoder.conv1", "encoder.conv2"]  # full-rank factors on 24 images
# each Fisher kind, and EKFAC with the likelihood adjustment (its trend is fitted on gathered losses)
CASES: dict[str, dict[str, str]] = {
    "ekfac": {"fisher": "ekfac"},
    "kfac": {"fisher": "kfac"},
    "diag": {"fisher": "diag"},
    "ekfac, adjust=both": {"fisher": "ekfac", "adjust": "both"},
}
TIMEOUT_S = 120

pytestmark = pytest.mark.slow  # each launch starts two Python processes with torch (several seconds)


def tiny_setup() -> tuple[VAE, torch.Tensor]:
    """The same tiny VAE (BN statistics set) and 40 images in every process."""
    torch.manual_seed(0)
    model = VAE(in_channels=1, ngf=4, nz=4)
    model.train()
    with torch.no_grad():
        model.train_loss(torch.rand(32, 1, 32, 32))
    return model.eval(), torch.rand(40, 1, 32, 32, generator=torch.Generator().manual_seed(1))


def fit_and_score(model: VAE, x: torch.Tensor) -> dict[str, dict[str, object]]:
    """Per case: fitted state, in-distribution and OOD scores, and their AUROC."""
    out: dict[str, dict[str, object]] = {}
    noise = torch.rand(9, 1, 32, 32, generator=torch.Generator().manual_seed(2))
    for case, options in CASES.items():
        det = ROSE(model, layers=LAYERS, batch_size=5, **options).fit(x[:24], held_out=x[24:33])
        s_in, s_out = det.score(x[33:]), det.score(noise)
        out[case] = {
            "state": det.state(),
            "in": s_in,
            "out": s_out,
            "auroc": ood_metrics(s_in, s_out)["auroc"],
        }
    # an ensemble (ROSE-diag and -kfac): members fitted and scaled on sharded held-out scores
    ens = Ensemble([ROSE(model, layers=LAYERS, batch_size=5, fisher=f) for f in ("diag", "kfac")])
    ens.fit(x[:24], held_out=x[24:33])
    out["ensemble"] = {"scale": (ens.mean_, ens.std_), "in": ens.score(x[33:]), "out": ens.score(noise)}
    # the kinds rose evaluate fits together, in one set of passes: each kind's sums reduced, compact EKFAC
    # and KFAC-Tikhonov on the eigendecompositions rank 0 shares
    lead = ROSE(model, layers=LAYERS, batch_size=5, fisher="ekfac")
    kinds = ("ekfac-compact", "kfac-tikhonov", "kfac", "diag")
    beside = [ROSE(model, layers=LAYERS, batch_size=5, fisher=k).fisher_arguments for k in kinds]
    out["joint"] = {f.arguments.fisher: f.state() for f in fit_together(lead, x[:24], beside)[0]}
    # sampled scores draw every image's noise from the seed and the image: equal whatever the shard
    sampled: dict[str, Detector] = {
        "nll": NLL(model, batch_size=5),
        "iwae": NLL(model, k=5, batch_size=5),
        "lr": LikelihoodRegret(model, steps=2, k=3, batch_size=5),
        "rose stochastic": ROSE(model, layers=LAYERS, fisher="diag", stochastic=True, batch_size=5),
    }
    out["sampled"] = {n: d.fit(x[:24], held_out=x[24:33]).score(x[33:]) for n, d in sampled.items()}
    return out


KINDS = ("ldm", "dit", "flow", "conditional", "text")  # the diffusion kinds beyond the pixel DDPM


def latent_fit_and_score(folder: Path) -> dict[str, dict[str, object]]:
    """ROSE (diagonal Fisher: a state without eigenbases to compare exactly) on the tiny latent diffusion
    model (VQModel + UNet), DiT, flow-matching, class-conditional (the marginal) and text-conditioned (a
    Stable Diffusion folder with a LoRA: the adapter's layers) folders: fitted state and scores, from the
    same images in every process; the encoder runs on each process's shard."""
    out: dict[str, dict[str, object]] = {}
    for name in KINDS:
        model = load_model(folder / name)
        x = torch.rand(20, *model.input_shape, generator=torch.Generator().manual_seed(3))
        det = ROSE(model, fisher="diag", batch_size=4).fit(x[:10], held_out=x[10:16])
        out[name] = {"state": det.state(), "scores": det.score(x[16:])}
    return out


def worker(folder: Path) -> None:
    """One process of the torchrun job: the work the test compares with one process, then a failure."""
    assert distributed.init(timeout_s=60) and distributed.world() == 2
    model, x = tiny_setup()
    result = fit_and_score(model, x)
    if distributed.is_main():
        torch.save(result, folder / "two.pt")
    # the CLI under torchrun: streamed folder scoring, chunks of 3 images per process
    det = ROSE(model, fisher="ekfac", layers=LAYERS).fit(x[:24], held_out=x[24:33])
    det.save(folder / "det.pt")
    args = ["score", "--model", str(folder / "m.pt"), "--detector", str(folder / "det.pt")]
    code = main([*args, "--data", str(folder / "pngs"), "--out", str(folder / "two.csv"), "--chunk", "3"])
    assert code == 0
    # training under DDP: one epoch, then resumed for a second
    train = [
        "train",
        "vae",
        "--data",
        str(folder / "train.npz"),
        "--ngf",
        "4",
        "--nz",
        "4",
        "--batch-size",
        "8",
    ]
    for epochs, extra in (("1", []), ("2", ["--resume"])):
        assert main([*train, "--out", str(folder / "vae.pt"), "--epochs", epochs, *extra]) == 0
    resumed_within_an_epoch(folder)
    latent = latent_fit_and_score(folder)
    if distributed.is_main():
        torch.save(latent, folder / "latent-two.pt")
    distributed.barrier()  # both ranks' work is done and saved
    (folder / f"done-{os.environ['RANK']}").touch()  # this rank's work ended (see explain)
    sys.stdout.flush()  # the lines the test counts, before torchrun ends this process below
    # a failing rank: rank 1 raises while rank 0 waits for it in a fit's collective; torchrun ends both
    if distributed.rank() == 1:
        (folder / "failed").touch()
        raise RoseError("injected failure on rank 1")
    ROSE(model, fisher="ekfac", layers=LAYERS).fit(x[:24], held_out=x[24:])


def resumed_within_an_epoch(folder: Path) -> None:
    """A checkpoint written inside an epoch (every batch) under two processes, copied after batch 3 and
    resumed under two, ends with the weights of an uninterrupted two-process run (each process's
    generators and sums came back)."""
    import shutil

    from roseood.models.train import TrainConfig, train
    from tests.models.test_train_within_epoch import assert_same_run, vae

    x, cfg = torch.rand(48, 1, 32, 32, generator=torch.Generator().manual_seed(5)), TrainConfig(2, 8, seed=2)
    run, kept = folder / "within.pt", folder / "kept.pt"

    def keep(k: int) -> None:
        if k == 3 and distributed.is_main():
            shutil.copy(run, kept)

    train(vae(), x, cfg, folder / "whole.pt", progress=False, checkpoint_every=None)
    train(vae(keep), x, cfg, run, progress=False, checkpoint_every=0.0)
    distributed.barrier()
    assert "partial" in torch.load(kept, weights_only=True)["train_state"]
    train(vae(), x, cfg, kept, resume=True, progress=False)
    if distributed.is_main():
        assert_same_run(kept, folder / "whole.pt")


def launch(folder: Path) -> subprocess.CompletedProcess[str]:
    src = str(Path(roseood.__file__).resolve().parents[1])
    root = str(Path(__file__).resolve().parents[1])  # the worker imports the tests' own helpers
    env = os.environ | {"PYTHONPATH": os.pathsep.join([src, root, os.environ.get("PYTHONPATH", "")])}
    env |= {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [__file__, str(folder)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def explain(run: subprocess.CompletedProcess[str], folder: Path) -> str:
    """Why a job failed otherwise than by its injected failure, for the assertion message: which ranks got
    through their work, and stderr without the warnings, so a rank's own error is not cut off by
    torchrun's summary."""
    done = sorted(p.name for p in folder.glob("done-*"))
    lines, keep = run.stderr.splitlines(), []
    for i, line in enumerate(lines):
        after_warning = i > 0 and "Warning: " in lines[i - 1] and line.startswith(" ")
        if "Warning: " not in line and not after_warning:
            keep.append(line)
    return f"ranks finished: {done or 'none'}\n" + "\n".join(keep)[-6000:]


def write_inputs(folder: Path) -> None:
    model, x = tiny_setup()
    save_model(model, folder / "m.pt")
    (folder / "pngs").mkdir()
    u8 = (x[:, 0] * 255).round().to(torch.uint8).numpy()
    for i, img in enumerate(u8[:10]):
        Image.fromarray(img).save(folder / "pngs" / f"{i:02d}.png")
    np.savez(folder / "train.npz", images=u8)
    from roseood.models.diffusion import DiffusionModel, export_diffusers
    from tests.models.test_conditional_diffusion import pipeline
    from tests.models.test_dit import dit
    from tests.models.test_flow_matching import FLOW
    from tests.models.test_latent_diffusion import ldm
    from tests.models.test_text_diffusion import diffusers_lora, stable_diffusion

    ldm(folder / "ldm")
    dit(folder / "dit")
    # widths 16: two channels per GroupNorm group, else the group norm after each ResNet's timestep
    # projection removes it exactly and that layer's gradient is rounding noise, batch by batch
    flow = DiffusionModel(in_channels=1, image_size=8, widths=(16, 16), denoising={"k": 2}, scheduler=FLOW)
    export_diffusers(flow, folder / "flow")
    pipeline(folder / "conditional")
    diffusers_lora(stable_diffusion(folder / "text"))


def read_csv(path: Path) -> list[list[str]]:
    with path.open() as f:
        return list(csv.reader(f))


def test_two_processes_fit_score_and_train_like_one_and_a_failing_rank_ends_the_job(tmp_path):
    write_inputs(tmp_path)
    run = launch(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("done-*")) == ["done-0", "done-1"], explain(run, tmp_path)
    # then rank 1 failed while rank 0 waited for it: the job ends with rank 1's error, well before the
    # 60 s collective timeout would have ended rank 0's wait
    assert run.returncode != 0 and "injected failure on rank 1" in run.stderr, explain(run, tmp_path)
    assert time.time() - (tmp_path / "failed").stat().st_mtime < TIMEOUT_S / 2
    # DDP training: rank 0 wrote one checkpoint per epoch, printed once per command, and resumed
    ts = torch.load(tmp_path / "vae.pt", weights_only=False)["train_state"]
    assert ts["epoch"] == 2 and len(ts["history"]) == 2 and np.isfinite(ts["history"][-1]["loss_nats"])
    assert run.stdout.count("wrote") == 3  # score, train, resumed train: rank 0 only
    two = torch.load(tmp_path / "two.pt", weights_only=False)
    one = fit_and_score(*tiny_setup())
    sampled_two = two.pop("sampled")
    for name, scores in one.pop("sampled").items():  # per-image noise: shards change nothing
        np.testing.assert_allclose(sampled_two[name], scores, rtol=1e-5, atol=1e-9, err_msg=name)
    for case in CASES:
        a, b = one[case], two[case]
        warned_a, warned_b = a["state"].pop("fit_warnings"), b["state"].pop("fit_warnings")
        assert warned_b == warned_a  # the same degenerate-fit warnings from sharded statistics
        assert b["state"].pop("kinds") == a["state"].pop("kinds")  # the per-layer Fisher choice
        assert b["state"].pop("fisher_images") == a["state"].pop("fisher_images")  # all images' digest
        torch.testing.assert_close(b["state"], a["state"], rtol=1e-6, atol=1e-7)  # Fisher + layer stats
        # scores rotate gradients in float32, and batches split differently over two processes; relative
        # to the largest score, as a z-scored aggregate near 0 has no relative precision (0.0542359 against
        # 0.0542366 beside scores of 3.0 under MKL_CBWR=COMPATIBLE: 1.2e-5 of itself, 2e-7 of the largest)
        for key in ("in", "out"):
            np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-5 * np.abs(a[key]).max())
        assert b["auroc"] == a["auroc"]
        print(f"{case}: AUROC 1 process {a['auroc']:.4f}, 2 processes {b['auroc']:.4f}")
    for kind, a in one.pop("joint").items():
        b = two["joint"][kind]
        assert b.pop("kinds") == a.pop("kinds")
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7, msg=lambda m, kind=kind: f"{kind}: {m}")
    a, b = one["ensemble"], two["ensemble"]
    for key, tol in (("scale", 1e-6), ("in", 1e-5), ("out", 1e-5)):  # near 0: relative to the largest
        want = np.asarray(a[key])
        np.testing.assert_allclose(np.asarray(b[key]), want, rtol=tol, atol=tol * np.abs(want).max())
    # rank 0 wrote the streamed CSV in input order; same rows as one process
    det = ROSE(load_model(tmp_path / "m.pt"), fisher="ekfac", layers=LAYERS)
    det.fit(tiny_setup()[1][:24], held_out=tiny_setup()[1][24:33]).save(tmp_path / "det1.pt")
    args = ["score", "--model", str(tmp_path / "m.pt"), "--detector", str(tmp_path / "det1.pt")]
    assert main([*args, "--data", str(tmp_path / "pngs"), "--out", str(tmp_path / "one.csv")]) == 0
    rows_one, rows_two = read_csv(tmp_path / "one.csv"), read_csv(tmp_path / "two.csv")
    assert len(rows_two) == 11 and [r[0] for r in rows_two[1:]] == [str(i) for i in range(10)]
    assert rows_two[0] == rows_one[0] and [r[1] for r in rows_two] == [r[1] for r in rows_one]
    col = rows_one[0].index("score")
    np.testing.assert_allclose(
        [float(r[col]) for r in rows_two[1:]], [float(r[col]) for r in rows_one[1:]], rtol=1e-5
    )
    # a latent diffusion model, a DiT, a flow-matching and a class-conditional model: sharded encoding,
    # Fisher sums and statistics as one process
    latent_two = torch.load(tmp_path / "latent-two.pt", weights_only=False)
    # float32 rounding: the DiT's attention and adaLN give an image's gradient to ~5e-5 of itself
    # differently in another batch (2 processes split the batches otherwise; measured 5.5e-5 on the layer
    # statistics), the flow-matching and the conditional UNet's to 2.6e-6 and 3.6e-6 (measured on the
    # statistics: 4× and more allowed), a Stable Diffusion LoRA's layer statistics to 1.8e-4 (their spread
    # over 6 images, where the mean moved 8e-6), the VQ + UNet to 1e-6 as the VAE
    tols = {"dit": 2e-4, "flow": 2e-5, "conditional": 2e-5, "text": 8e-4}
    for name, a in latent_fit_and_score(tmp_path).items():
        b, tol = latent_two[name], tols.get(name, 1e-6)
        assert b["state"].pop("fit_warnings") == a["state"].pop("fit_warnings")
        assert b["state"].pop("kinds") == a["state"].pop("kinds")
        assert b["state"].pop("fisher_images") == a["state"].pop("fisher_images")
        torch.testing.assert_close(
            b["state"], a["state"], rtol=tol, atol=1e-7, msg=lambda m, name=name: f"{name}: {m}"
        )
        scale = np.abs(a["scores"]).max()
        np.testing.assert_allclose(b["scores"], a["scores"], rtol=tol, atol=tol * scale, err_msg=name)


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
