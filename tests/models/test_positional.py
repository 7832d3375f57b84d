"""Positional encodings (attnseq/models/positional.py): the sinusoid matches its formula (Vaswani
et al. 2017, section 3.5), positions start at an offset per row for decoding steps, and d_model
must be even; fairseq's sinusoids are M2M100's table."""

import math

import pytest
import torch

from attnseq.models.positional import (
    FairseqSinusoidalPositionalEncoding,
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    build_positional_encoding,
    make_positions,
)

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def test_sinusoidal_matches_formula() -> None:
    d_model = 8
    encoding = SinusoidalPositionalEncoding(d_model)(torch.arange(5))  # (T, d_model)
    for pos in range(5):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert encoding[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert encoding[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positions_with_offset() -> None:
    assert torch.equal(make_positions(3, 4), torch.tensor([4, 5, 6]))
    per_row = make_positions(2, torch.tensor([0, 5]))  # (B, T)
    assert torch.equal(per_row, torch.tensor([[0, 1], [5, 6]]))
    for encoding in (SinusoidalPositionalEncoding(8), LearnedPositionalEncoding(8, 16)):
        full = encoding(torch.arange(10))  # (T, d_model)
        step = encoding(make_positions(1, torch.tensor([7, 2])))  # (B, 1, d_model)
        torch.testing.assert_close(step[:, 0], full[[7, 2]])


def test_sinusoidal_needs_even_d_model() -> None:
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionalEncoding(7)


@pytest.mark.parametrize("d_model", [32, 7])
def test_fairseq_sinusoids_are_m2m100s_table(d_model: int) -> None:
    """Bit for bit the table transformers' M2M100 builds (an odd d_model's last channel zero),
    position p on row p + offset, the padding row before position 0's zero."""
    modeling = pytest.importorskip("transformers.models.m2m_100.modeling_m2m_100")
    encoding = FairseqSinusoidalPositionalEncoding(d_model, 40, offset=2)
    table = modeling.M2M100SinusoidalPositionalEmbedding.get_embedding(42, d_model, 1)
    assert torch.equal(encoding.table, table)
    positions = torch.tensor([[0, 1, 39]])
    assert torch.equal(encoding(positions), table[positions + 2])
    assert not encoding.table[1].any()
    assert "table" not in encoding.state_dict()  # computed, not saved


def test_an_offset_goes_with_a_table_of_offset_rows() -> None:
    assert build_positional_encoding("sinusoidal_fairseq", 8, 10, 2).table.shape == (12, 8)
    with pytest.raises(ValueError, match="goes with learned or sinusoidal_fairseq positions"):
        build_positional_encoding("sinusoidal_split", 8, 10, 2)
