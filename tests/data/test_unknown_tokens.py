"""The count of unknown tokens (attnseq/data/unknown_tokens.py): a warning only for rates above
the threshold."""

from attnseq.data.unknown_tokens import UnknownCount, unknown_warning


def test_unknown_warning_is_for_rates_above_the_threshold() -> None:
    half = UnknownCount("--tgt", "the model's target vocabulary", unk_id=1).add_all([[1, 5]])
    most = UnknownCount("--src", "the model's source vocabulary", unk_id=1).add_all([[1, 1, 4]])
    assert unknown_warning([half]) is None
    message = unknown_warning([half, most])
    assert message is not None and message.count("\n") == 0
    assert "66.7% of the --src tokens (2 of 3)" in message and "--tgt" not in message
    assert unknown_warning([UnknownCount("--src", "v", unk_id=1)]) is None  # no tokens
