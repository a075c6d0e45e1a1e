"""Each layer handler against a per-sample autograd loop; the Fishers on them against the dense Fisher."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import zuko.nn
from torch import Tensor, nn
from torch.nn.utils import parametrize

from roseood.curvature import (
    FactoredGrad,
    LayerGrad,
    LayerGradients,
    check_layers,
    declare_mask,
    format_layer_report,
    make_fisher,
    register_layer,
    resolve,
    supports,
)
from roseood.curvature.handlers import LINEAR, own_parameters
from roseood.detectors.rose import ROSE
from roseood.errors import RoseError
from roseood.models.base import GenerativeModel

pytestmark = pytest.mark.float_sensitive  # per-sample gradients and quadratic forms against oracles


class Net(nn.Module):
    """``layer`` (named "layer") inside a small nonlinear per-sample loss."""

    def __init__(self, layer: nn.Module, head: Callable[[nn.Module, Tensor], Tensor] | None = None) -> None:
        super().__init__()
        self.layer = layer
        self.head = head or (lambda m, x: m(x))

    def forward(self, x: Tensor) -> Tensor:
        y = self.head(self.layer, x)
        return (y.sin() * 1.3 + y).pow(2).flatten(1).sum(1)


def loop(loss_fn: Callable[[Tensor], Tensor], x: Tensor, module: nn.Module) -> dict[str, Tensor]:
    """The oracle: one backward pass per sample, gradients of the module's parameters by name."""
    params = dict(module.named_parameters())
    rows = [
        torch.autograd.grad(loss_fn(x[i : i + 1]).sum(), list(params.values())) for i in range(x.shape[0])
    ]
    return {k: torch.stack([r[j] for r in rows]) for j, k in enumerate(params)}


def as_matrix(module: nn.Module, grads: dict[str, Tensor]) -> Tensor:
    """Per-sample gradients in LayerGrad's layout: weight rows, the bias as a last column."""
    w = grads.get("weight", grads.get("parametrizations.weight.original"))
    assert w is not None
    n = w.shape[0]
    if w.ndim == 2:  # a vector weight (norm affines): one row per channel
        w = w.reshape(n, -1, 1)
    else:
        w = w.flatten(2) if isinstance(module, nn.modules.conv._ConvNd) else w.reshape(n, -1, w.shape[-1])
    b = grads.get("bias")
    return torch.cat([w, b.reshape(n, -1, 1)], 2) if b is not None else w


def conv_transpose_matrix(m: nn.ConvTranspose1d, grads: dict[str, Tensor]) -> Tensor:
    """Per group: the weight rows, then a bias row with the bias at kernel offset 0."""
    w, b = grads["weight"].flatten(2), grads["bias"]  # (N, Cin, Cout/g·K), (N, Cout)
    n, g, k = w.shape[0], m.groups, m.kernel_size[0]
    bias_rows = w.new_zeros(n, g, 1, w.shape[2])
    bias_rows[..., ::k] = b.view(n, g, 1, -1)
    return torch.cat([w.view(n, g, -1, w.shape[2]), bias_rows], 2).flatten(1, 2)


def _bn() -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(3)
    bn.running_mean.uniform_(-0.5, 0.5)  # type: ignore[union-attr]
    bn.running_var.uniform_(0.5, 2.0)  # type: ignore[union-attr]
    return bn.eval()


def _masked_conv() -> nn.Conv2d:
    conv = nn.Conv2d(2, 4, 3, padding=1)
    mask = torch.ones_like(conv.weight)
    mask[:, :, 1, 2:] = 0
    mask[:, :, 2] = 0
    declare_mask(conv, mask)
    return conv


class Masked(nn.Module):
    def __init__(self, mask: Tensor) -> None:
        super().__init__()
        self.mask = mask

    def forward(self, w: Tensor) -> Tensor:
        return w * self.mask


def _parametrized_linear() -> nn.Linear:
    lin = nn.Linear(5, 4)
    parametrize.register_parametrization(lin, "weight", Masked(torch.tril(torch.ones(4, 5))))
    return lin


def _seq(shape: tuple[int, ...]) -> Tensor:
    return torch.randn(5, *shape)


