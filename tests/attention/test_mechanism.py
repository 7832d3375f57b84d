"""What the interface of the attention mechanisms (attnseq/attention/mechanism.py) refuses, shown
on kinds that meet each check: weights from a kernel kind, and from a self-attention kind a mask
other than a key padding mask or other queries than keys."""

import pytest
import torch
from mechanism_inputs import D_MODEL, make

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_kinds_refuse_to_return_weights(name: str) -> None:
    module = make(name)
    assert not module.has_weights
    x = torch.randn(1, 5, D_MODEL)
    with pytest.raises(ValueError, match="has no attention weights"):
        module(x, x, x, need_weights=True)


def test_only_key_padding_masks_and_self_attention() -> None:
    module = make("local")
    x = torch.randn(2, 5, D_MODEL)
    with pytest.raises(ValueError, match="key padding mask"):
        module(x, x, x, torch.ones(2, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="as many queries as keys"):
        module(x[:, :3], x, x)
