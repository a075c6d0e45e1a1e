"""Per-sample gradients from hooks must equal autograd run on one sample at a time."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from roseood.curvature import GradientStore, LayerGrad, LayerGradients, full_float32
from roseood.errors import RoseError
from roseood.models import Glow

pytestmark = pytest.mark.float_sensitive  # batched per-sample gradients against an autograd oracle


def loop_grads(model: nn.Module, loss_fn, x: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """The authors' way: a backward pass per sample. The oracle for the batched hooks."""
    mods = dict(model.named_modules())
    out: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    for i in range(x.shape[0]):
        params = [p for n in names for p in mods[n].parameters(recurse=False)]
        grads = torch.autograd.grad(loss_fn(x[i : i + 1]).sum(), params)
        k = 0
        for n in names:
            ps = list(mods[n].parameters(recurse=False))
            flat = []
            for _ in ps:
                g = grads[k]
                k += 1
                flat.append(g.reshape(g.shape[0], -1) if g.ndim > 1 else g[:, None])
            if hasattr(mods[n], "weight_matrix"):  # reparameterised weight: parameters one after another
                out[n].append(torch.cat([f.flatten() for f in flat]))
            else:  # weight rows with the bias as the last column, like LayerGrad.matrix()
                out[n].append(torch.cat(flat, 1) if len(flat) > 1 else flat[0])
    return {n: torch.stack(v) for n, v in out.items()}


def assert_batched_grads_exact(model: nn.Module, loss_fn, x: torch.Tensor, names: list[str]) -> None:
    """Every layer's batched per-sample gradients equal the per-sample loop's, to float32 rounding (some
    entries are zero up to rounding, e.g. a shift before a one-channel group norm: atol is relative to
    the largest gradient)."""
    batched = LayerGradients(model, names)(loss_fn, x)
    oracle = loop_grads(model, loss_fn, x, names)
    scale = max(v.abs().max() for v in oracle.values())
    for n in names:
        torch.testing.assert_close(batched[n].matrix(), oracle[n], rtol=1e-4, atol=1e-6 * scale)


def test_vae_conv_layers_match_per_sample_loop(tiny_vae, images):
    x = images[:5]
    names = tiny_vae.rose_layers("encoder")
    batched = LayerGradients(tiny_vae, names)(tiny_vae.rose_loss, x)
    oracle = loop_grads(tiny_vae, tiny_vae.rose_loss, x, names)
    for n in names:
        g = batched[n].matrix()
        assert g.shape == oracle[n].shape, n
        torch.testing.assert_close(g, oracle[n], rtol=1e-4, atol=1e-5)


def test_transposed_conv_layers_match_per_sample_loop(tiny_vae, images):
    x = images[:4]
    names = tiny_vae.rose_layers("decoder")
    batched = LayerGradients(tiny_vae, names)(tiny_vae.rose_loss, x)
    oracle = loop_grads(tiny_vae, tiny_vae.rose_loss, x, names)
    for n in names:
        # ConvTranspose2d weights are (Cin, Cout, k, k): rows Cin, columns Cout·k·k.
        torch.testing.assert_close(batched[n].matrix(), oracle[n], rtol=1e-4, atol=1e-5)


