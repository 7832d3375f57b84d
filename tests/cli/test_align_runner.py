"""What `attnseq align` runs (attnseq/cli/align_runner.py): its request checked before any file
is read. The links, soft matrices and gold scores it writes: tests/cli/test_align_command.py;
the eflomal path: tests/alignment/test_eflomal_baseline.py."""

import re
from pathlib import Path

import pytest

from attnseq.alignment.forced import AlignmentMethod
from attnseq.cli.align_runner import AlignRequest, check_request
from attnseq.errors import UserError

MISSING = Path("no-such-folder")  # nothing is read: each file may be missing


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"checkpoint": None}, "give a CHECKPOINT to align with, or --method eflomal"),
        ({"symmetrization": "intersect"}, "--symmetrize needs --reverse CHECKPOINT"),
        ({"reverse": MISSING, "symmetrization": "union-ish"}, "--symmetrize must be one of"),
        ({"gold_possible": MISSING}, "--gold-possible goes with --gold FILE"),
        ({"gold": MISSING, "gold_format": "csv"}, "--gold-format must be one of"),
        ({"gold": MISSING, "gold_order": "tgt-first"}, "--gold-order must be one of"),
        ({"batch_size": 0}, "--batch-size must be at least 1 (sentence pairs), got 0"),
        ({"method": AlignmentMethod("eflomal", layer=1)}, "leave out CHECKPOINT, --layer"),
    ],
)
def test_a_request_that_cannot_work_is_refused_before_any_file_is_read(
    changes: dict, message: str
) -> None:
    request = AlignRequest(MISSING / "model.pt", MISSING / "a.src", MISSING / "a.tgt")
    check_request(request)  # the files are read later, by run_align
    for name, value in changes.items():
        setattr(request, name, value)
    with pytest.raises(UserError, match=re.escape(message)):
        check_request(request)
