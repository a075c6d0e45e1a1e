"""The paper's own numbers (Choi et al., ROSE), transcribed from its tables into ``paper.json``.

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

import json
from importlib import resources
from typing import Any

_DATA: dict[str, Any] = json.loads(resources.files("roseood.bench").joinpath("paper.json").read_text())

PAPER: dict[str, dict[str, float]] = {
    table: {key: float(value) for key, value in cells.items()} for table, cells in _DATA["tables"].items()
}
CAPTIONS: dict[str, str] = _DATA["captions"]
FIGURE_NOTES: dict[str, str] = _DATA["figure_notes"]


def paper_value(table: str, *path: str) -> float | None:
    """The paper's number at ``path`` in ``table`` (keys joined with '/'), or None when the paper has none."""
    return PAPER.get(table, {}).get("/".join(path))