CASES: dict[str, tuple[Callable[[], nn.Module], Tensor | Callable[[], Tensor]]] = {
    "linear-tokens": (lambda: nn.Linear(4, 3), lambda: _seq((6, 4))),
    "linear-2d-positions-no-bias": (lambda: nn.Linear(4, 3, bias=False), lambda: _seq((2, 3, 4))),
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=2), lambda: _seq((3, 11))),
    "conv2d-grouped": (lambda: nn.Conv2d(4, 6, 3, groups=2), lambda: _seq((4, 6, 6))),
    "conv2d-depthwise-circular": (
        lambda: nn.Conv2d(3, 6, 3, groups=3, padding=1, padding_mode="circular"),
        lambda: _seq((3, 5, 5)),
    ),
    "conv2d-same-reflect": (
        lambda: nn.Conv2d(2, 3, (3, 2), padding="same", padding_mode="reflect"),
        lambda: _seq((2, 5, 6)),
    ),
    "conv3d-grouped-strided": (lambda: nn.Conv3d(4, 2, 2, stride=2, groups=2), lambda: _seq((4, 4, 4, 4))),
    "conv-transpose1d-bias": (
        lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, output_padding=1, groups=2),
        lambda: _seq((4, 5)),
    ),
    "conv-transpose2d-no-bias": (
        lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, dilation=2, bias=False),
        lambda: _seq((2, 4, 4)),
    ),
    "conv-transpose3d-no-bias": (
        lambda: nn.ConvTranspose3d(2, 2, 2, stride=2, bias=False),
        lambda: _seq((2, 2, 3, 2)),
    ),
    "embedding-padding-idx": (
        lambda: nn.Embedding(7, 3, padding_idx=0),
        lambda: torch.randint(0, 7, (5, 9)),
    ),
    "embedding-scale-grad-by-freq": (
        lambda: nn.Embedding(5, 3, scale_grad_by_freq=True),
        lambda: torch.randint(0, 5, (5, 8)),
    ),
    "layernorm-tokens": (lambda: nn.LayerNorm(4), lambda: _seq((6, 4))),
    "rmsnorm-no-bias": (lambda: nn.RMSNorm(4), lambda: _seq((6, 4))),
    "groupnorm": (lambda: nn.GroupNorm(2, 4), lambda: _seq((4, 3, 3))),
    "batchnorm-eval": (_bn, lambda: _seq((3, 4, 4))),
    "instancenorm-affine": (lambda: nn.InstanceNorm1d(3, affine=True), lambda: _seq((3, 7))),
    "zuko-linear-stacked": (lambda: zuko.nn.Linear(4, 3, stack=2), lambda: _seq((5, 2, 4))),
    "zuko-masked-linear": (
        lambda: zuko.nn.MaskedLinear(torch.rand(4, 5) > 0.4),
        lambda: _seq((5,)),
    ),
    "declared-mask-conv": (_masked_conv, lambda: _seq((2, 5, 5))),
    "parametrized-mask-linear": (_parametrized_linear, lambda: _seq((3, 5))),
}


def build(case: str) -> tuple[Net, Tensor]:
    torch.manual_seed(sum(map(ord, case)))
    make, data = CASES[case]
    layer = make()
    with torch.no_grad():  # non-trivial affine parameters for the norms
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = data() if callable(data) else data
    return Net(layer), x


def fixed_entries(m: nn.Module) -> int:
    """How many weight entries the case's mask takes away from the parameters."""
    for mask in (getattr(m, "rose_mask", None), getattr(m, "mask", None)):
        if isinstance(mask, Tensor):
            return int((mask == 0).sum())
    if parametrize.is_parametrized(m):
        return int((m.parametrizations.weight[0].mask == 0).sum())
    return m.embedding_dim if isinstance(m, nn.Embedding) and m.padding_idx is not None else 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_handler_matches_per_sample_loop(case):
    net, x = build(case)
    m = net.layer
    assert resolve(m).handler is not None, resolve(m).note
    g = LayerGradients(net, ["layer"])(net, x)["layer"]
    oracle = loop(net, x, m)
    expected = conv_transpose_matrix(m, oracle) if case == "conv-transpose1d-bias" else as_matrix(m, oracle)
    if hasattr(m, "rose_mask"):  # a declared mask: the masked entries are simply not parameters
        expected = expected * g.mask
    # float32 sums in another order than the loop's: measured up to 0.42 of rtol=1e-4, atol=1e-5
    # (declared-mask-conv, |diff| 1.5e-5; AMD AVX2, default and MKL_CBWR=COMPATIBLE), so twice that
    torch.testing.assert_close(g.matrix(), expected, rtol=2e-4, atol=2e-5)
    # flat() holds exactly the free parameters: masked entries are no coordinates at all
    assert g.flat().shape[1] == sum(p.numel() for p in own_parameters(m).values()) - fixed_entries(m)
    if g.mask is not None:
        torch.testing.assert_close(
            g.flat(), expected.flatten(1)[:, g.mask.flatten() != 0], rtol=2e-4, atol=2e-5
        )


