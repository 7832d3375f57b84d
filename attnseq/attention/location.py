"""Location-based attention of Luong, Pham & Manning 2015, "Effective Approaches to
Attention-based Neural Machine Translation", EMNLP; section 3.1, the equation after eq. 8:

    a_t = softmax(W_a h_t)

The weights are computed from the decoder state h_t alone: W_a maps it to one energy per source
position, with no content term comparing h_t to the encoder states. W_a has `max_src_len` rows;
a batch with S source positions uses the first S of them (the paper's a_t has the source length,
which varies from batch to batch). The padding mask still applies (in `Attention.forward`), so
padded positions get zero weight and the rest renormalise.

Shapes: B batch, T query (target) positions, S key (source) positions, Dq query size.
"""

from torch import Tensor, nn
from torch.nn import functional as F

from attnseq.attention.base import Attention


class LocationAttention(Attention):
    """score(s, h_j) = (W_a s)_j, the j-th row of W_a applied to the query.

    Args:
        query_dim: size of the decoder state s (Dq).
        max_src_len: number of rows of W_a, the longest source this module can attend over.
    """

    def __init__(self, query_dim: int, max_src_len: int) -> None:
        super().__init__()
        self.max_src_len = max_src_len
        self.location_proj = nn.Linear(query_dim, max_src_len, bias=False)  # W_a

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, Dq); prepared_keys (B, S, *) only gives S -> energies (B, T, S).

        Raises:
            ValueError: if S > max_src_len (W_a has no row for those positions).
        """
        src_len = prepared_keys.size(1)
        if src_len > self.max_src_len:
            raise ValueError(
                f"location attention was built for max_src_len={self.max_src_len} source "
                f"positions but got S={src_len}; raise max_src_len or shorten the sources"
            )
        # Only the first S rows of W_a: the same numbers as (W_a s)[..., :S] without computing
        # max_src_len - S energies that would be thrown away.
        return F.linear(query, self.location_proj.weight[:src_len])  # (B, T, S)
