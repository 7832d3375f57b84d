"""Local attention of Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP; section 3.2, eqs. 9-10.

At each target step t the decoder attends only to a window [p_t - D, p_t + D] of source
positions around an aligned position p_t, with a content score (any of this package's global
scores: dot, general, concat, additive, ...) normalised inside the window:

    local-m (monotonic):   p_t = t                                             (sec. 3.2)
    local-p (predictive):  p_t = S_x * sigmoid(v_p^T tanh(W_p h_t))            (eq. 9)
                           a_t(s) = align(h_t, h̄_s) * exp(-(s - p_t)^2 / (2 sigma^2)),
                           sigma = D / 2                                        (eq. 10)

align(h_t, h̄_s) is the softmax of the content scores over the positions in the window (eq. 7
restricted to the window); positions outside it get exactly zero weight.

Conventions this implementation fixes where the paper is silent:
- Source positions are 0-based, s = 0..S-1; for local-m, p_t is the target position t (0-based,
  `query_positions`, default 0..T-1), so step t is centred on source position t.
- S_x is the real length of each source sentence, the number of allowed positions in its row
  of the padding mask (S when there is no mask). p_t is therefore a real number in (0, S_x).
- The window is every integer s with |s - p_t| <= D: 2D + 1 positions when p_t is an integer
  (always for local-m, the paper's "a_t in R^{2D+1}"), 2D positions when it is not.
  The window is clipped by the sequence edges and by the padding mask; a window that holds no
  allowed position (e.g. t far past the end of the source) gives all-zero weights, not NaN.
- local-p rows do NOT sum to one: eq. 10 multiplies the normalised in-window weights by the
  Gaussian (which is 1 only at s = p_t), and the paper does not renormalise; neither do we.
  local-m rows sum to one (or are all zero).
- The window boundary is a step function of p_t, so W_p and v_p learn only through the Gaussian,
  as in the paper ("to favor alignment points near p_t"); the boundary itself has no gradient.

Shapes: B batch, T query (target) positions, S key (source) positions, Dq query size,
A the hidden size of the position predictor.
"""

import torch
from torch import Tensor, nn

from attnseq.attention.base import AlignInputs, Attention, ScoreWrapper
from attnseq.attention.masks import masked_softmax
from attnseq.config.choices import Window

LOCAL_WINDOWS = tuple(window.value for window in Window if window.value != "global")


class LocalAttention(ScoreWrapper):
    """Windowed attention around p_t, wrapping a content score module.

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
            rows sum to one, local_p rows sum to at most one (see module doc).
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
