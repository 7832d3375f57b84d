"""Values that hold one source word each (`model.attention.values=embeddings`, models/rnn.py).

The value of source position j is its word and where it stands, nothing of its neighbours:

    v_j = W_v [x_j ; PE(j) ; PE(n - 1 - j)]

x_j the source word embedding, n the source length, PE the sinusoidal encoding of Vaswani et
al. (2017, section 3.5) at POSITION_SIZE channels, W_v a learned projection to the annotation
size E, so the decoder is the same as with annotation values. The two distances let a decoder
that sees the source only through what it reads know where it read: from the start (the last
word of a reversal is position 0) and from the end (the last word of a monotone
transduction is position n - 1). A bidirectional annotation h_j instead also encodes words
j-1 and j+1, so a model reading h_{j-1} can produce word j.

Shapes: B batch, S source length, emb the embedding size, E the annotation size.
"""

import torch
from torch import Tensor, nn

from attnseq.models.positional import SinusoidalPositionalEncoding

# channels per distance: sinusoids of wavelengths 2*pi .. 2*pi*10000^(14/16), distinct far
# beyond any source length the models take
POSITION_SIZE = 16


class WordValues(nn.Module):
    """v_j = W_v [x_j ; PE(j) ; PE(n - 1 - j)] (module docstring).

    Args:
        emb_dim: source embedding size.
        size: E, the value size.
    """

    def __init__(self, emb_dim: int, size: int) -> None:
        super().__init__()
        self.positions = SinusoidalPositionalEncoding(POSITION_SIZE)
        self.projection = nn.Linear(emb_dim + 2 * POSITION_SIZE, size, bias=False)  # W_v

    def forward(self, embedded: Tensor, lengths: Tensor) -> Tensor:
        """Source embeddings (B, S, emb) and lengths (B,) -> values (B, S, E); the values past
        a row's length are never read (attention masks them)."""
        from_start = torch.arange(embedded.size(1), device=embedded.device)  # (S,)
        from_end = (lengths.to(embedded.device).unsqueeze(1) - 1 - from_start).clamp_min(0)
        where = torch.cat(
            [
                self.positions(from_start).expand(embedded.size(0), -1, -1),  # (B, S, P)
                self.positions(from_end),  # (B, S, P)
            ],
            dim=-1,
        ).to(embedded.dtype)
        return self.projection(torch.cat([embedded, where], dim=-1))
