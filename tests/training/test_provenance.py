"""Where a run comes from (attnseq/training/provenance.py): a folder outside any git repository has
no commit. A run's log header and trackers with it: tests/training/test_train_log.py and
tests/training/test_trackers.py."""

from pathlib import Path


def test_git_description_outside_a_repository(tmp_path: Path) -> None:
    from attnseq.training.provenance import git_description

    assert git_description(tmp_path) == "no git commit"
