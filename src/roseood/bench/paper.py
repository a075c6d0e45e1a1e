"""The paper's own numbers (Choi et al., ROSE), transcribed from its tables, to print beside ours.

``PAPER[table][key]`` is a number printed in the paper (``/work/shared/paper/rose-paper.tex``); ``CAPTIONS``
says what each table is, ``FIGURE_NOTES`` what each figure shows. A cell the paper leaves empty has no key,
so ``paper_value`` returns None for it.

Key scheme: '/'-joined lowercase segments, always in this order (bracketed ones only where noted)::

    model / in-distribution / [capacity:Nx | layers:SET] / ood / method / [perturbation]
          / [brightness:B] / metric / [mean | std]

- model: ``vae``, ``glow``. In-distribution: ``fashion_mnist``, ``cifar10``.
- ood: ``mnist``, ``kmnist``, ``notmnist``, ``omniglot``, ``fashion_mnist``, ``cifar10``, ``svhn``,
  ``celeba``, ``lsun``, ``noise``, ``constant``, ``overall`` (the paper's mixed set of 1000 images per set).
- method: ``nll``, ``lr``, ``lratio``, ``ic-png``, ``ic-jp2``, ``rnd-svd``, ``rnd-dct``, ``rnd-gb``,
  ``rnd-random``, ``rose-ekfac``, ``rose-diag`` (the names of ``roseood.detectors.METHODS``).
- perturbation: only in the tables that compare perturbations (1, 8, 9, 10, 11), right after ``lratio``
  (the background model's perturbation) or ``rnd-*`` (the RND perturbation), written as a
  ``roseood.data.perturbations.make_perturbation`` spec: ``svd:22``, ``svd:28``, ``dct:28``, ``gb``,
  ``random:0.1``, ``random:0.2``, ``random:0.3`` (SVD/DCT: K; random: pixel ratio μ). In the other tables a
  method ran with one fixed setting, given in the comment above that table.
- brightness: only in Tables 1, 8, 9: the factor applied to the OOD images, as printed
  (``f"{b:g}"``: ``brightness:0.2`` … ``brightness:1`` … ``brightness:1.8``); the tables' Mean and Std
  columns (over the nine brightnesses) are ``.../auroc/mean`` and ``.../auroc/std``.
- capacity (Table 3 only): VAE width relative to the paper's standard VAE, ``capacity:0.5x`` … ``4x``.
- layers (Table 7 only): the GLOW layers ROSE is computed on, ``layers:invconv`` or ``layers:all``.
- metric: ``auroc``, ``auprc``, ``fpr80`` (fractions in [0, 1], as printed by the paper), and, for the
  runtime stated with Figure 4 only, ``images_per_second`` (that key has no ood segment).

One example key per table:

- table1: ``vae/cifar10/celeba/lratio/svd:28/brightness:0.2/auroc``,
  ``vae/cifar10/celeba/rose-ekfac/auroc/mean``
- table2: ``vae/fashion_mnist/mnist/rose-ekfac/auroc``
- table3: ``vae/fashion_mnist/capacity:0.5x/mnist/rose-ekfac/auroc``
- table4: ``glow/cifar10/svhn/ic-jp2/auprc``
- table5: ``vae/cifar10/overall/lr/fpr80``
- table6: ``vae/fashion_mnist/noise/rose-diag/auroc``
- table7: ``glow/cifar10/layers:all/svhn/rose-diag/auroc``
- table8: ``vae/cifar10/svhn/rnd-dct/dct:28/brightness:1.4/auroc``
- table9: ``vae/cifar10/omniglot/rnd-svd/svd:22/brightness:1/auroc``
- table10: ``vae/cifar10/mnist/lratio/random:0.3/auroc``
- table11: ``vae/cifar10/lsun/rnd-gb/gb/auroc``
- figure3: ``vae/cifar10/svhn/nll/auroc``
- figure4: ``vae/cifar10/rose-ekfac/images_per_second``

Caveats a reader of the numbers should know:

- GLOW's ROSE is the diagonal preconditioner on the invertible 1x1 convolutions (Appendix B.2), so the
  GLOW columns of Tables 2, 4, 5 and 7 are keyed ``rose-diag``; the paper has no EKFAC number for GLOW.
- RND trains its own predictor and target nets, not a VAE; its keys (Tables 1, 8, 9, 11) sit under
  ``vae/cifar10`` only to keep one key shape for the section 3.2 experiments, whose LRatio and ROSE are VAEs.
- ``lr`` is the paper's LR(E) (Likelihood Regret); ``nll`` on VAE is the IWAE estimate with 20 samples.
- The paper is not always self-consistent, and each table keeps its own numbers: e.g. LRatio CIFAR-10 vs
  LSUN is 0.593 in Table 2 but 0.576 for random:0.2 in Table 10; ROSE-EKFAC CIFAR-10 vs SVHN is 0.907 in
  Table 2 but 0.906 in Table 6; Fashion-MNIST vs noise is 0.996 in Table 2 but 0.992 in Table 6.
"""

