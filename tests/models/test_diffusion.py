"""The diffusion family: a diffusers UNet2DModel + DDPMScheduler as a roseood model, exact per-sample
gradients of its K-pair denoising loss, checkpoints, and diffusers folders in and out."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from roseood.errors import RoseError
from roseood.models import load_model, save_model
from roseood.models.diffusion import DiffusionModel, export_diffusers
from tests.curvature.test_grads import assert_batched_grads_exact


def tiny(k: int = 3, **kw) -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": k}, **kw).eval()


def test_unet_per_sample_gradients_equal_an_autograd_loop():
    """Acceptance (issue 28): every layer of a UNet2DModel with an attention block — convolutions,
    attention projections over tokens, time-embedding linears, GroupNorm affines — batched and exact."""
    model = tiny(k=3)
    names = model.rose_layers("all")
    kinds = {type(model.get_submodule(n)).__name__ for n in names}
    assert kinds == {"Conv2d", "Linear", "GroupNorm"}
    assert any(".to_q" in n for n in names) and any("time_embedding" in n for n in names)
    x = torch.rand(4, 1, 8, 8)
    assert_batched_grads_exact(model, model.rose_loss, x, names)


def test_denoising_loss_is_deterministic_and_per_image():
    model = tiny(k=4)
    x = torch.rand(5, 1, 8, 8)
    loss = model.rose_loss(x)
    assert loss.shape == (5,)
    torch.testing.assert_close(model.rose_loss(x), loss)
    torch.testing.assert_close(model.rose_loss(x[2:3]), loss[2:3], rtol=1e-5, atol=1e-5)
    assert model.k == 4 and model.loss_timesteps.tolist() == [125, 375, 625, 875]


def test_changing_the_pairs_changes_the_fingerprint():
    from roseood.models import model_fingerprint

    model = tiny()
    before = model_fingerprint(model)
    model.set_denoising(seed=1)
    assert model_fingerprint(model) != before
    with pytest.raises(RoseError, match="denoising has unknown options"):
        model.set_denoising(K=3)


def test_training_moves_the_ema_weights_and_eval_uses_them():
    model = tiny()
    before = [p.clone() for p in model.unet.parameters()]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(3):
        opt.zero_grad()
        model.train_loss(torch.rand(4, 1, 8, 8)).mean().backward()
        opt.step()
    model.eval()
    assert all(p.grad is None for p in model.unet.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.unet.parameters(), strict=True))
    assert model.net() is model.unet


def test_a_model_read_to_score_holds_one_denoiser_and_its_files_do_not_show_it(tmp_path):
    """A model read from a folder to score holds no optimised copy: its state dict names the optimised
    weights as ever, the EMA ones' own tensors, so its files and fingerprint are those of the model it was
    exported from; training makes the copy, and a checkpoint written while training loads into it."""
    from roseood.models import load_weights, model_fingerprint

    model = tiny()  # built to train: both copies
    read = load_model(export_diffusers(model, tmp_path / "pipe"))
    state = read.state_dict()
    assert read.online is None and model_fingerprint(read) == model_fingerprint(model)
    assert all(state[f"online.{k}"].data_ptr() == v.data_ptr() for k, v in read.unet.state_dict().items())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    model.train_loss(torch.rand(4, 1, 8, 8)).mean().backward()
    opt.step()
    save_model(model.eval(), tmp_path / "trained.pt")  # optimised weights unlike the EMA ones
    load_weights(read, tmp_path / "trained.pt")
    assert read.online is not None and model_fingerprint(read) == model_fingerprint(model)
    for a, b in zip(read.online.parameters(), model.online.parameters(), strict=True):
        assert torch.equal(a, b)
    again = load_model(tmp_path / "pipe")
    before = model_fingerprint(again)
    assert again.train().online is not None and model_fingerprint(again) == before


def test_checkpoint_and_diffusers_folder_round_trip(tmp_path):
    model = tiny()
    x = torch.rand(3, 1, 8, 8)
    save_model(model, tmp_path / "m.pt")
    torch.testing.assert_close(load_model(tmp_path / "m.pt").nll(x), model.nll(x))
    folder = export_diffusers(model, tmp_path / "pipe")
    assert (folder / "model_index.json").is_file() and (folder / "unet" / "config.json").is_file()
    again = load_model(folder)
    torch.testing.assert_close(again.nll(x), model.nll(x))
    # a bare UNet folder (the scheduler beside it) loads too
    torch.testing.assert_close(load_model(folder / "unet").nll(x), model.nll(x))


def test_a_users_diffusers_pipeline_folder_loads(tmp_path):
    from roseood.models.diffusion import diffusers_module

    d = diffusers_module()
    torch.manual_seed(1)
    unet = d.UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        block_out_channels=(8, 8),
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    )
    sched = d.DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction")
    d.DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(tmp_path / "theirs")
    model = load_model(tmp_path / "theirs")
    assert model.input_shape == (3, 8, 8) and model.train_timesteps == 50
    assert model.rose_loss(torch.rand(2, 3, 8, 8)).shape == (2,)


def test_without_diffusers_roseood_imports_and_the_family_says_which_extra():
    code = (
        "import sys; sys.modules['diffusers'] = None\n"
        "import roseood, roseood.models\n"
        "from roseood.models.diffusion import DiffusionModel\n"
        "try:\n    DiffusionModel()\nexcept roseood.errors.RoseError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install roseood[diffusion]" in out.stdout


def test_timestep_projections_a_one_channel_group_norm_removes_are_left_out() -> None:
    """A ResNet block adds its timestep projection, one value per channel, before ``norm2``; with one
    channel per group the norm subtracts it whole, so that layer's gradient is rounding noise: it is in
    no layer set and ``rose check-model`` marks it unusable, saying why."""
    from roseood.models.check import check_model

    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2}).eval()
    inert = model.inert_layers()  # widths 8 with 8 groups: the first down and the last up blocks
    assert sorted(inert) == [
        "unet.down_blocks.0.resnets.0.time_emb_proj",
        "unet.up_blocks.1.resnets.0.time_emb_proj",
        "unet.up_blocks.1.resnets.1.time_emb_proj",
    ]
    layers = dict(model.named_modules())
    grads = torch.autograd.grad(
        model.rose_loss(torch.rand(3, 1, 8, 8)).sum(),
        [layers[n].weight for n in [*inert, "unet.down_blocks.1.resnets.0.time_emb_proj"]],
    )
    *zero, live = (float(g.norm()) for g in grads)
    assert max(zero) < 1e-5 * live  # measured: about 1e-6 against 8
    assert not set(inert) & {n for names in model.layer_sets().values() for n in names}
    reports = {r.name: r for r in check_model(model)}
    assert all(not reports[n].usable and "one channel per group" in reports[n].note for n in inert)
    assert reports["unet.down_blocks.1.resnets.0.time_emb_proj"].usable


def test_last_n_layers_are_the_output_side_in_forward_order_and_a_bad_n_is_one_line():
    """``last:N`` follows the forward pass (diffusers registers mid_block after up_blocks): the last layers
    are the output convolution and its norm, never the mid block's."""
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), attention=True)
    every = model.rose_layers("all")
    assert model.rose_layers("last:2") == ["unet.conv_norm_out", "unet.conv_out"]
    order = model.forward_order(every)
    assert order.index("unet.mid_block.resnets.0.conv1") < order.index("unet.up_blocks.0.resnets.0.conv1")
    assert model.rose_layers(f"last:{len(every)}") == every
    for bad in ("last:0", f"last:{len(every) + 1}", "last:x"):
        with pytest.raises(RoseError, match=r"^layer set .*: last:N takes N from 1 to the model's"):
            model.rose_layers(bad)
