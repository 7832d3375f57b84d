"""Positional encodings added to the token embeddings of a transformer (Vaswani et al. 2017,
"Attention Is All You Need", section 3.5): the sinusoids, Marian's and fairseq's layouts of
them and the learned table. Each maps integer positions of any shape P to (*P, d_model), so one
module serves a whole sequence ((T,)) and an incremental step ((B, 1) from a per-row counter;
`make_positions`).
"""

import math

import torch
from torch import Tensor, nn


def make_positions(
    length: int, offset: int | Tensor = 0, device: torch.device | None = None
) -> Tensor:
    """Positions offset, offset + 1, ..., offset + length - 1.

    Args:
        length: number of positions T.
        offset: first position; an int, or a (B,) tensor of per-row offsets (e.g. the number of
            target tokens each row has already decoded).
        device: device of the result when `offset` is an int.

    Returns:
        (T,) for an int offset, (B, T) for a tensor offset; dtype long.
    """
    if isinstance(offset, Tensor):
        steps = torch.arange(length, device=offset.device)  # (T,)
        return offset.long().unsqueeze(1) + steps  # (B, 1) + (T,) -> (B, T)
    return torch.arange(offset, offset + length, device=device)  # (T,)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids of geometrically increasing wavelength (section 3.5):

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Computed on the fly from the positions, so there is no maximum length and nothing to store.
    Channels are interleaved as in the formula: even channels sin, odd channels cos.

    Args:
        d_model: encoding size; must be even (one sin/cos pair per frequency).
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        if d_model % 2 != 0:
            raise ValueError(f"sinusoidal positional encoding needs an even d_model, got {d_model}")
        self.d_model = d_model

    def forward(self, positions: Tensor) -> Tensor:
        """Encodings of integer positions.

        Args:
            positions: (*P) integer positions, e.g. (T,) or (B, T).

        Returns:
            (*P, d_model) float32; the caller casts to its own dtype.
        """
        # 1 / 10000^(2i / d_model), i = 0 .. d_model/2 - 1; rebuilt per call (tiny) in float32,
        # so a module cast to half keeps full precision for large positions
        exponents = torch.arange(0, self.d_model, 2, device=positions.device) / self.d_model
        inv_freq = torch.exp(-math.log(10000.0) * exponents.float())  # (d_model/2,)
        angles = positions.float().unsqueeze(-1) * inv_freq  # (*P, d_model/2)
        # stack -> (*P, d_model/2, 2) -> flatten -> (*P, d_model): sin at 2i, cos at 2i+1
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