from collections.abc import Sequence

_Rows = Sequence[tuple[str, Sequence[float | None]]]


def _grid(template: str, columns: Sequence[str], rows: _Rows) -> dict[str, float]:
    """Keys ``template.format(row=..., col=...)`` for every printed cell of a table block."""
    out: dict[str, float] = {}
    for row, values in rows:
        if len(values) != len(columns):
            raise ValueError(f"row {row!r} of {template!r} has {len(values)} cells, expected {len(columns)}")
        for col, value in zip(columns, values, strict=True):
            if value is None:
                continue
            key = template.format(row=row, col=col)
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = float(value)
    return out


def _merge(*parts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        overlap = out.keys() & part.keys()
        if overlap:
            raise ValueError(f"duplicate keys {sorted(overlap)}")
        out.update(part)
    return out


# Columns of Tables 2, 4 and 5: the VAE block (left) and the GLOW block (right) of each row.
_VAE_METHODS = ("rose-ekfac", "lr", "nll", "lratio", "ic-png", "ic-jp2")
_GLOW_METHODS = ("rose-diag", "lratio", "ic-png", "ic-jp2")
# Row order of the Fashion-MNIST (top) and CIFAR-10 (bottom) parts of Tables 2, 4 and 5.
_FMNIST_OOD = ("mnist", "kmnist", "notmnist", "omniglot", "cifar10", "svhn", "noise", "constant", "overall")
_CIFAR_OOD = ("svhn", "celeba", "lsun", "mnist", "fashion_mnist", "notmnist", "noise", "constant", "overall")


def _main_table(
    metric: str, vae_fmnist: _Rows, glow_fmnist: _Rows, vae_cifar: _Rows, glow_cifar: _Rows
) -> dict[str, float]:
    """Tables 2, 4, 5: rows are OOD sets, columns methods, for {VAE, GLOW} x {Fashion-MNIST, CIFAR-10}."""
    blocks = (
        (vae_fmnist, _FMNIST_OOD),
        (glow_fmnist, _FMNIST_OOD),
        (vae_cifar, _CIFAR_OOD),
        (glow_cifar, _CIFAR_OOD),
    )
    for rows, order in blocks:
        if tuple(r for r, _ in rows) != order:
            raise ValueError(f"rows {[r for r, _ in rows]} are not the paper's order {order}")
    return _merge(
        _grid(f"vae/fashion_mnist/{{row}}/{{col}}/{metric}", _VAE_METHODS, vae_fmnist),
        _grid(f"glow/fashion_mnist/{{row}}/{{col}}/{metric}", _GLOW_METHODS, glow_fmnist),
        _grid(f"vae/cifar10/{{row}}/{{col}}/{metric}", _VAE_METHODS, vae_cifar),
        _grid(f"glow/cifar10/{{row}}/{{col}}/{metric}", _GLOW_METHODS, glow_cifar),
    )


# Tables 1, 8, 9: columns are the brightness factors of the OOD set, then the row's Mean and Std of AUROC.
_BRIGHTNESS = (
    *(f"brightness:{b:g}/auroc" for b in (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8)),
    "auroc/mean",
    "auroc/std",
)

# Table 1 -- CelebA at nine brightnesses vs CIFAR-10 (VAE for LRatio and ROSE). Rows: LRatio with four
# background perturbations, RND with four perturbations, ROSE; SVD K=28, DCT K=28, GB kernel 3 sigma 0.8,
# random mu=0.2; LRatio lambda=0 (Appendix B.3).
_TABLE1 = _grid(
    "vae/cifar10/celeba/{row}/{col}",
    _BRIGHTNESS,
    [
        ("lratio/svd:28", (0.575, 0.557, 0.440, 0.388, 0.324, 0.564, 0.630, 0.593, 0.524, 0.511, 0.097)),
        ("lratio/dct:28", (0.822, 0.746, 0.562, 0.461, 0.373, 0.463, 0.459, 0.416, 0.371, 0.519, 0.153)),
        ("lratio/gb", (0.941, 0.777, 0.657, 0.577, 0.458, 0.087, 0.019, 0.007, 0.004, 0.392, 0.348)),
        ("lratio/random:0.2", (0.010, 0.085, 0.205, 0.269, 0.333, 0.564, 0.721, 0.811, 0.870, 0.430, 0.302)),
        ("rnd-svd/svd:28", (0.183, 0.075, 0.120, 0.358, 0.566, 0.733, 0.825, 0.871, 0.893, 0.514, 0.316)),
        ("rnd-dct/dct:28", (0.516, 0.064, 0.196, 0.335, 0.548, 0.737, 0.836, 0.880, 0.896, 0.556, 0.289)),
        ("rnd-gb/gb", (0.053, 0.073, 0.187, 0.335, 0.554, 0.748, 0.849, 0.897, 0.917, 0.513, 0.337)),
        (
            "rnd-random/random:0.2",
            (0.010, 0.037, 0.140, 0.303, 0.577, 0.794, 0.892, 0.933, 0.950, 0.515, 0.374),
        ),
        ("rose-ekfac", (0.954, 0.890, 0.818, 0.774, 0.778, 0.871, 0.928, 0.960, 0.976, 0.883, 0.074)),
    ],
)

# Table 2 -- AUROC. Rows: OOD sets; columns: methods (VAE left, GLOW right). GLOW's ROSE is the diagonal
# preconditioner on the InvConv layers. LRatio's background perturbation is random pixels: mu=0.3 on
# Fashion-MNIST (lambda 0 for VAE, 0.01 for GLOW), mu=0.2 on CIFAR-10 (lambda 0 for VAE, 5e-5 for GLOW).
_TABLE2 = _main_table(
    "auroc",
    [
        ("mnist", (0.995, 0.964, 0.161, 0.844, 0.934, 0.449)),
        ("kmnist", (0.997, 0.991, 0.626, 0.968, 0.636, 0.389)),
        ("notmnist", (1.000, 1.000, 0.980, 0.950, 0.893, 0.958)),
        ("omniglot", (1.000, 1.000, 1.000, 0.869, 1.000, 1.000)),
        ("cifar10", (0.999, 0.995, 1.000, 0.916, 0.899, 0.999)),
        ("svhn", (1.000, 1.000, 0.999, 0.624, 0.999, 1.000)),
        ("noise", (0.996, 0.997, 1.000, 1.000, 0.443, 1.000)),
        ("constant", (1.000, 0.998, 0.953, 0.647, 1.000, 1.000)),
        ("overall", (0.999, 0.993, 0.869, 0.873, 0.874, 0.879)),
    ],
    [
        ("mnist", (0.562, 0.850, 0.922, 0.616)),
        ("kmnist", (0.518, 0.930, 0.496, 0.281)),
        ("notmnist", (0.896, 0.500, 0.542, 0.521)),
        ("omniglot", (1.000, 0.869, 1.000, 1.000)),
        ("cifar10", (0.976, 0.974, 0.772, 0.998)),
        ("svhn", (0.951, 0.147, 0.718, 0.999)),
        ("noise", (1.000, 1.000, 1.000, 1.000)),
        ("constant", (0.996, 0.005, 1.000, 1.000)),
        ("overall", (0.885, 0.704, 0.811, 0.846)),
    ],
    [
        ("svhn", (0.907, 0.953, 0.081, 0.050, 0.910, 0.942)),
        ("celeba", (0.778, 0.682, 0.428, 0.333, 0.588, 0.303)),
        ("lsun", (0.526, 0.513, 0.595, 0.593, 0.660, 0.322)),
        ("mnist", (0.999, 0.996, 0.000, 0.825, 0.985, 0.980)),
        ("fashion_mnist", (0.996, 0.990, 0.038, 0.783, 0.992, 0.989)),
        ("notmnist", (0.998, 0.996, 0.030, 0.506, 0.989, 0.989)),
        ("noise", (1.000, 0.997, 1.000, 1.000, 0.172, 0.115)),
        ("constant", (0.973, 0.995, 0.277, 0.223, 1.000, 1.000)),
        ("overall", (0.918, 0.913, 0.246, 0.610, 0.826, 0.763)),
    ],
    [
        ("svhn", (0.940, 0.479, 0.882, 0.969)),
        ("celeba", (0.694, 0.732, 0.697, 0.381)),
        ("lsun", (0.730, 0.832, 0.759, 0.388)),
        ("mnist", (0.998, 0.002, 0.999, 1.000)),
        ("fashion_mnist", (0.988, 0.004, 0.997, 1.000)),
        ("notmnist", (0.992, 0.003, 0.995, 0.998)),
        ("noise", (1.000, 1.000, 1.000, 1.000)),
        ("constant", (1.000, 0.001, 1.000, 1.000)),
        ("overall", (0.932, 0.319, 0.932, 0.870)),
    ],
)

# Table 3 -- AUROC of ROSE (EKFAC) on VAEs of 0.5x, 1x, 2x, 4x the standard width (columns), per OOD set
# (rows); left block trained on Fashion-MNIST, right block on CIFAR-10.
_CAPACITIES = ("0.5x", "1x", "2x", "4x")
_TABLE3 = _merge(
    _grid(
        "vae/fashion_mnist/capacity:{col}/{row}/rose-ekfac/auroc",
        _CAPACITIES,
        [
            ("mnist", (0.997, 0.995, 0.991, 0.988)),
            ("kmnist", (0.998, 0.997, 0.994, 0.993)),
            ("notmnist", (1.000, 1.000, 1.000, 1.000)),
            ("svhn", (1.000, 1.000, 1.000, 1.000)),
            ("celeba", (0.999, 0.999, 1.000, 0.998)),
            ("lsun", (0.999, 0.999, 1.000, 0.999)),
            ("noise", (0.999, 0.996, 0.993, 0.992)),
            ("constant", (1.000, 1.000, 1.000, 1.000)),
        ],
    ),
    _grid(
        "vae/cifar10/capacity:{col}/{row}/rose-ekfac/auroc",
        _CAPACITIES,
        [
            ("mnist", (1.000, 0.999, 0.998, 0.999)),
            ("kmnist", (0.999, 0.999, 0.998, 0.999)),
            ("notmnist", (0.998, 0.998, 0.995, 0.994)),
            ("svhn", (0.809, 0.907, 0.851, 0.822)),
            ("celeba", (0.716, 0.778, 0.792, 0.786)),
            ("lsun", (0.536, 0.526, 0.516, 0.529)),
            ("noise", (1.000, 1.000, 0.993, 0.940)),
            ("constant", (0.990, 0.973, 0.923, 0.919)),
        ],
    ),
)

# Table 4 -- AUPRC, same layout and settings as Table 2 (in-distribution samples are the positives).
_TABLE4 = _main_table(
    "auprc",
    [
        ("mnist", (0.996, 0.968, 0.334, 0.857, 0.948, 0.494)),
        ("kmnist", (0.997, 0.991, 0.622, 0.963, 0.666, 0.436)),
        ("notmnist", (1.000, 1.000, 0.980, 0.875, 0.851, 0.946)),
        ("omniglot", (1.000, 1.000, 1.000, 0.912, 1.000, 1.000)),
        ("cifar10", (0.999, 0.996, 1.000, 0.839, 0.911, 0.999)),
        ("svhn", (1.000, 1.000, 0.999, 0.512, 0.998, 1.000)),
        ("noise", (0.995, 0.998, 1.000, 1.000, 1.000, 1.000)),
        ("constant", (1.000, 0.997, 0.948, 0.533, 1.000, 1.000)),
        ("overall", (0.998, 0.994, 0.759, 0.755, 0.858, 0.804)),
    ],
    [
        ("mnist", (0.600, 0.905, 0.942, 0.663)),
        ("kmnist", (0.547, 0.954, 0.486, 0.367)),
        ("notmnist", (0.876, 0.490, 0.479, 0.465)),
        ("omniglot", (1.000, 0.835, 1.000, 1.000)),
        ("cifar10", (0.979, 0.940, 0.845, 0.998)),
        ("svhn", (0.953, 0.332, 0.799, 0.999)),
        ("noise", (1.000, 1.000, 1.000, 1.000)),
        ("constant", (0.995, 0.308, 1.000, 1.000)),
        ("overall", (0.847, 0.572, 0.757, 0.727)),
    ],
    [
        ("svhn", (0.921, 0.959, 0.320, 0.312, 0.921, 0.953)),
        ("celeba", (0.798, 0.723, 0.487, 0.410, 0.587, 0.417)),
        ("lsun", (0.551, 0.543, 0.589, 0.560, 0.672, 0.394)),
        ("mnist", (1.000, 0.997, 0.307, 0.841, 0.991, 0.989)),
        ("fashion_mnist", (0.996, 0.991, 0.310, 0.732, 0.995, 0.994)),
        ("notmnist", (0.997, 0.996, 0.310, 0.494, 0.992, 0.994)),
        ("noise", (1.000, 0.998, 1.000, 1.000, 0.420, 0.396)),
        ("constant", (0.972, 0.995, 0.366, 0.350, 1.000, 1.000)),
        ("overall", (0.887, 0.882, 0.357, 0.516, 0.758, 0.662)),
    ],
    [
        ("svhn", (0.952, 0.337, 0.886, 0.973)),
        ("celeba", (0.720, 0.611, 0.746, 0.442)),
        ("lsun", (0.739, 0.701, 0.803, 0.423)),
        ("mnist", (0.999, 0.307, 1.000, 1.000)),
        ("fashion_mnist", (0.992, 0.307, 0.998, 1.000)),
        ("notmnist", (0.995, 0.307, 0.996, 0.998)),
        ("noise", (1.000, 1.000, 1.000, 1.000)),
        ("constant", (1.000, 0.307, 1.000, 1.000)),
        ("overall", (0.915, 0.363, 0.922, 0.779)),
    ],
)

# Table 5 -- FPR80 (false positive rate at 80% true positive rate; lower is better), same layout and
# settings as Table 2.
_TABLE5 = _main_table(
    "fpr80",
    [
        ("mnist", (0.007, 0.056, 0.975, 0.246, 0.000, 0.805)),
        ("kmnist", (0.003, 0.007, 0.680, 0.036, 0.547, 0.873)),
        ("notmnist", (0.000, 0.000, 0.011, 0.001, 0.201, 0.011)),
        ("omniglot", (0.000, 0.000, 0.000, 0.000, 0.000, 0.000)),
        ("cifar10", (0.001, 0.003, 0.000, 0.054, 0.205, 0.000)),
        ("svhn", (0.000, 0.000, 0.002, 0.983, 0.000, 0.000)),
        ("noise", (0.012, 0.004, 0.000, 0.000, 0.594, 0.000)),
        ("constant", (0.000, 0.000, 0.053, 0.915, 0.000, 0.000)),
        ("overall", (0.002, 0.003, 0.067, 0.117, 0.249, 0.102)),
    ],
    [
        ("mnist", (0.664, 0.199, 0.129, 0.590)),
        ("kmnist", (0.741, 0.099, 0.787, 0.995)),
        ("notmnist", (0.195, 0.800, 0.920, 0.936)),
        ("omniglot", (0.000, 0.218, 0.000, 0.000)),
        ("cifar10", (0.025, 0.000, 0.328, 0.001)),
        ("svhn", (0.062, 1.000, 0.409, 0.000)),
        ("noise", (0.000, 0.000, 0.000, 0.000)),
        ("constant", (0.000, 1.000, 0.000, 0.000)),
        ("overall", (0.206, 0.883, 0.328, 0.321)),
    ],
    [
        ("svhn", (0.144, 0.068, 0.986, 0.987, 0.122, 0.074)),
        ("celeba", (0.373, 0.508, 0.802, 0.886, 0.678, 0.867)),
        ("lsun", (0.766, 0.759, 0.694, 0.724, 0.560, 0.916)),
        ("mnist", (0.001, 0.004, 1.000, 0.350, 0.019, 0.023)),
        ("fashion_mnist", (0.004, 0.011, 0.998, 0.442, 0.013, 0.013)),
        ("notmnist", (0.001, 0.004, 0.998, 0.851, 0.020, 0.013)),
        ("noise", (0.000, 0.004, 0.000, 0.000, 0.870, 0.901)),
        ("constant", (0.019, 0.002, 0.988, 0.996, 0.000, 0.000)),
        ("overall", (0.080, 0.081, 0.999, 0.875, 0.328, 0.725)),
    ],
    [
        ("svhn", (0.097, 0.960, 0.184, 0.029)),
        ("celeba", (0.511, 0.679, 0.483, 0.846)),
        ("lsun", (0.468, 0.422, 0.385, 0.898)),
        ("mnist", (0.003, 1.000, 0.001, 0.000)),
        ("fashion_mnist", (0.018, 1.000, 0.004, 0.000)),
        ("notmnist", (0.014, 1.000, 0.008, 0.005)),
        ("noise", (0.000, 0.000, 0.000, 0.000)),
        ("constant", (0.000, 1.000, 0.000, 0.000)),
        ("overall", (0.072, 1.000, 0.092, 0.072)),
    ],
)

# Table 6 -- AUROC of ROSE on VAE with the diagonal vs the EKFAC preconditioner (rows), per OOD set
# (columns); all encoder convolutions. No Omniglot column.
_TABLE6 = _merge(
    _grid(
        "vae/fashion_mnist/{col}/{row}/auroc",
        ("mnist", "kmnist", "notmnist", "cifar10", "svhn", "noise", "constant", "overall"),
        [
            ("rose-diag", (0.971, 0.978, 0.997, 0.992, 0.997, 0.885, 0.997, 0.980)),
            ("rose-ekfac", (0.995, 0.997, 1.000, 0.999, 1.000, 0.992, 1.000, 0.998)),
        ],
    ),
    _grid(
        "vae/cifar10/{col}/{row}/auroc",
        ("svhn", "celeba", "lsun", "mnist", "fashion_mnist", "noise", "constant", "overall"),
        [
            ("rose-diag", (0.877, 0.713, 0.512, 0.997, 0.962, 0.911, 0.957, 0.889)),
            ("rose-ekfac", (0.906, 0.778, 0.526, 0.999, 0.996, 1.000, 0.973, 0.918)),
        ],
    ),
)

# Table 7 -- AUROC of ROSE on GLOW (diagonal preconditioner, Appendix B.2) computed on the InvConv layers
# only ("InvConv") vs on all convolutional layers ("Full") (rows), per OOD set (columns). No Omniglot column.
_TABLE7 = _merge(
    _grid(
        "glow/fashion_mnist/{row}/{col}/rose-diag/auroc",
        ("mnist", "kmnist", "notmnist", "cifar10", "svhn", "noise", "constant", "overall"),
        [
            ("layers:invconv", (0.562, 0.518, 0.896, 0.976, 0.951, 1.000, 0.996, 0.885)),
            ("layers:all", (0.733, 0.787, 0.829, 0.858, 0.835, 1.000, 0.852, 0.857)),
        ],
    ),
    _grid(
        "glow/cifar10/{row}/{col}/rose-diag/auroc",
        ("svhn", "celeba", "lsun", "mnist", "fashion_mnist", "noise", "constant", "overall"),
        [
            ("layers:invconv", (0.940, 0.694, 0.730, 0.998, 0.988, 1.000, 1.000, 0.932)),
            ("layers:all", (0.827, 0.572, 0.669, 0.802, 0.798, 0.999, 0.952, 0.809)),
        ],
    ),
)

# Table 8 -- as Table 1 but SVHN at nine brightnesses (same perturbation settings as Table 1).
_TABLE8 = _grid(
    "vae/cifar10/svhn/{row}/{col}",
    _BRIGHTNESS,
    [
        ("lratio/svd:28", (0.296, 0.726, 0.874, 0.898, 0.913, 0.910, 0.880, 0.825, 0.749, 0.786, 0.185)),
        ("lratio/dct:28", (0.653, 0.937, 0.963, 0.956, 0.938, 0.937, 0.927, 0.910, 0.886, 0.901, 0.090)),
        ("lratio/gb", (0.995, 0.991, 0.982, 0.976, 0.947, 0.802, 0.638, 0.453, 0.312, 0.788, 0.246)),
        ("lratio/random:0.2", (0.004, 0.019, 0.034, 0.043, 0.050, 0.113, 0.208, 0.326, 0.457, 0.139, 0.150)),
        ("rnd-svd/svd:28", (0.993, 0.979, 0.973, 0.973, 0.978, 0.976, 0.966, 0.957, 0.944, 0.971, 0.032)),
        ("rnd-dct/dct:28", (0.998, 0.981, 0.952, 0.922, 0.907, 0.889, 0.875, 0.867, 0.860, 0.917, 0.047)),
        ("rnd-gb/gb", (0.991, 0.971, 0.953, 0.942, 0.939, 0.932, 0.926, 0.916, 0.907, 0.942, 0.025)),
        (
            "rnd-random/random:0.2",
            (0.006, 0.009, 0.025, 0.060, 0.147, 0.256, 0.360, 0.443, 0.496, 0.200, 0.183),
        ),
        ("rose-ekfac", (0.809, 0.807, 0.861, 0.893, 0.907, 0.920, 0.934, 0.951, 0.965, 0.894, 0.054)),
    ],
)

# Table 9 -- as Table 1 but Omniglot at nine brightnesses; SVD uses K=22 here (caption of Table 9).
_TABLE9 = _grid(
    "vae/cifar10/omniglot/{row}/{col}",
    _BRIGHTNESS,
    [
        ("lratio/svd:22", (0.046, 0.463, 0.192, 0.005, 0.001, 0.003, 0.007, 0.010, 0.011, 0.082, 0.146)),
        ("lratio/dct:28", (0.460, 0.036, 0.005, 0.000, 0.033, 0.021, 0.106, 0.016, 0.015, 0.077, 0.139)),
        ("lratio/gb", (0.122, 0.161, 0.126, 0.009, 0.001, 0.001, 0.001, 0.001, 0.001, 0.047, 0.064)),
        ("lratio/random:0.2", (0.010, 0.157, 0.338, 0.008, 0.961, 0.997, 0.999, 0.909, 0.999, 0.598, 0.430)),
        ("rnd-svd/svd:22", (0.221, 0.347, 0.499, 0.781, 0.957, 0.961, 0.964, 0.966, 0.968, 0.740, 0.285)),
        ("rnd-dct/dct:28", (0.069, 0.279, 0.477, 0.731, 0.913, 0.935, 0.939, 0.938, 0.936, 0.691, 0.315)),
        ("rnd-gb/gb", (0.043, 0.345, 0.476, 0.778, 0.950, 0.968, 0.973, 0.974, 0.974, 0.720, 0.328)),
        (
            "rnd-random/random:0.2",
            (0.013, 0.197, 0.451, 0.788, 0.970, 0.981, 0.983, 0.984, 0.984, 0.706, 0.363),
        ),
        ("rose-ekfac", (0.893, 0.803, 0.898, 0.819, 0.996, 0.999, 0.999, 0.999, 0.999, 0.934, 0.078)),
    ],
)

# Table 10 -- AUROC of LRatio on the CIFAR-10 VAE per background perturbation (columns: SVD22, SVD28, DCT28,
# GB, Random0.1/0.2/0.3) and OOD set (rows); background models trained with lambda=0.
_TABLE10 = _grid(
    "vae/cifar10/{row}/lratio/{col}/auroc",
    ("svd:22", "svd:28", "dct:28", "gb", "random:0.1", "random:0.2", "random:0.3"),
    [
        ("svhn", (0.564, 0.913, 0.938, 0.947, 0.040, 0.050, 0.071)),
        ("celeba", (0.343, 0.324, 0.373, 0.458, 0.330, 0.333, 0.340)),
        ("lsun", (0.514, 0.581, 0.573, 0.485, 0.597, 0.576, 0.580)),
        ("mnist", (0.984, 0.731, 0.157, 0.117, 0.317, 0.825, 0.788)),
        ("fashion_mnist", (0.832, 0.655, 0.348, 0.230, 0.514, 0.783, 0.716)),
        ("notmnist", (0.339, 0.163, 0.154, 0.092, 0.253, 0.506, 0.533)),
        ("noise", (0.225, 0.906, 0.981, 0.839, 1.000, 1.000, 1.000)),
        ("constant", (0.328, 0.418, 0.928, 0.713, 0.238, 0.223, 0.235)),
        ("overall", (0.514, 0.536, 0.456, 0.407, 0.379, 0.610, 0.615)),
    ],
)

# Table 11 -- AUROC of RND trained on CIFAR-10 per perturbation (columns as in Table 10) and OOD set (rows).
_TABLE11 = _grid(
    "vae/cifar10/{row}/{col}/auroc",
    (
        "rnd-svd/svd:22",
        "rnd-svd/svd:28",
        "rnd-dct/dct:28",
        "rnd-gb/gb",
        "rnd-random/random:0.1",
        "rnd-random/random:0.2",
        "rnd-random/random:0.3",
    ),
    [
        ("svhn", (0.984, 0.978, 0.907, 0.939, 0.143, 0.147, 0.146)),
        ("celeba", (0.582, 0.566, 0.548, 0.554, 0.573, 0.577, 0.573)),
        ("lsun", (0.562, 0.563, 0.553, 0.564, 0.570, 0.573, 0.570)),
        ("mnist", (0.933, 0.937, 0.897, 0.961, 0.928, 0.933, 0.925)),
        ("fashion_mnist", (0.927, 0.824, 0.794, 0.841, 0.784, 0.788, 0.789)),
        ("notmnist", (0.978, 0.979, 0.965, 0.985, 0.960, 0.964, 0.961)),
        ("noise", (0.999, 0.999, 1.000, 1.000, 1.000, 1.000, 1.000)),
        ("constant", (0.999, 0.999, 0.999, 1.000, 0.825, 0.828, 0.822)),
        ("overall", (0.884, 0.866, 0.846, 0.871, 0.773, 0.777, 0.774)),
    ],
)

# Figure 3 -- the AUROCs its caption states for the ROC curves of ROSE and NLL on the VAEs.
_FIGURE3 = {
    "vae/fashion_mnist/mnist/rose-ekfac/auroc": 0.995,
    "vae/fashion_mnist/mnist/nll/auroc": 0.161,
    "vae/cifar10/svhn/rose-ekfac/auroc": 0.907,
    "vae/cifar10/svhn/nll/auroc": 0.081,
}

# Figure 4 -- the numbers section 5.2 states about it (VAE trained on CIFAR-10; one RTX 3090 GPU and an
# i9-10900K CPU): Likelihood Regret "about 2.5" and ROSE "about 110" images per second, and ROSE's AUROC
# on the overall OOD set, 0.918, the best of the five methods plotted.
_FIGURE4 = {
    "vae/cifar10/lr/images_per_second": 2.5,
    "vae/cifar10/rose-ekfac/images_per_second": 110.0,
    "vae/cifar10/overall/rose-ekfac/auroc": 0.918,
}

PAPER: dict[str, dict[str, float]] = {
    "table1": _TABLE1,
    "table2": _TABLE2,
    "table3": _TABLE3,
    "table4": _TABLE4,
    "table5": _TABLE5,
    "table6": _TABLE6,
    "table7": _TABLE7,
    "table8": _TABLE8,
    "table9": _TABLE9,
    "table10": _TABLE10,
    "table11": _TABLE11,
    "figure3": _FIGURE3,
    "figure4": _FIGURE4,
}

CAPTIONS: dict[str, str] = {
    "table1": "AUROC of LRatio, RND and ROSE vs CelebA at brightness 0.2x-1.8x (+ mean, std); CIFAR-10 VAE.",
    "table2": "AUROC of ROSE and baselines on VAE and GLOW trained on Fashion-MNIST and CIFAR-10.",
    "table3": "AUROC of ROSE on VAEs of 0.5x, 1x, 2x and 4x width, trained on Fashion-MNIST and CIFAR-10.",
    "table4": "AUPRC of ROSE and baselines on VAE and GLOW (layout of Table 2).",
    "table5": "FPR80 of ROSE and baselines on VAE and GLOW (layout of Table 2).",
    "table6": "AUROC of ROSE on VAE with the diagonal (DIAG) vs EKFAC Fisher preconditioner.",
    "table7": "AUROC of ROSE on GLOW computed on InvConv layers only vs all convolutional layers.",
    "table8": "AUROC of LRatio, RND and ROSE vs SVHN at brightness 0.2x-1.8x (+ mean, std); CIFAR-10 VAE.",
    "table9": "AUROC of LRatio, RND and ROSE vs Omniglot at brightness 0.2x-1.8x (+ mean, std); SVD K=22.",
    "table10": "AUROC of LRatio, CIFAR-10 VAE, per background perturbation (SVD22/28, DCT28, GB, Random).",
    "table11": "AUROC of RND trained on CIFAR-10 per perturbation (SVD22/28, DCT28, GB, Random).",
    "figure3": "AUROCs stated for Figure 3's ROC curves: ROSE vs NLL, FMNIST vs MNIST and CIFAR-10 vs SVHN.",
    "figure4": "Runtime (images/s) and overall AUROC stated for Figure 4, on the CIFAR-10 VAE.",
}

FIGURE_NOTES: dict[str, str] = {
    "figure1": "Histograms of NLL, in-distribution vs OOD, for VAE and GLOW (FMNIST vs MNIST, CIFAR-10 vs "
    "SVHN): the OOD sets get lower NLL than the in-distribution sets.",
    "figure2": "Example CelebA images at the brightness factors of Table 1 (0.2x to 1.8x).",
    "figure3": "ROC curves of ROSE and NLL on the VAEs: AUROC 0.161 -> 0.995 (FMNIST vs MNIST) and "
    "0.081 -> 0.907 (CIFAR-10 vs SVHN).",
    "figure4": "Throughput (images/s) vs overall AUROC of IC, LRatio, LR and ROSE on the CIFAR-10 VAE: "
    "LR about 2.5 images/s, ROSE about 110 images/s with the best AUROC, 0.918.",
    "figure5": "Box plots of ROSE's overall AUROC over ten repeats for 10 to 10K in-distribution samples "
    "used for the Fisher matrix: robust even with few samples, rising slowly with more (no numbers given).",
    "figure6": "Layer-wise ROSE AUROC (diagonal, OOD: MNIST, KMNIST, NotMNIST) of classifiers trained on "
    "FMNIST (4-conv CNN, VGG-11/13/16/19, ResNet-18): rises with depth in the CNN, peaks mid-depth in "
    "VGG/ResNet (no numbers given).",
}


def paper_value(table: str, *path: str) -> float | None:
    """The paper's number at ``path`` in ``table`` (keys joined with '/'), or None when the paper has none."""
    return PAPER.get(table, {}).get("/".join(path))
