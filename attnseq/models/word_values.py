"""Values that hold one source word each (`model.attention.values=embeddings`, models/rnn.py).

The value of source position j is its word and where it stands, nothing of its neighbours; the
key is its annotation and where it stands:

    p_j = [PE(j) ; PE(n - 1 - j)]        v_j = W_v [x_j ; p_j]        k_j = h_j + W_p p_j

x_j the source word embedding, h_j its annotation, n the source length, PE the sinusoidal
encoding of Vaswani et al. (2017, section 3.5) at POSITION_SIZE channels, W_v and W_p learned
projections to the annotation size E, so the decoder and the scores are the same sizes as with
annotation values. The two distances tell a decoder that sees the source only through what it
reads where it read, from the start (the last word of a reversal is position 0) and from the
end (the last word of a monotone transduction is position n - 1); in the keys they let the
first query, which knows nothing of the source yet, find an end of it. A bidirectional
annotation h_j as the value would also carry words j-1 and j+1, so a model reading h_{j-1} could
produce word j.

Shapes: B batch, S source length, emb the embedding size, E the annotation size, P =
2 * POSITION_SIZE.
"""

import torch
from torch import Tensor, nn

from attnseq.models.positional import SinusoidalPositionalEncoding

# channels per distance: sinusoids of wavelengths 2*pi .. 2*pi*10000^(14/16), distinct far
# beyond any source length the models take
POSITION_SIZE = 16


class WordValues(nn.Module):
    """p_j, v_j and k_j of the module docstring.

    Args:
        emb_dim: source embedding size.
        size: E, the value and key size.
    """

    def __init__(self, emb_dim: int, size: int) -> None:
        super().__init__()
        self.positions = SinusoidalPositionalEncoding(POSITION_SIZE)
        self.projection = nn.Linear(emb_dim + 2 * POSITION_SIZE, size, bias=False)  # W_v
        self.key_positions = nn.Linear(2 * POSITION_SIZE, size, bias=False)  # W_p

    def where(self, lengths: Tensor, width: int) -> Tensor:
        """p_j (B, S=width, P) for sources of `lengths` (B,); past a row's length the distance
        to the end is 0 (those positions are masked wherever they are read)."""
        from_start = torch.arange(width, device=lengths.device)  # (S,)
        from_end = (lengths.unsqueeze(1) - 1 - from_start).clamp_min(0)  # (B, S)
        start = self.positions(from_start).expand(lengths.size(0), -1, -1)  # (B, S, P/2)
        return torch.cat([start, self.positions(from_end)], dim=-1)

    def forward(
        self, embedded: Tensor, annotations: Tensor, lengths: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Source embeddings (B, S, emb), annotations (B, S, E) and lengths (B,) -> the values
        v (B, S, E) and the keys k (B, S, E)."""
        where = self.where(lengths.to(embedded.device), embedded.size(1)).to(embedded.dtype)
        values = self.projection(torch.cat([embedded, where], dim=-1))
        return values, annotations + self.key_positions(where)