class SplitSinusoidalPositionalEncoding(nn.Module):
    """The sinusoids of section 3.5 with Marian's channel layout:

        PE(pos, i) = sin(pos / 10000^(2i / d_model)),  PE(pos, d_model/2 + i) = cos(...),
        i = 0 .. d_model/2 - 1

    A table of max_positions rows computed once in float64 and kept in float32 (not saved
    with the weights), so the encodings are exactly those of the Hugging Face Marian model,
    whose table is built so; longer inputs are an error, as there.

    Args:
        d_model: encoding size; must be even.
        max_positions: number of positions with an encoding.
    """

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        if d_model % 2 != 0:
            raise ValueError(f"sinusoidal positional encoding needs an even d_model, got {d_model}")
        self.d_model = d_model
        self.max_positions = max_positions
        positions = torch.arange(max_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
        exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model  # 2i / d_model
        angles = positions / torch.pow(10000.0, exponents)  # (P, d_model/2)
        table = torch.cat((angles.sin(), angles.cos()), dim=1).float()  # (P, d_model)
        self.register_buffer("table", table, persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """Encodings of integer positions (*P) in [0, max_positions) -> (*P, d_model)."""
        return self.table[positions]


class FairseqSinusoidalPositionalEncoding(nn.Module):
    """fairseq's sinusoids (tensor2tensor's frequencies), as M2M100 and NLLB compute them:

        PE(r, i) = sin(r * w_i),  PE(r, half + i) = cos(r * w_i),
        w_i = exp(-i * log(10000) / (half - 1)),  i = 0 .. half - 1,  half = d_model // 2

    (a zero last channel for an odd d_model), position p reading row r = p + offset of a
    table of max_positions + offset rows. fairseq numbers the positions of a sequence from
    padding_idx + 1 and gives padding tokens row padding_idx (zeros); attnseq pads on the
    right, so the p-th real token is preceded by p real tokens and its row is p +
    padding_idx + 1 (offset 2 for M2M100's <pad> = 1), while a padding position gets a row
    of its own that no real token attends to. The table is built in float32 by fairseq's
    own operations, so its values are bit for bit Hugging Face's.

    Args:
        d_model: encoding size.
        max_positions: number of positions with an encoding; longer inputs are an error.
        offset: rows before the row of position 0 (padding_idx + 1).
    """

    def __init__(self, d_model: int, max_positions: int, offset: int = 0) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_positions = max_positions
        self.offset = offset
        rows, half = max_positions + offset, d_model // 2
        if half < 2:
            raise ValueError(f"fairseq's sinusoids need d_model >= 4, got {d_model}")
        step = math.log(10000) / (half - 1)
        frequencies = torch.exp(torch.arange(half, dtype=torch.int64).float() * -step)
        angles = torch.arange(rows, dtype=torch.int64).float().unsqueeze(1) * frequencies
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (rows, 2 * half)
        if d_model % 2:
            table = torch.cat([table, torch.zeros(rows, 1)], dim=1)
        if offset:
            table[offset - 1] = 0.0  # padding_idx's row
        self.register_buffer("table", table, persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """Encodings of integer positions (*P) in [0, max_positions) -> (*P, d_model)."""
        return self.table[positions + self.offset if self.offset else positions]


class LearnedPositionalEncoding(nn.Module):
    """One trained vector per position 0 .. max_positions - 1, the alternative the paper
    compares against (section 3.5, table 3 row E). With an offset k, position p reads row
    p + k of a table of max_positions + k rows, as BART's table is laid out (fairseq keeps
    its first rows for padding positions).

    Args:
        d_model: encoding size.
        max_positions: number of positions with a vector; longer inputs are an error.
        offset: rows before the row of position 0.
    """

    def __init__(self, d_model: int, max_positions: int, offset: int = 0) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_positions = max_positions
        self.offset = offset
        self.table = nn.Embedding(max_positions + offset, d_model)
        # the same scale as the token embeddings they are added to
        nn.init.normal_(self.table.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, positions: Tensor) -> Tensor:
        """Encodings of integer positions.

        Args:
            positions: (*P) integer positions in [0, max_positions), e.g. (T,) or (B, T).

        Returns:
            (*P, d_model).
        """
        return self.table(positions + self.offset if self.offset else positions)


def build_positional_encoding(
    kind: str, d_model: int, max_positions: int, offset: int = 0
) -> nn.Module:
    """The positional encoding named `kind` ("sinusoidal", "learned", "sinusoidal_split" or
    "sinusoidal_fairseq"), `offset` the rows of a learned or fairseq table before position
    0's; ValueError otherwise."""
    if offset and kind not in OFFSET_KINDS:
        raise ValueError(
            f"a position offset goes with learned or sinusoidal_fairseq positions, not {kind!r}"
        )
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model)
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_positions, offset)
    if kind == "sinusoidal_split":
        return SplitSinusoidalPositionalEncoding(d_model, max_positions)
    if kind == "sinusoidal_fairseq":
        return FairseqSinusoidalPositionalEncoding(d_model, max_positions, offset)
    raise ValueError(
        f"unknown positional encoding {kind!r}; choose 'sinusoidal', 'learned', "
        "'sinusoidal_split' or 'sinusoidal_fairseq'"
    )


OFFSET_KINDS = ("learned", "sinusoidal_fairseq")  # the kinds whose tables have an offset
# the encodings that hold one row per position, up to their max_positions
TABLES = (
    LearnedPositionalEncoding,
    SplitSinusoidalPositionalEncoding,
    FairseqSinusoidalPositionalEncoding,
)
TABLE_KINDS = ("learned", "sinusoidal_split", "sinusoidal_fairseq")  # their kinds' names


def position_limit(model: nn.Module) -> int | None:
    """The most positions a sequence may have in `model` (BOS included): the smallest table
    of its positional encodings (learned, sinusoidal_split); None when it has none
    (sinusoidal, RNN): no limit."""
    limits = [m.max_positions for m in model.modules() if isinstance(m, TABLES)]
    return min(limits, default=None)
