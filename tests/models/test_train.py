"""Training: the loss goes down, checkpoints are written every epoch, resume continues exactly."""

from __future__ import annotations

import pytest
import torch

from roseood.errors import CheckpointError, RoseError
from roseood.models import VAE, Glow, load_checkpoint
from roseood.models.train import TrainConfig, train


@pytest.fixture
def data() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    base = (torch.rand(1, 1, 32, 32, generator=g) > 0.5).float()
    return (base * 0.8 + 0.2 * torch.rand(64, 1, 32, 32, generator=g)).clamp(0, 1)


def test_vae_training_lowers_the_loss_and_writes_checkpoints(data, tmp_path):
    torch.manual_seed(0)
    cfg = TrainConfig(epochs=3, batch_size=16, lr=3e-3)
    _, history = train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", progress=False)
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert history[-1]["loss_nats"] < history[0]["loss_nats"]
    _, obj = load_checkpoint(tmp_path / "m.pt")
    assert obj["train_state"]["epoch"] == 3


def test_resume_equals_an_uninterrupted_run(data, tmp_path):
    cfg3 = TrainConfig(epochs=3, batch_size=16, seed=1)
    torch.manual_seed(0)
    full, _ = train(VAE(ngf=4, nz=4), data, cfg3, tmp_path / "full.pt", progress=False)
    torch.manual_seed(0)
    train(
        VAE(ngf=4, nz=4),
        data,
        TrainConfig(epochs=2, batch_size=16, seed=1),
        tmp_path / "part.pt",
        progress=False,
    )
    resumed, history = train(VAE(ngf=4, nz=4), data, cfg3, tmp_path / "part.pt", resume=True, progress=False)
    assert len(history) == 3
    # the sampled latent noise uses the global RNG, so compare architecture and progress, not bits
    assert resumed.config() == full.config()
    assert history[-1]["loss_nats"] < history[0]["loss_nats"]


def test_existing_output_and_mismatched_resume_are_refused(data, tmp_path):
    cfg = TrainConfig(epochs=1, batch_size=32)
    train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", progress=False)
    with pytest.raises(RoseError, match="exists"):
        train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", progress=False)
    with pytest.raises(CheckpointError, match="other settings"):
        train(
            VAE(ngf=4, nz=4),
            data,
            TrainConfig(epochs=2, batch_size=32, lr=0.1),
            tmp_path / "m.pt",
            resume=True,
        )


def test_input_refusals_come_before_the_checkpoint_is_read(data, tmp_path):
    """Bad held-out images or a perturbation the model cannot take are refused before ``start_run`` looks at
    the output: a corrupt file there is never read (its error would otherwise answer first)."""
    (tmp_path / "m.pt").write_bytes(b"not a checkpoint")
    cfg = TrainConfig(epochs=1, batch_size=32)
    with pytest.raises(RoseError, match="channel"):
        train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", resume=True, held_out=torch.rand(4, 3, 32, 32))
    with pytest.raises(RoseError, match="perturbation"):
        train(VAE(ngf=4, nz=4), data, TrainConfig(epochs=1, perturb="svd:x"), tmp_path / "m.pt", resume=True)


def test_glow_trains_with_adamax_warmup_and_clipping(data, tmp_path):
    torch.manual_seed(0)
    cfg = TrainConfig.for_model("glow", epochs=2, batch_size=16, warmup_steps=4, grad_clip=50.0)
    assert cfg.optimizer == "adamax" and cfg.lr == 5e-4
    glow = Glow(in_channels=1, image_size=32, levels=2, steps=2, hidden=8)
    _, history = train(glow, data, cfg, tmp_path / "g.pt", progress=False)
    assert history[-1]["bits_per_dim"] < history[0]["bits_per_dim"]


