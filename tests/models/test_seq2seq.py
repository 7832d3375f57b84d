"""The contract of every model (attnseq/models/seq2seq.py): the default reorder_state selects and
repeats the rows of every tensor of a nested decoder state, the alignment head attaches one head
or the mean of the heads, and only vocabularies of one size can share an embedding."""

import pytest
import torch
from helpers import table_model

from attnseq.errors import UserError
from attnseq.models.seq2seq import AlignmentHead, Seq2SeqOutput, Vocabularies


def test_reorder_state_selects_and_repeats_the_rows_of_every_tensor() -> None:
    state = {
        "hidden": torch.tensor([[0.0], [1.0], [2.0]]),  # (B, 1)
        "layers": [({"k": torch.tensor([10, 11, 12])},)],
        "width": 3,
    }
    reordered = table_model([{0: 0.0}]).reorder_state(state, torch.tensor([2, 0, 0]))
    assert torch.equal(reordered["hidden"], torch.tensor([[2.0], [0.0], [0.0]]))
    assert isinstance(reordered["layers"], list) and isinstance(reordered["layers"][0], tuple)
    assert torch.equal(reordered["layers"][0][0]["k"], torch.tensor([12, 10, 10]))
    assert reordered["width"] == 3


def test_the_alignment_head_is_one_head_or_the_mean_of_the_heads() -> None:
    weights = torch.arange(2 * 2 * 1 * 3, dtype=torch.float).reshape(2, 2, 1, 3)  # (B, H, T, S)
    one = AlignmentHead(head=1).attach(Seq2SeqOutput(torch.zeros(2, 1, 5)), weights)
    assert torch.equal(one.alignment_attention, weights[:, 1])
    mean = AlignmentHead().attach(Seq2SeqOutput(torch.zeros(2, 1, 5)), weights)
    assert torch.equal(mean.alignment_attention, weights.mean(dim=1))


def test_only_vocabularies_of_one_size_share_an_embedding() -> None:
    Vocabularies(12, 12, 0, 1, 2).check_shareable()
    with pytest.raises(UserError, match="src_vocab_size=10 and tgt_vocab_size=12"):
        Vocabularies(10, 12, 0, 1, 2).check_shareable()