def test_linear_layer_with_bias():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x = torch.randn(7, 6)

    def loss(b: torch.Tensor) -> torch.Tensor:
        return net(b).pow(2).sum(1)

    batched = LayerGradients(net, ["0", "2"])(loss, x)
    oracle = loop_grads(net, loss, x, ["0", "2"])
    for n in ("0", "2"):
        torch.testing.assert_close(batched[n].matrix(), oracle[n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lu", [True, False])
def test_glow_invconv_gradients_include_log_determinant(lu):
    torch.manual_seed(0)
    glow = Glow(in_channels=1, image_size=8, levels=2, steps=2, hidden=8, lu=lu)
    glow.train()
    with torch.no_grad():
        glow.train_loss(torch.rand(16, 1, 8, 8))
    glow.eval()
    x = torch.rand(3, 1, 8, 8)
    names = glow.rose_layers("invconv")
    native = LayerGradients(glow, names, coords="native")(glow.rose_loss, x)
    oracle = loop_grads(glow, glow.rose_loss, x, names)
    for n in names:
        free = oracle[n].abs().sum(0) > 0  # masked LU entries get no gradient and are dropped
        assert (
            native[n].flat().shape[1]
            == int(free.sum())
            == dict(glow.named_modules())[n].weight_matrix().numel()
        )
        torch.testing.assert_close(native[n].flat(), oracle[n][:, free], rtol=1e-4, atol=1e-4)


def test_bad_layer_choices_are_clear_errors(tiny_vae):
    with pytest.raises(RoseError, match="unknown layers"):
        LayerGradients(tiny_vae, ["encoder.nope"])
    tiny_vae.train()  # batch norm on batch statistics mixes the samples
    with pytest.raises(RoseError, match="batch statistics"):
        LayerGradients(tiny_vae, ["encoder.bn0"])
    tiny_vae.eval()
    with pytest.raises(RoseError, match="no layers"):
        LayerGradients(tiny_vae, [])


class _Scale(nn.Module):
    """A parameterised module without a handler: its gradients come from the torch.func fallback."""

    def __init__(self) -> None:
        super().__init__()
        self.s = nn.Parameter(torch.linspace(0.5, 1.5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.s


@pytest.mark.filterwarnings("ignore:.*torch.func per-sample fallback")
@pytest.mark.parametrize("names", [["0"], ["1"], ["0", "1"]])
def test_with_loss_returns_the_per_sample_loss_it_differentiated(names):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), _Scale())
    x = torch.randn(5, 4)

    def loss(b: torch.Tensor) -> torch.Tensor:
        return net(b).pow(2).sum(1)

    grads, value = LayerGradients(net, names).with_loss(loss, x)
    assert list(grads) == names and not value.requires_grad
    torch.testing.assert_close(value, loss(x).detach())


def test_gradient_store_keeps_first_pass_batches_within_its_budget(tiny_vae, images):
    names = ["encoder.conv0", "encoder.conv1"]
    lg = LayerGradients(tiny_vae, names)
    batches = [lg(tiny_vae.rose_loss, images[8 * i : 8 * i + 8]) for i in range(3)]
    one = sum(g.nbytes() for g in batches[0].values())
    store = GradientStore(budget=2 * one + batches[2][names[0]].nbytes())  # two batches and one layer
    for i, grads in enumerate(batches):
        for name, g in grads.items():
            store.keep(i, name, g)
    assert store.kept(0) == batches[0] and store.kept(1) == batches[1]
    assert store.kept(2) is None  # outgrew the budget half-way: dropped whole, computed again later


def test_streaming_holds_one_layer_at_a_time_and_equals_the_dict(tiny_vae, images):
    names = tiny_vae.rose_layers("all")
    lg = LayerGradients(tiny_vae, names)
    seen: list[str] = []
    alive: list[int] = []

    def consume(name: str, g: LayerGrad) -> None:
        seen.append(name)
        alive.append(sum(1 for o in gc.get_objects() if isinstance(o, LayerGrad)))
        torch.testing.assert_close(g.matrix(), whole[name].matrix())

    whole = lg(tiny_vae.rose_loss, images[:4])
    gc.collect()
    before = sum(1 for o in gc.get_objects() if isinstance(o, LayerGrad))
    loss = lg.stream(tiny_vae.rose_loss, images[:4], consume)
    assert sorted(seen) == sorted(names) and loss.shape == (4,)
    assert max(alive) <= before + 1  # the one being read (the dict's own are ``before``)


def test_full_float32_leaves_cpu_settings_alone():
    settings = (torch.backends.cudnn.conv, torch.backends.cuda.matmul)
    before = [s.fp32_precision for s in settings]
    with full_float32(torch.device("cpu")):
        assert [s.fp32_precision for s in settings] == before
