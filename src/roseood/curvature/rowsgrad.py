"""The row-kept kind of ``LayerGrad``: a layer's input and output gradient kept row by row (an expanded batch
has several rows per sample), the per-sample matrices formed straight from them and the factors only when
a Fisher reads them. The handlers subclass it per layer type (a convolution's ``ConvGrad``)."""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Iterator

import torch
from torch import Tensor

from roseood.curvature.layergrad import FactoredGrad, LayerGrad, factors_cheaper


class RowsGrad(LayerGrad):
    """Per-sample gradients kept as the layer's input and output gradient, row by row (an expanded batch
    has several rows per sample), with the matrices formed straight from them; the factors ``a`` and
    ``δ`` (for the Kronecker factors and rotations) are formed only when asked for (``factored``), and
    not kept."""

    def __init__(self, x: Tensor, gy: Tensor, groups: int, mask: Tensor | None) -> None:
        super().__init__()
        self.x, self.gy, self.samples = x, gy, x.shape[0]
        self.groups, self.mask, self.coords = groups, mask, None

    def per_sample(self, n: int, order: Tensor | None) -> LayerGrad:
        if n == self.samples:
            return self
        folded = copy.copy(self)
        if order is not None:
            folded.x, folded.gy = self.x[order], self.gy[order]
        folded.samples = n
        return folded

    @abstractmethod
    def _inputs(self) -> Tensor:
        """(rows, T, Din): each row's inputs at its positions."""

    @abstractmethod
    def _outputs(self) -> Tensor:
        """(rows, T, Dout): each row's output gradients at its positions."""

    def _by_sample(self, t: Tensor) -> Tensor:
        """(rows, …) → (samples, rows per sample, …), image-major."""
        return t.view(self.samples, -1, *t.shape[1:])

    def factored(self) -> FactoredGrad:
        a, d = self._inputs(), self._outputs()
        return FactoredGrad(
            a.reshape(self.samples, -1, a.shape[2]),
            d.reshape(self.samples, -1, d.shape[2]),
            coords=self.coords,
            groups=self.groups,
            mask=self.mask,
        )

    def _factors_first(self) -> bool:
        return self.mask is None and factors_cheaper(self)

    @property
    def _one_position(self) -> bool:
        """One row of one position per sample (a linear map as a convolution over its whole input):
        the factors are the rows themselves and the matrices one outer product each, cheaper than
        forming them from the rows."""
        return self.positions == 1

    def matrix_runs(self) -> Iterator[Tensor]:
        yield from self.factored().matrix_runs() if self._one_position else super().matrix_runs()

    def square_sum(self) -> Tensor:
        return self.factored().square_sum() if self._one_position else super().square_sum()

    def weighted_square(self, w: Tensor) -> Tensor:
        return self.factored().weighted_square(w) if self._one_position else super().weighted_square(w)

    @property
    def n(self) -> int:
        return self.samples

    @property
    def positions(self) -> int:
        return self.gy.numel() // self.width_out // self.samples

    @property
    def width_out(self) -> int:
        return self.gy.shape[1]

    @property
    def device(self) -> torch.device:
        return self.gy.device

    @property
    def dtype(self) -> torch.dtype:
        return self.gy.dtype

    def nbytes(self) -> int:
        held = (self.x, self.gy, self.mask)
        return sum(t.untyped_storage().nbytes() for t in held if t is not None)

    def peak_bytes(self) -> int:
        """As every kind's, plus the factors, formed when the Kronecker factors or a rotation read them."""
        factors = self.n * self.positions * (self.width_in + self.width_out) * self.dtype.itemsize
        return super().peak_bytes() + factors