CONV_CASES = sorted(c for c in CASES if c.startswith(("conv1d", "conv2d", "conv3d", "declared-mask-conv")))


@pytest.mark.parametrize("layout", ["image-major", "copy-major"])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_matrices_agree_with_their_factors_on_expanded_batches(case, layout):
    """A convolution forms its matrices by one grouped convolution and, for the Kronecker factors, its
    unfolded patches: both are the same per-sample gradients, also when each sample's loss runs on three
    copies of it (either layout), and both match the per-sample loop."""
    net, x = build(case)
    n = x.shape[0]

    def loss(b: Tensor) -> Tensor:  # each copy k of a sample scaled by 1 + k/2: the copies differ
        m, shape = b.shape[0], (-1, *[1] * (b.ndim - 1))
        copy = torch.arange(3.0)
        if layout == "image-major":
            return net(b.repeat_interleave(3, 0) * (1 + copy / 2).repeat(m).view(shape)).view(m, 3).sum(1)
        return (
            net(b.repeat(3, *shape[1:]) * (1 + copy / 2).repeat_interleave(m).view(shape)).view(3, m).sum(0)
        )

    g = LayerGradients(net, ["layer"])(loss, x)["layer"]
    f = g.factored()
    factored = FactoredGrad(f.a, f.d, groups=g.groups, mask=g.mask)
    assert (g.n, g.positions, g.width_in, g.width_out) == (n, *f.a.shape[1:], f.d.shape[2])
    # two float32 sums of the same products in another order: as the loop comparison above
    torch.testing.assert_close(g.matrix(), factored.matrix(), rtol=2e-4, atol=2e-5)
    expected = as_matrix(net.layer, loop(loss, x, net.layer))
    torch.testing.assert_close(
        g.matrix(), expected * (g.mask if g.mask is not None else 1), rtol=2e-4, atol=2e-5
    )


def test_masked_entries_get_no_gradient():
    net, x = build("declared-mask-conv")
    g = LayerGradients(net, ["layer"])(net, x)["layer"]
    masked = net.layer.rose_mask.flatten(1) == 0
    assert masked.any()
    assert (g.matrix()[:, :, :-1][:, masked] == 0).all()
    assert g.matrix()[:, :, :-1][:, ~masked].abs().sum() > 0


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.attn(x, x, x, need_weights=False)[0]).pow(2).flatten(1).sum(1)


def test_multihead_attention_uses_the_torch_func_fallback():
    torch.manual_seed(0)
    net, x = Attention().eval(), torch.randn(4, 5, 4)
    assert resolve(net.attn).handler is None and supports(net.attn)
    with pytest.warns(UserWarning, match="MultiheadAttention layers use the torch.func"):
        lg = LayerGradients(net, ["attn", "out"])
    grads = lg(net, x)
    oracle = loop(net, x, net.attn)
    torch.testing.assert_close(grads["attn"].flat(), torch.cat([g.flatten(1) for g in oracle.values()], 1))
    torch.testing.assert_close(grads["out"].matrix(), as_matrix(net.out, loop(net, x, net.out)))


def test_layer_check_lists_every_parameterised_layer():
    torch.manual_seed(0)
    net = Attention().eval()
    reports = {r.name: r for r in check_layers(net, net, torch.randn(3, 5, 4))}
    assert set(reports) == {"attn", "attn.out_proj", "out"}
    assert reports["attn"].usable and reports["attn"].handler == "fallback (slow)"
    assert reports["out"].usable and reports["out"].handler == "linear" and reports["out"].params == 10
    assert not reports["attn.out_proj"].usable and "never called" in reports["attn.out_proj"].note
    table = format_layer_report(list(reports.values()))
    assert table.splitlines()[0].split()[:3] == ["layer", "type", "handler"] and "fallback (slow)" in table


