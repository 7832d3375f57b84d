"""The configuration reference (attnseq/config/reference.py): each key labelled with the model
family that reads it. That docs/ holds the reference as generated: tests/test_docs.py."""

from attnseq.config.checks import model_key_families
from attnseq.config.reference import FAMILY_LABELS, keys


def test_the_reference_labels_each_key_with_its_family() -> None:
    docs = {doc.key: doc.help for doc in keys()}
    for key, family in ((entry.key, entry.family) for entry in model_key_families()):
        labelled = [label for label in FAMILY_LABELS.values() if docs[key].startswith(label)]
        assert labelled == ([FAMILY_LABELS[family]] if family else []), key
    assert docs["model.hidden"].startswith("(RNN) ")
    assert docs["model.rnn.cell"].startswith("(RNN) ")  # the node's family
    assert docs["model.d_model"].startswith("(transformer) ")
    assert docs["model.dropout"] == "dropout probability, in [0, 1)"
