"""The memory a request needs, estimated before any work: a size the device's memory cannot
hold is one UserError naming the request, and the estimate is measured against the memory there
is."""

from collections.abc import Callable
from typing import Any

import pytest

import attnseq
from attnseq.api.model import Model
from attnseq.config import resources

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCE = "June 5, 2001"


@pytest.mark.parametrize(
    "call",
    [
        lambda model: model.translate(SOURCE, beam=10**9),
        lambda model: model.translate(SOURCE, sample=True, num_samples=10**9),
        lambda model: model.explain(SOURCE, beam=10**6),
    ],
    ids=["beam", "samples", "explain-beam"],
)
def test_absurd_sizes_are_refused_by_the_memory_estimate_before_any_work(
    call: Callable[[Model], Any], guarded_rnn: Model
) -> None:
    with pytest.raises(attnseq.UserError, match=r"needs at least .*, more than the .* here"):
        call(guarded_rnn)


def test_sizes_are_measured_against_the_memory_there_is(
    models: dict[str, Model], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = models["rnn"]
    assert model.translate(SOURCE, beam=4, nbest=2).hypotheses  # fits
    # 4 KiB free: room for the text of a few short lines, not for the model's states over them
    monkeypatch.setattr(resources, "available_ram", lambda: 4096)
    with pytest.raises(attnseq.UserError, match="beam=4 and batch_size=64 needs at least"):
        model.translate(SOURCE, beam=4)
    with pytest.raises(attnseq.UserError, match="tokenizing 10,000 characters of lines"):
        model.translate("a" * 10_000)
    with pytest.raises(attnseq.UserError, match="scoring 3 pair"):
        model.score([SOURCE] * 3, ["2001-06-05"] * 3)
    with pytest.raises(
        attnseq.UserError, match="max_output_extra=1000000 let outputs of a .*-piece source reach"
    ):
        model.translate(SOURCE, max_output_extra=10**6)


# a line whose pieces the Marian stand-in's vocabulary holds (tests/marian_stand_ins.py leaves
# some out)
SENTENCE = "Ein Mann fährt mit dem Fahrrad."


@pytest.mark.slow
def test_a_beam_over_an_imported_models_vocabulary_is_counted_per_step(
    marian_folders: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An imported Marian model (the Hugging Face folder itself): free memory for two of a
    step's (beam, V) score buffers is refused before the search, in one line naming the beam;
    four times the `SEARCH_VOCAB_COPIES` buffers a step holds is enough."""
    model = attnseq.load(marian_folders["shared"], "cpu")
    vocab, beam = model.trained.tokenizers.tgt.vocab_size, 64
    buffer = beam * vocab * resources.BYTES_PER_FLOAT  # one (beam, V) float tensor
    monkeypatch.setattr(resources, "available_ram", lambda: 2 * buffer)
    with pytest.raises(attnseq.UserError) as refusal:
        model.translate(SENTENCE, beam=beam, max_output_extra=3)
    assert "\n" not in str(refusal.value) and f"beam={beam} and batch_size" in str(refusal.value)
    monkeypatch.setattr(
        resources, "available_ram", lambda: 4 * resources.SEARCH_VOCAB_COPIES * buffer
    )
    assert model.translate(SENTENCE, beam=beam, max_output_extra=3).hypotheses
