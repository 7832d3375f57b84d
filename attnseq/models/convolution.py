"""The convolution sublayer of the encoder, `model.conv_kernel=k`: the convolution module of the
Conformer (Gulati et al. 2020, "Conformer: Convolution-augmented Transformer for Speech
Recognition", Interspeech; section 2.2, figure 2), for local context beside self-attention's
long-range one:

    pointwise conv (d -> 2d) -> GLU -> depthwise conv (kernel k) -> norm -> Swish
    -> pointwise conv (d -> d) -> dropout

The pointwise convolutions are position-wise linear layers; the depthwise convolution filters
each channel over k neighbouring positions (k odd, k // 2 zeros of padding on each side, so
the length is kept and position t sees t - k // 2 .. t + k // 2). Depthwise + pointwise is the
depthwise-separable convolution: k d depthwise weights plus the pointwise ones, where a full
convolution of width k has k d^2.

Place in the encoder layer (transformer_layers.py): after self-attention and before the
feed-forward network, as the Conformer block puts it after its self-attention module, in the
same residual block as every sublayer (its LayerNorm is the module's first, "Layernorm" in
figure 2). The Conformer's two half-step feed-forward networks (macaron style) are not
used: the layer keeps its one feed-forward network.

Two choices of attnseq against the paper:
- padding: positions beyond a sequence's length are set to zero right before the depthwise
  convolution, the only step that mixes positions, so a real position sees exactly what it
  would see with no padding at all (zeros, as the convolution's own padding at the sequence's
  end): extra padding does not change the outputs of real positions.
- norm: LayerNorm over the channels where the paper has BatchNorm. BatchNorm's statistics
  come from every position of the batch, padding included, so one example's output would
  depend on the others and on the amount of padding.

Shapes: B batch, N sequence length, d = d_model.
"""

import torch.nn.functional as F
from torch import Tensor, nn


class ConvolutionModule(nn.Module):
    """Conformer convolution module with a padding mask (module docstring).

    Args:
        d_model: channels d.
        kernel: k, odd, >= 1.
        dropout: dropout on the output.

    Raises:
        ValueError: for an even or non-positive kernel.
    """

    def __init__(self, d_model: int, kernel: int, dropout: float) -> None:
        super().__init__()
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(
                f"the convolution kernel must be odd and >= 1 (same length out), got {kernel}"
            )
        self.kernel = kernel
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)  # first pointwise conv, before GLU
        self.depthwise = nn.Conv1d(
            d_model, d_model, kernel, padding=kernel // 2, groups=d_model
        )  # one filter of k taps per channel
        self.norm = nn.LayerNorm(d_model)
        self.pointwise_out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Convolve.

        Args:
            x: (B, N, d) the sublayer input.
            mask: (B, N) bool, True at real positions; None = no padding.

        Returns:
            (B, N, d).
        """
        h = F.glu(self.pointwise_in(x), dim=-1)  # (B, N, 2d) -> (B, N, d)
        if mask is not None:  # padding contributes zeros, as beyond the sequence's end
            h = h.masked_fill(~mask[..., None], 0.0)
        h = self.depthwise(h.transpose(1, 2)).transpose(1, 2)  # (B, d, N) conv -> (B, N, d)
        h = F.silu(self.norm(h))  # Swish(x) = x sigmoid(x)
        return self.dropout(self.pointwise_out(h))

    def extra_repr(self) -> str:
        return f"kernel={self.kernel}"


def convolution_or_none(d_model: int, kernel: int, dropout: float) -> ConvolutionModule | None:
    """The module for `model.conv_kernel=kernel`; None for 0 (off)."""
    return ConvolutionModule(d_model, kernel, dropout) if kernel else None
