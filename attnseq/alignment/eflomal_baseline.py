"""The statistical baseline of word alignment, eflomal (Östling & Tiedemann 2016, "Efficient
Word Alignment with Markov Chain Monte Carlo", PBML 106): several corpora aligned together in
one run, as unsupervised aligners are used, both directions, cut back into one list per corpus.
"""

import importlib.util
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from attnseq.alignment.word_links import symmetrize
from attnseq.data.word_alignments import Alignment, read_pharaoh, write_pharaoh
from attnseq.errors import UserError

Pairs = Sequence[tuple[str, str]]
DIRECTIONS = ("forward", "reverse")
# An aligner: sentence pairs and a scratch folder -> {"forward": Pharaoh lines, "reverse": ...}
Aligner = Callable[[Pairs, Path], dict[str, list[str]]]


def check_eflomal() -> None:
    """UserError unless the eflomal package can be imported."""
    if importlib.util.find_spec("eflomal") is None:
        raise UserError(
            "the eflomal aligner is not installed: pip install 'attnseq[align]' (or eflomal)"
        )


def run_eflomal(pairs: Pairs, folder: Path) -> dict[str, list[str]]:
    """Forward and reverse Pharaoh lines of `pairs` from one eflomal run (its default settings),
    through files in `folder`, which eflomal writes."""
    import eflomal

    check_eflomal()
    paths = {direction: folder / f"links.{direction}" for direction in DIRECTIONS}
    eflomal.Aligner().align(
        [src for src, _ in pairs],
        [tgt for _, tgt in pairs],
        links_filename_fwd=str(paths["forward"]),
        links_filename_rev=str(paths["reverse"]),
        quiet=True,
    )
    return {d: path.read_text(encoding="utf-8").splitlines() for d, path in paths.items()}


def cut(lines: Sequence[str], sizes: Mapping[str, int]) -> dict[str, list[str]]:
    """Cut the lines of one joint run back into the corpora it was made of, in order."""
    if len(lines) != sum(sizes.values()):
        raise ValueError(f"{len(lines)} lines of links for {sum(sizes.values())} sentence pairs")
    pieces, start = {}, 0
    for name, size in sizes.items():
        pieces[name] = list(lines[start : start + size])
        start += size
    return pieces


def align_corpora(
    corpora: Mapping[str, Pairs], aligner: Aligner = run_eflomal
) -> dict[str, dict[str, list[Alignment]]]:
    """Every corpus aligned in one run: {corpus: {"forward": links, "reverse": links}}, each a
    list of (source word, target word) link sets, one per pair of the corpus, in order."""
    if not any(corpora.values()):
        raise UserError("no sentence pairs to align")
    joint = [pair for pairs in corpora.values() for pair in pairs]
    sizes = {name: len(pairs) for name, pairs in corpora.items()}
    with tempfile.TemporaryDirectory() as scratch:
        links = aligner(joint, Path(scratch))
    per_direction = {direction: cut(links[direction], sizes) for direction in DIRECTIONS}
    return {
        name: {d: read_pharaoh(per_direction[d][name])[0] for d in DIRECTIONS} for name in corpora
    }


def symmetrized(directions: Mapping[str, list[Alignment]], heuristic: str) -> list[Alignment]:
    """The forward and reverse links of one corpus combined pair by pair by `heuristic`."""
    pairs = zip(directions["forward"], directions["reverse"], strict=True)
    return [symmetrize(forward, reverse, heuristic) for forward, reverse in pairs]


def write_alignment_files(
    corpora: Mapping[str, Pairs], out_dir: Path, aligner: Aligner = run_eflomal
) -> list[Path]:
    """Align `corpora` together and write OUT_DIR/NAME.forward, NAME.reverse and NAME.gdfa
    (grow-diag-final-and) per corpus, atomically; returns the files written, in order."""
    written = []
    for name, directions in align_corpora(corpora, aligner).items():
        outputs = {**directions, "gdfa": symmetrized(directions, "grow-diag-final-and")}
        for suffix, links in outputs.items():
            path = out_dir / f"{name}.{suffix}"
            write_pharaoh(path, links)
            written.append(path)
    return written