def test_the_settings_read_as_words_each_said_only_when_on():
    """`rose train`'s line: what the run does, not a dataclass repr with its zeros."""
    glow = TrainConfig.for_model("glow", epochs=1, warmup_steps=4, grad_clip=50.0, hflip=False)
    assert (
        glow.describe()
        == "1 epoch, batch 64, Adamax lr 0.0005, 4 warm-up steps, gradient clipping at 50, seed 0"
    )
    assert (
        TrainConfig(lr_halve_every=30)
        .describe()
        .startswith("100 epochs, batch 64, Adam lr 0.001, halved every 30")
    )
    plain = TrainConfig(epochs=3, lr_halve_every=0, weight_decay=1e-5, perturb="random:0.3", seed=2)
    assert plain.describe() == (
        "3 epochs, batch 64, Adam lr 0.001, weight decay 1e-05, random horizontal flips, inputs perturbed "
        "(random:0.3), seed 2"
    )


def test_training_forecasts_its_time_and_stops_within_a_budget(data, tmp_path, capsys):
    """The first batches are timed and extrapolated to the run (one line before it is far along); a
    budget stops the run when it is spent, at the next batch, checkpointed there, says how to go on, and
    resuming continues from that batch to the run an unbudgeted one ends with."""
    cfg = TrainConfig(epochs=3, batch_size=8)
    torch.manual_seed(0)
    _, whole = train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "whole.pt", progress=True)
    err = capsys.readouterr().err
    assert "training 3 epochs: ≈ " in err and "on this machine (" in err and "from 3 timed batches" in err
    torch.manual_seed(0)
    _, history = train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", progress=True, budget=1e-6)
    err = capsys.readouterr().err
    assert history == [] and "stopping in epoch 1 after batch 1 of 8: the budget of" in err
    assert "holds the run; --resume continues)" in err
    assert torch.load(tmp_path / "m.pt", weights_only=True)["train_state"]["partial"]["batches"] == 1
    # a run that resumes by itself (rose bench, --resume) goes on by the same command, not by a flag
    train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", resume=True, progress=True, budget=1e-6)
    assert "holds the run; the same command again continues)" in capsys.readouterr().err
    assert torch.load(tmp_path / "m.pt", weights_only=True)["train_state"]["partial"]["batches"] == 2
    _, history = train(VAE(ngf=4, nz=4), data, cfg, tmp_path / "m.pt", resume=True, progress=False)
    assert history == whole


def test_held_out_figures_each_epoch_and_a_curve_that_continues_on_resume(data, tmp_path):
    """A VAE's held-out NLL in bits/dim each epoch; the curve CSV keeps its rows and its clock on resume,
    and the held-out figures do not change what is trained (the same weights as a run without them)."""
    held = data[:8]
    curve = tmp_path / "curve.csv"
    torch.manual_seed(0)
    _, history = train(
        VAE(ngf=4, nz=4), data, TrainConfig(epochs=2, batch_size=16), tmp_path / "m.pt",
        progress=False, held_out=held, curve=curve,
    )  # fmt: skip
    assert all(h["held_out_bits_per_dim"] > 0 for h in history)
    torch.manual_seed(0)
    model, history = train(
        VAE(ngf=4, nz=4), data, TrainConfig(epochs=3, batch_size=16), tmp_path / "m.pt",
        resume=True, progress=False, held_out=held, curve=curve,
    )  # fmt: skip
    rows = [line.split(",") for line in curve.read_text().splitlines()]
    assert rows[0][:3] == ["epoch", "step", "seconds"] and rows[0][-1] == "held_out_bits_per_dim"
    assert [r[0] for r in rows[1:]] == ["1", "2", "3"]
    seconds = [float(r[2]) for r in rows[1:]]
    assert seconds == sorted(seconds)
    assert float(rows[3][-1]) == pytest.approx(history[-1]["held_out_bits_per_dim"], rel=1e-5)
    torch.manual_seed(0)
    plain, _ = train(
        VAE(ngf=4, nz=4), data, TrainConfig(epochs=3, batch_size=16), tmp_path / "p.pt", progress=False
    )
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b)
