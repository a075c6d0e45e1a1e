"""Compact EKFAC: its quadratic form against the dense Fisher it defines, its size against the weights,
and its saved state read back or refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.curvature import CompactEKFAC, FactoredGrad, LayerShape, WideCompactEKFAC, make_fisher
from roseood.detectors import ROSE, Detector, make_detector
from roseood.errors import CheckpointError, DegenerateFitWarning
from roseood.models.diffusion import DiffusionModel
from tests.curvature.test_fisher import fitted


def batches(d_in: int, d_out: int, groups: int = 1, n: int = 3) -> list[FactoredGrad]:
    """Factored gradients of a layer with 5 positions, inputs of decaying scale (a spectrum to truncate)."""
    gen = torch.Generator().manual_seed(0)
    scale = torch.linspace(2.0, 0.05, d_in).repeat(groups)
    return [
        FactoredGrad(
            torch.randn(64, 5, groups * d_in, generator=gen, dtype=torch.float64) * scale,
            torch.randn(64, 5, groups * d_out, generator=gen, dtype=torch.float64),
            groups=groups,
        )
        for _ in range(n)
    ]


def dense_quad(full_in: torch.Tensor, u_out: torch.Tensor, kept: int, grads: list, test: FactoredGrad):
    """``vec(G)ᵀ (F + damping)⁻¹ vec(G)`` for the dense F = Q diag(λ) Qᵀ, Q = U_out ⊗ U_in (EKFAC's whole
    bases), λ: the second moments of the rotated fit gradients on the kept input directions, and for each
    output direction their mean over the rest; block by block for a grouped layer."""
    out = torch.zeros(test.n, dtype=torch.float64)
    groups = test.groups
    fit = torch.cat([g.matrix() for g in grads])
    ui, uo = (full_in, u_out) if groups > 1 else (full_in[None], u_out[None])
    d_out = uo.shape[-1]
    for b in range(groups):
        rot = uo[b].T @ fit.view(len(fit), groups, d_out, -1)[:, b] @ ui[b]  # (N, d_out, d_in)
        lam = rot.pow(2).mean(0)
        rest = lam[:, :-kept].mean(1, keepdim=True).expand(-1, lam.shape[1] - kept)
        lam = torch.cat([rest, lam[:, -kept:]], 1)
        q = torch.kron(uo[b], ui[b])  # vec of (d_out, d_in) row-major
        f = q @ torch.diag(lam.flatten() + 1e-8) @ q.T
        g = test.matrix().view(test.n, groups, d_out, -1)[:, b].flatten(1)
        out += (g * torch.linalg.solve(f, g.T).T).sum(1)
    return out


@pytest.mark.parametrize(("d_in", "d_out", "groups"), [(40, 6, 1), (30, 5, 2)])
def test_the_quadratic_form_is_that_of_the_dense_fisher_it_defines(d_in, d_out, groups):
    grads = batches(d_in, d_out, groups)
    compact = make_fisher("ekfac-compact", 1e-8, rcond=0.0)
    for p in range(2):
        for g in grads:
            compact.update(g, p)
        compact.end_pass(p)
    kept = CompactEKFAC.rank(LayerShape(d_in, d_out, groups))
    assert 1 <= kept < d_in and compact.rest_dims == d_in - kept
    whole = fitted("ekfac", grads)  # the same factors' whole input basis (eigh's columns, same order)
    test = batches(d_in, d_out, groups, n=1)[0]
    expected = dense_quad(whole.u_in, whole.u_out, kept, grads, test)
    torch.testing.assert_close(compact.quad(test), expected, rtol=1e-8, atol=0)


@pytest.mark.parametrize("groups", [1, 2])
def test_the_wide_kind_truncates_the_output_basis_of_a_layer_with_more_outputs(groups):
    """``ekfac-compact-wide`` on a layer of 6 inputs and 40 outputs, where compact EKFAC keeps nothing
    (a diagonal Fisher), is compact EKFAC of the transposed gradients (δ and a traded): the same scores up
    to the rounding of eigh on factors scaled by 1/positions on the other side; on a layer with fewer
    outputs than inputs it is compact EKFAC to the last bit."""
    narrow = batches(40, 6, groups)
    wide = [FactoredGrad(g.d, g.a, groups=groups) for g in narrow]  # Gᵀ: 6 inputs, 40 outputs
    shape = LayerShape(6, 40, groups)
    assert CompactEKFAC.rank(shape) == 0 and not CompactEKFAC.takes(shape)
    assert WideCompactEKFAC.rank(shape) == CompactEKFAC.rank(LayerShape(40, 6, groups)) >= 1
    f = fitted("ekfac-compact-wide", wide)
    expected = fitted("ekfac-compact", narrow).quad(narrow[0])
    torch.testing.assert_close(f.quad(wide[0]), expected, rtol=1e-10, atol=0)
    state = f.state()
    assert (
        sum(t.numel() for t in _tensors(state)) * 4
        == WideCompactEKFAC.file_bytes(shape)
        <= 4 * 6 * 40 * groups
    )
    again = make_fisher("ekfac-compact-wide")
    again.load_state(state)
    torch.testing.assert_close(again.quad(wide[0]), f.quad(wide[0]), rtol=1e-3, atol=0)  # float32 columns
    assert torch.equal(fitted("ekfac-compact-wide", narrow).quad(narrow[0]), expected)


@pytest.mark.parametrize(
    ("kind", "d_in", "d_out", "groups"),
    [("ekfac-compact", 40, 6, 1), ("ekfac-compact", 30, 5, 2), ("ekfac-compact-wide", 6, 40, 2)],
)
def test_it_takes_ekfacs_first_pass_and_ends_where_its_own_fit_ends(kind, d_in, d_out, groups):
    """EKFAC's first pass on the same gradients (its factors and bases), then its own second pass: every
    field its own two passes make, to the last bit; a loaded EKFAC or a KFAC gives nothing."""
    grads = batches(d_in, d_out, groups)
    own, whole = fitted(kind, grads), fitted("ekfac", grads)
    taken = make_fisher(kind, 1e-3)  # ``fitted``'s damping
    assert taken.take_first_pass(whole)
    for g in grads:
        taken.update(g, 1)
    taken.end_pass(1)
    for key in ("u_in", "eig_in", "u_out", "eig_out", "scale", "rest"):
        assert torch.equal(getattr(taken, key), getattr(own, key)), key
    fields = ("rest_dims", "count", "scale_count", "factor_rows", "rcond_")
    assert [getattr(taken, k) for k in fields] == [getattr(own, k) for k in fields]
    loaded = make_fisher("ekfac")
    loaded.load_state(whole.state())
    assert not make_fisher(kind).take_first_pass(loaded)
    assert not make_fisher(kind).take_first_pass(fitted("kfac", grads))


def test_its_state_is_at_most_the_weights_and_reads_back_to_the_same_scores():
    grads = batches(200, 16)
    f = fitted("ekfac-compact", grads)
    state = f.state()
    numbers = sum(t.numel() for t in _tensors(state))
    assert numbers * 4 == CompactEKFAC.file_bytes(LayerShape(200, 16)) <= 4 * 200 * 16
    again = make_fisher("ekfac-compact")
    again.load_state(state)
    # its float32 columns against the fitted float64 ones: 1.8e-4 here, where EKFAC's float32 reflectors
    # move these scores by 4.1e-3
    torch.testing.assert_close(again.quad(grads[0]), f.quad(grads[0]), rtol=1e-3, atol=0)
    with pytest.raises(CheckpointError, match="'scale' and 'rest' do not fit"):
        make_fisher("ekfac-compact").load_state(state | {"rest": state["rest"][:-1]})
    with pytest.raises(CheckpointError, match="'rest_dims' does not fit"):
        make_fisher("ekfac-compact").load_state(state | {"rest_dims": 200})
    # a file whose kind and bases disagree is refused in one line either way
    whole = fitted("ekfac", grads).state()
    with pytest.raises(CheckpointError, match=r"u_in\.columns"):
        make_fisher("ekfac-compact").load_state(state | {"u_in": whole["u_in"]})
    with pytest.raises(CheckpointError, match=r"u_in\.tau"):
        make_fisher("ekfac").load_state(whole | {"u_in": state["u_in"]})


def test_the_ddpm_band_method_on_compact_fishers_saves_no_more_than_the_weights(tmp_path):
    """``rose-bands-stats-compact`` on a tiny DDPM: the layers that cannot hold a compact EKFAC within
    their weights (the GroupNorms' 2-column affine parameters, the 1-output head) get diagonal Fishers,
    the saved Fishers hold fewer numbers than the layers' weights, and the saved detector scores as the
    fitted one."""
    torch.manual_seed(0)
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()
    g = torch.Generator().manual_seed(0)
    fit, test = torch.rand(60, 1, 8, 8, generator=g), torch.rand(6, 1, 8, 8, generator=g)
    det = make_detector("rose-bands-stats-compact", model, progress=False).fit(fit[:24], held_out=fit[24:])
    assert isinstance(det, ROSE) and det.fishers_ is not None
    shapes = det.stream.probe(fit[:1])[0]
    kinds = det.fishers_.kinds
    assert set(kinds.values()) == {"ekfac-compact", "diag"}
    assert all((kinds[n] == "diag") == (not CompactEKFAC.takes(s)) for n, s in shapes.items())
    numbers = sum(t.numel() for f in det.fishers_.values() for t in _tensors(f.state()))
    assert numbers <= sum(s.params for s in shapes.values())
    det.save(tmp_path / "d.pt")
    # the model's float32 gradients meet the columns cast to float32 either way: equal up to the values'
    # float32 storage (measured 1.8e-7 here)
    loaded = Detector.load(tmp_path / "d.pt", model)
    np.testing.assert_allclose(loaded.score(test), det.score(test), rtol=1e-5)


def _tensors(state: dict) -> list[torch.Tensor]:
    out = []
    for v in state.values():
        out += _tensors(v) if isinstance(v, dict) else [v] if isinstance(v, torch.Tensor) else []
    return out


def test_the_wide_kind_counts_a_masked_layers_free_outputs() -> None:
    """A PixelCNN's masked output layer (9 inputs, 768 outputs: each colour's logits see only the earlier
    colours' features) is fitted transposed: the free outputs and inputs trade places with the bases, its
    remainder spans the free outputs less those kept, and the detector scores finitely."""
    from roseood.models.pixelcnn import PixelCNN

    torch.manual_seed(0)
    model = PixelCNN(in_channels=3, width=4, blocks=1).eval()
    x = torch.rand(30, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    det = make_detector("rose-ekfac-compact-wide", model, progress=False)
    shape = det.stream.probe(x[:1])[0]["output"]
    assert WideCompactEKFAC.flipped(shape.d_in, shape.d_out) and WideCompactEKFAC.takes(shape)
    with pytest.warns(DegenerateFitWarning):  # few statistics images
        det.fit(x[:20], held_out=x[20:])
    assert isinstance(det, ROSE) and det.fishers_ is not None
    out = det.fishers_["output"]
    assert isinstance(out, WideCompactEKFAC) and out.out_free == shape.d_in
    assert out.in_free is not None and out.rest_dims == out.in_free - WideCompactEKFAC.rank(shape)
    assert np.isfinite(det.score(x[:4])).all()