def test_subclass_overriding_forward_is_not_trusted_to_the_linear_handler():
    class Scaled(nn.Linear):
        def forward(self, x: Tensor) -> Tensor:
            return super().forward(2 * x)

    assert resolve(Scaled(2, 2)).handler is None  # fallback instead of a silently wrong gradient
    register_layer(Scaled, LINEAR)  # the user vouches for it (wrongly here: but it is their call)
    try:
        assert resolve(Scaled(2, 2)).handler is LINEAR
        register_layer(Scaled, LINEAR.grad)  # a bare gradient function is enough
        assert resolve(Scaled(2, 2)).label == "linear"
    finally:
        from roseood.curvature.handlers import _REGISTRY

        del _REGISTRY[Scaled]


def test_unusable_layers_are_clear_errors():
    with pytest.raises(RoseError, match="no trainable parameters"):
        LayerGradients(Net(nn.Sequential(nn.Tanh())), ["layer"])
    frozen = nn.Linear(3, 3).requires_grad_(False)
    assert not supports(frozen) and resolve(frozen).note == "no trainable parameters"


# --- Fishers on the new layer types ----------------------------------------------------------------------


def fitted(kind: str, grads: list[LayerGrad], damping: float = 1e-3):
    f = make_fisher(kind, damping)
    for p in range(f.passes):
        for g in grads:
            f.update(g, p)
        f.end_pass(p)
    return f


FISHER_CASES = [
    "conv2d-grouped",
    "zuko-masked-linear",
    "layernorm-tokens",
    "conv-transpose1d-bias",
    "attention",
]


def batches(case: str) -> list[LayerGrad]:
    if case == "attention":
        torch.manual_seed(0)
        net: nn.Module = Attention().eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lg = LayerGradients(net, ["attn"])
        return [lg(net, torch.randn(6, 3, 4))["attn"] for _ in range(2)]
    net, x = build(case)
    lg = LayerGradients(net, ["layer"], coords="weight")
    return [lg(net, x + 0.1 * torch.randn_like(x) if x.is_floating_point() else x)["layer"] for _ in range(3)]


@pytest.mark.parametrize("case", FISHER_CASES)
def test_diag_and_dense_are_exact_on_free_parameters(case):
    grads = batches(case)
    s_all = torch.cat([g.flat().double() for g in grads])
    fm = s_all.T @ s_all / s_all.shape[0]
    s = grads[0].flat().double()
    diag = (s.pow(2) / (torch.diagonal(fm) + 1e-3)).sum(1)
    torch.testing.assert_close(fitted("diag", grads).quad(grads[0]), diag, rtol=1e-5, atol=1e-8)
    dense = (s * torch.linalg.solve(fm + 1e-3 * torch.eye(s.shape[1], dtype=s.dtype), s.T).T).sum(1)
    torch.testing.assert_close(fitted("dense", grads).quad(grads[0]), dense, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("case", FISHER_CASES)
def test_ekfac_is_the_dense_fisher_in_the_block_diagonal_kronecker_basis(case):
    """One Kronecker eigenbasis per group (block-diagonal); masked entries are zero in every gradient."""
    grads = batches(case)
    groups = grads[0].groups
    a = torch.cat([g.factored().a.double().flatten(0, 1) for g in grads]).view(
        -1, groups, grads[0].width_in // groups
    )
    d = torch.cat([g.factored().d.double().flatten(0, 1) for g in grads]).view(
        -1, groups, grads[0].width_out // groups
    )
    u_in = torch.linalg.eigh(torch.einsum("mgi,mgj->gij", a, a))[1]
    u_out = torch.linalg.eigh(torch.einsum("mgi,mgj->gij", d, d))[1]
    basis = torch.block_diag(*(torch.kron(o, i) for o, i in zip(u_out, u_in, strict=True)))
    s_all = torch.cat([g.matrix().double().flatten(1) for g in grads])  # full layout, zero where masked
    scale = torch.diagonal(basis.T @ (s_all.T @ s_all / s_all.shape[0]) @ basis)
    s = grads[1].matrix().double().flatten(1)
    expected = ((s @ basis).pow(2) / (scale + 1e-3)).sum(1)
    ekfac = fitted("ekfac", grads)
    torch.testing.assert_close(ekfac.quad(grads[1]), expected, rtol=1e-3, atol=1e-6)
    assert torch.isfinite(fitted("kfac", grads).quad(grads[1])).all()


def test_fallback_ekfac_and_kfac_are_the_diagonal_fisher():
    grads = batches("attention")
    diag = fitted("diag", grads).quad(grads[0])
    torch.testing.assert_close(fitted("ekfac", grads).quad(grads[0]), diag, rtol=1e-4, atol=0)
    torch.testing.assert_close(fitted("kfac", grads).quad(grads[0]), diag, rtol=1e-4, atol=0)


# --- a small sequence model through ROSE -----------------------------------------------------------------


class TokenModel(GenerativeModel):
    """Tokens stored as a 1×4×4 uint8 "image": Embedding → Conv1d → LayerNorm → Linear over the tokens,
    scored by the per-token softmax NLL of the next token."""

    kind = "toy-tokens"
    vocab = 8

    def __init__(self) -> None:
        super().__init__(in_channels=1, image_size=4)
        self.embed = nn.Embedding(self.vocab, 6)
        self.conv = nn.Conv1d(6, 6, 3, padding=1)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, self.vocab)

    def config(self) -> dict[str, Any]:
        return {}

    def nll(self, x: Tensor) -> Tensor:
        tokens = (x * 255).round().long().flatten(1)
        h = self.conv(self.embed(tokens).transpose(1, 2)).relu().transpose(1, 2)
        logits = self.head(self.norm(h))[:, :-1]  # (N, T-1, vocab): a Linear on (N, T, D)
        return nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none").sum(1)

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        return self.nll(x)

    def train_loss(self, x: Tensor) -> Tensor:
        return self.nll(x)

    def layer_sets(self) -> dict[str, list[str]]:
        return {"all": ["embed", "conv", "norm", "head"]}


