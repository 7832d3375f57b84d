"""The attention of Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP: the global scores of eq. 8 and section 3.1, the local windows of
section 3.2 and Vaswani et al.'s scaled dot score, each class with its formula, h_t the decoder
state (the query s of this package) and h̄_s an encoder state (a key h):

    a_t(s) = softmax_s(score(h_t, h̄_s))   (eq. 7),   c_t = sum_s a_t(s) h̄_s

Shapes: B batch, T query (target) positions, S key (source) positions, Dq/Dk query/key sizes,
d_k the size of the scaled dot score, A the hidden size of concat and of local-p's predictor.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attnseq.attention.base import AlignInputs, Attention, ScoreWrapper
from attnseq.attention.masks import masked_softmax
from attnseq.config.choices import Window


def check_equal_sizes(score: str, query_dim: int, key_dim: int) -> None:
    """Reject a score that compares queries and keys directly when their sizes differ.

    Raises:
        ValueError: if query_dim != key_dim.
    """
    if query_dim != key_dim:
        raise ValueError(
            f"the {score!r} score needs query_dim == key_dim, got {query_dim} != {key_dim}; "
            "use 'general', 'concat' or 'additive', which project the states"
        )


class DotAttention(Attention):
    """score(s, h) = s^T h (Luong eq. 8, "dot"); no parameters.

    Args:
        query_dim: size of the decoder state s.
        key_dim: size of the encoder state h; must equal `query_dim`, the dot product needs it.

    Raises:
        ValueError: if query_dim != key_dim.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        check_equal_sizes("dot", query_dim, key_dim)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, D) against keys (B, S, D) -> energies (B, T, S)."""
        return torch.bmm(query, prepared_keys.transpose(1, 2))  # (B, T, D) x (B, D, S)


class GeneralAttention(Attention):
    """score(s, h) = s^T W_a h (Luong eq. 8, "general").

    W_a (Dq x Dk) is applied to the keys in `prepare_keys`: (W_a h) is then the same for every
    query, so it costs one projection of S vectors per batch instead of one per decoder step.

    Args:
        query_dim: size of the decoder state s (Dq).
        key_dim: size of the encoder state h (Dk).
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        # nn.Linear(Dk, Dq).weight has shape (Dq, Dk): exactly W_a, and key_proj(h) = W_a h.
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)  # W_a

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """keys (B, S, Dk) -> W_a h (B, S, Dq)."""
        return self.key_proj(keys)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, Dq) against W_a h (B, S, Dq) -> energies (B, T, S)."""
        return torch.bmm(query, prepared_keys.transpose(1, 2))  # (B, T, Dq) x (B, Dq, S)


class TanhScore(Attention):
    """score(s, h) = v^T tanh(W_q s + W_k h), the form Bahdanau's additive score and Luong's
    concat score share (W_a [s; h] = W_q s + W_k h for W_a = [W_q | W_k]); W_k h is computed
    once per batch in `prepare_keys`.

    Args:
        query_dim: size of the decoder state s (Dq).
        key_dim: size of the encoder state h (Dk).
        attn_dim: the score's hidden size (A).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W_q
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)  # W_k
        self.energy = nn.Linear(attn_dim, 1, bias=False)  # v

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """keys (B, S, Dk) -> W_k h (B, S, A)."""
        return self.key_proj(keys)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, Dq) against W_k h (B, S, A) -> energies (B, T, S)."""
        return self.tanh_scores(query, prepared_keys)

    def tanh_scores(
        self, query: Tensor, prepared_keys: Tensor, extra: Tensor | None = None
    ) -> Tensor:
        """v^T tanh(W_q s + W_k h + extra) (B, T, S); `extra` (B, T, S, A) joins the sum inside
        the tanh (coverage's w_c c_i), None adds nothing."""
        q = self.query_proj(query)  # (B, T, A)
        # (B, T, 1, A) + (B, 1, S, A): W_q s + W_k h for every (t, s) pair
        hidden = q.unsqueeze(2) + prepared_keys.unsqueeze(1)  # (B, T, S, A)
        if extra is not None:
            hidden = hidden + extra
        return self.energy(torch.tanh(hidden)).squeeze(-1)  # (B, T, S)


class ConcatAttention(TanhScore):
    """score(s, h) = v_a^T tanh(W_a [s; h]) (Luong eq. 8, "concat"), W_a (A x (Dq + Dk)) stored
    as its column blocks [W_q | W_k] (`TanhScore`); `concat_weight()` returns the full W_a.

    Args:
        query_dim: size of the decoder state s (Dq).
        key_dim: size of the encoder state h (Dk).
        attn_dim: number of rows of W_a (A), the hidden size of the score.
    """

    def concat_weight(self) -> Tensor:
        """The paper's W_a = [W_q | W_k], shape (A, Dq + Dk)."""
        return torch.cat([self.query_proj.weight, self.key_proj.weight], dim=1)


class LocationAttention(Attention):
    """a_t = softmax(W_a h_t) (Luong section 3.1): score(s, h_j) = (W_a s)_j, the j-th row of
    W_a applied to the query, with no content term; a batch of S positions uses W_a's first S
    rows.

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


class ScaledDotAttention(Attention):
    """score(q, k) = q^T k / sqrt(d_k) (Vaswani et al. 2017, "Attention Is All You Need",
    NeurIPS; eq. 1, one head, no projections); no parameters. The sqrt(d_k) keeps the energies'
    variance near one, so the softmax does not saturate (footnote 4).

    Args:
        query_dim: size of the query q.
        key_dim: size of the key k (d_k); must equal `query_dim`.

    Raises:
        ValueError: if query_dim != key_dim.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        check_equal_sizes("scaled_dot", query_dim, key_dim)
        self.scale = 1.0 / math.sqrt(key_dim)  # a constant of the architecture, not a cache

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, d_k) against keys (B, S, d_k) -> energies (B, T, S)."""
        return torch.bmm(query, prepared_keys.transpose(1, 2)) * self.scale  # (B, T, S)


LOCAL_WINDOWS = tuple(window.value for window in Window if window.value != "global")


class LocalAttention(ScoreWrapper):
    """Attention inside the window [p_t - D, p_t + D] (Luong section 3.2, eqs. 9-10):

        local-m:  p_t = t
        local-p:  p_t = S_x * sigmoid(v_p^T tanh(W_p h_t))                            (eq. 9)
                  a_t(s) = align(h_t, h̄_s) exp(-(s - p_t)^2 / (2 sigma^2)),  sigma = D/2  (eq. 10)

    align is the content score's softmax over the window; positions outside it get 0, and
    local-p rows are not renormalised after the Gaussian (as in the paper). S_x is the row's
    real source length; the other choices the paper leaves open are docs/internals/attention.md's.

    Args:
        content: the score inside the window (e.g. `GeneralAttention`); its `prepare_keys` and
            `scores` are used, its own `forward` is not.
        window: "local_m" (p_t = t) or "local_p" (p_t predicted from the query, eq. 9).
        D: half-width of the window, >= 1 (the paper uses D = 10).
        query_dim: size of the decoder state h_t (Dq); used by local_p's predictor.
        attn_dim: rows of W_p (A), the predictor's hidden size; used by local_p only.

    Raises:
        ValueError: for an unknown window or D < 1.
    """

    def __init__(
        self,
        content: Attention,
        window: str,
        D: int,
        query_dim: int,
        attn_dim: int,
    ) -> None:
        super().__init__(content)
        if window not in LOCAL_WINDOWS:
            raise ValueError(f"unknown local window {window!r}; valid: {', '.join(LOCAL_WINDOWS)}")
        if D < 1:
            # local_p's sigma = D / 2 must be positive; a D = 0 window would be hard alignment.
            raise ValueError(f"the local attention half-width D must be >= 1, got {D}")
        self.window = window
        self.D = D
        self.sigma = D / 2.0  # Luong sec. 3.2: "the standard deviation is empirically set as D/2"
        if window == "local_p":
            self.position_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W_p
            self.position_energy = nn.Linear(attn_dim, 1, bias=False)  # v_p

    def window_centres(
        self,
        query: Tensor,
        src_len: int,
        mask: Tensor | None = None,
        query_positions: Tensor | None = None,
    ) -> Tensor:
        """The aligned positions p_t, shape (B or 1, T, 1), in float32 or wider.

        Args:
            query: (B, T, Dq) decoder states.
            src_len: S, the padded source length.
            mask: bool (B, S), (B, 1, S) or (B, T, S), True = allowed; gives S_x for local_p.
            query_positions: (T,) or (B, T) target positions for local_m; default 0..T-1.
        """
        num_queries = query.size(1)
        # Positions are compared with integers up to S; float16 would round them above 2048.
        dtype = torch.promote_types(query.dtype, torch.float32)
        if self.window == "local_m":
            if query_positions is None:
                query_positions = torch.arange(num_queries, device=query.device)  # (T,)
            if query_positions.size(-1) != num_queries or query_positions.dim() not in (1, 2):
                raise ValueError(
                    f"query_positions must have shape (T,) or (B, T) with T={num_queries}, "
                    f"got {tuple(query_positions.shape)}"
                )
            positions = query_positions.to(device=query.device, dtype=dtype)
            if positions.dim() == 1:
                positions = positions.unsqueeze(0)  # (1, T): same positions for every row
            return positions.unsqueeze(-1)  # (B or 1, T, 1)
        # local_p, eq. 9: p_t = S_x * sigmoid(v_p^T tanh(W_p h_t))
        hidden = torch.tanh(self.position_proj(query))  # (B, T, A)
        fraction = torch.sigmoid(self.position_energy(hidden)).to(dtype)  # (B, T, 1)
        if mask is None:
            src_lengths = torch.full((1, 1, 1), float(src_len), dtype=dtype, device=query.device)
        else:
            if mask.dim() == 2:
                mask = mask.unsqueeze(1)  # (B, 1, S)
            src_lengths = mask.sum(dim=-1, keepdim=True).to(dtype)  # (B, 1 or T, 1): S_x
        return src_lengths * fraction  # (B, T, 1)

    def align(self, inputs: AlignInputs) -> Tensor:
        """The content score's softmax inside the window around p_t (eq. 7 restricted to it),
        times the Gaussian of eq. 10 for local_p.

        `inputs.query_positions` holds the target positions t for local_m (default 0..T-1;
        the step number when decoding one step at a time); local_p ignores them.

        Returns:
            weights (B, T, S); weights outside the window or masked are exactly 0; local_m
            rows sum to one, local_p rows sum to at most one.
        """
        energies = self.scores(inputs.query, inputs.keys)  # (B, T, S)
        src_len, mask = energies.size(-1), inputs.mask
        centres = self.window_centres(inputs.query, src_len, mask, inputs.query_positions)
        positions = torch.arange(src_len, device=energies.device, dtype=centres.dtype)  # (S,)
        distance = positions - centres  # (B|1, T, S): s - p_t
        allowed = distance.abs() <= self.D  # (B|1, T, S): inside [p_t - D, p_t + D]
        if mask is not None:
            allowed = allowed & mask  # (B, T, S)
        weights = masked_softmax(energies, allowed)  # (B, T, S): align(h_t, h̄_s) in the window
        if self.window == "local_p":
            # eq. 10: favour positions near p_t; the product is not renormalised (as in the paper)
            gaussian = torch.exp(-distance.square() / (2.0 * self.sigma**2))  # (B, T, S)
            weights = weights * gaussian.to(weights.dtype)
        return weights
