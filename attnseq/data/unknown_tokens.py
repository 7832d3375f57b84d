"""How much of a text a model cannot read: the share of its tokens that the vocabulary maps to
<unk>, and one warning when it passes `UNKNOWN_WARNING_RATE` (`warn_unknown`)."""

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The share of unknown tokens above which a text is taken for one the model cannot read.
UNKNOWN_WARNING_RATE = 0.5


@dataclass
class UnknownCount:
    """The unknown tokens of one text: `unknown` of `total` token ids were the vocabulary's
    <unk> id (`unk_id`). `text` names the text as the user gave it (a command names its option,
    the API its argument), `vocabulary` the vocabulary that read it ("the model's target
    vocabulary")."""

    text: str
    vocabulary: str
    unk_id: int
    unknown: int = 0
    total: int = 0

    def add(self, ids: Sequence[int]) -> None:
        """Count the ids of one encoded sentence."""
        self.total += len(ids)
        self.unknown += sum(1 for token in ids if token == self.unk_id)

    def add_all(self, sentences: Iterable[Sequence[int]]) -> "UnknownCount":
        """Count the ids of every sentence; returns self."""
        for ids in sentences:
            self.add(ids)
        return self

    @property
    def rate(self) -> float:
        """unknown / total (0 for a text without tokens)."""
        return self.unknown / self.total if self.total else 0.0

    def describe(self) -> str:
        """'94.0% of the tgt tokens (47 of 50) are unknown to the model's target vocabulary'."""
        return (
            f"{self.rate:.1%} of the {self.text} tokens ({self.unknown:,} of {self.total:,}) "
            f"are unknown to {self.vocabulary}"
        )


def unknown_warning(
    counts: Iterable[UnknownCount], threshold: float = UNKNOWN_WARNING_RATE
) -> str | None:
    """One warning line for the texts whose unknown rate is above `threshold`, or None."""
    high = [count for count in counts if count.rate > threshold]
    if not high:
        return None
    return (
        f"warning: {'; '.join(count.describe() for count in high)} (more than {threshold:.0%}"
        "): the results describe <unk>, not the words; is the text in the model's languages, "
        "and is it the right checkpoint?"
    )


def warn_unknown(counts: Iterable[UnknownCount]) -> None:
    """Print `unknown_warning`'s line on stderr, if there is one."""
    message = unknown_warning(counts)
    if message is not None:
        print(message, file=sys.stderr)