def tokens(n: int, seed: int) -> Tensor:
    return torch.randint(
        0, TokenModel.vocab, (n, 1, 4, 4), generator=torch.Generator().manual_seed(seed)
    ).byte()


def test_sequence_model_gradients_match_the_per_sample_loop():
    torch.manual_seed(0)
    model = TokenModel().eval()
    x = tokens(4, 0).float() / 255
    names = model.rose_layers()
    grads = LayerGradients(model, names)(model.rose_loss, x)
    for n in names:
        m = model.get_submodule(n)
        torch.testing.assert_close(
            grads[n].matrix(), as_matrix(m, loop(model.rose_loss, x, m)), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("fisher", ["diag", "ekfac"])
def test_rose_fits_and_scores_a_sequence_model(fisher):
    torch.manual_seed(0)
    model = TokenModel().eval()
    rose = ROSE(model, fisher=fisher, batch_size=16)
    assert all(r.usable for r in rose.check(tokens(2, 1)))
    scores = rose.fit(tokens(40, 2)).score(tokens(8, 3))
    assert scores.shape == (8,) and np.isfinite(scores).all()
    z = rose.normalized_layer_scores(tokens(8, 3))
    assert z.shape == (8, 4) and z.std() > 0


def test_the_invertible_handler_on_a_layer_without_a_weight_matrix_says_why():
    """The handler found invertible convolutions by a duck-typed ``weight_matrix()`` and failed inside
    torch on anything else; now the ``InvertibleMap`` contract decides, and the layer check says why."""
    from roseood.contracts import InvertibleMap
    from roseood.curvature.handlers import INVERTIBLE_1X1, register_layer, resolve
    from roseood.models.glow import InvConv2d

    class NotInvertible(torch.nn.Conv2d):
        pass

    register_layer(NotInvertible, INVERTIBLE_1X1)
    found = resolve(NotInvertible(2, 2, 1))
    assert not found.usable and found.note == "NotInvertible has no weight_matrix()"
    assert isinstance(InvConv2d(2, lu=True), InvertibleMap) and resolve(InvConv2d(2, lu=True)).usable


def test_a_layer_states_its_own_mask_by_the_masked_weight_contract():
    """A layer's ``weight_mask()`` (``roseood.contracts.MaskedWeight``) decides its free entries, ahead of
    any attribute name: the PixelCNN's causal convolutions say theirs; a mask of another shape is refused
    in one line."""
    from roseood.contracts import MaskedWeight
    from roseood.curvature.handlers import attribute_mask
    from roseood.models.pixelcnn import MaskedConv2d

    conv = MaskedConv2d("A", 2, 4, 3, 1)
    assert isinstance(conv, MaskedWeight) and attribute_mask(conv) is conv.mask

    class Lying(nn.Conv2d):
        def weight_mask(self) -> Tensor:
            return torch.ones(3)

    with pytest.raises(RoseError, match=r"^Lying.weight_mask\(\) must have its weight's shape$"):
        attribute_mask(Lying(2, 2, 3))
