"""Word alignments of a training config's sentence pairs with eflomal (Östling & Tiedemann 2016,
"Efficient Word Alignment with Markov Chain Monte Carlo", PBML 106), as Pharaoh files that
`data.alignments` reads for guided alignment training, and as the statistical baseline to score
attention alignments against.

Usage (from the repository root; needs the optional extra: pip install -e '.[align]'):

    .venv/bin/python scripts/make_alignments.py alignments/tatoeba data=tatoeba_en_fr
    .venv/bin/python scripts/make_alignments.py alignments/tatoeba data=tatoeba_en_fr \\
        --extra wpt03 wpt03_enfr/test.en wpt03_enfr/test.fr
    attnseq train data=tatoeba_en_fr model=transformer optim.alignment_lambda=0.05 \\
        +data.alignments.train=$PWD/alignments/tatoeba/train.gdfa

The positional arguments after OUT_DIR are `attnseq train` overrides: the script loads every
split exactly as training does (held-out valid/test taken out of train, data.max_examples), so
line N of SPLIT.* belongs to pair N of that split. Unsupervised aligners learn from all the text
they are given, so the splits (and any --extra corpus: NAME SRC_FILE TGT_FILE, one sentence a
line, e.g. a gold-aligned test set) are aligned together in one eflomal run, as such aligners are
used; the output is cut back into one file set per split or corpus:

    SPLIT.forward   source -> target links (eflomal's forward direction)
    SPLIT.reverse   target -> source links, written source first like the forward file
    SPLIT.gdfa      the two symmetrized with grow-diag-final-and (Koehn et al. 2003), the
                    usual choice for supervision (attnseq/alignment/word_links.py)

Links are ``i-j``, 0-based over the whitespace-separated words of each text (the words the
piece rule of attnseq/data/guided_alignment.py maps onto subword pieces). eflomal lowercases
words itself; an empty text gets an empty line.
"""

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmark.py's `compose`

log = logging.getLogger("attnseq")

Pairs = list[tuple[str, str]]
DIRECTIONS = ("forward", "reverse")


def cut(lines: Sequence[str], sizes: dict[str, int]) -> dict[str, list[str]]:
    """Cut the lines of one joint run back into the corpora it was made of, in order."""
    if len(lines) != sum(sizes.values()):
        raise ValueError(f"{len(lines)} lines of links for {sum(sizes.values())} sentence pairs")
    pieces, start = {}, 0
    for name, size in sizes.items():
        pieces[name] = list(lines[start : start + size])
        start += size
    return pieces


def grow_diag_final_and(forward: Sequence[str], reverse: Sequence[str]) -> list[str]:
    """The grow-diag-final-and symmetrization of two Pharaoh files' lines (both source first)."""
    from attnseq.alignment.word_links import symmetrize
    from attnseq.data.word_alignments import format_pharaoh, read_pharaoh

    fwd, rev = read_pharaoh(forward)[0], read_pharaoh(reverse)[0]
    pairs = zip(fwd, rev, strict=True)
    return [format_pharaoh(symmetrize(f, r, "grow-diag-final-and")) for f, r in pairs]


def run_eflomal(pairs: Pairs, folder: Path) -> dict[str, list[str]]:
    """Forward and reverse link lines of `pairs` from one eflomal run (default settings)."""
    import eflomal

    paths = {direction: folder / f"links.{direction}" for direction in DIRECTIONS}
    eflomal.Aligner().align(
        [src for src, _ in pairs],
        [tgt for _, tgt in pairs],
        links_filename_fwd=str(paths["forward"]),
        links_filename_rev=str(paths["reverse"]),
        quiet=True,
    )
    return {d: path.read_text(encoding="utf-8").splitlines() for d, path in paths.items()}


def align_corpora(corpora: dict[str, Pairs], out_dir: Path, *, aligner=run_eflomal) -> list[Path]:
    """Align every corpus in one run and write NAME.forward, NAME.reverse and NAME.gdfa.

    Args:
        corpora: {name: (source text, target text) pairs}; names become file names.
        aligner: pairs, a scratch folder -> {"forward": lines, "reverse": lines}.

    Returns:
        the files written, in order.
    """
    from attnseq.io.atomic import atomic_write_lines

    joint = [pair for pairs in corpora.values() for pair in pairs]
    sizes = {name: len(pairs) for name, pairs in corpora.items()}
    with tempfile.TemporaryDirectory() as scratch:
        links = aligner(joint, Path(scratch))
    per_corpus = {direction: cut(links[direction], sizes) for direction in DIRECTIONS}
    written = []
    for name in corpora:
        forward, reverse = per_corpus["forward"][name], per_corpus["reverse"][name]
        gdfa = grow_diag_final_and(forward, reverse)
        outputs = {"forward": forward, "reverse": reverse, "gdfa": gdfa}
        for suffix, lines in outputs.items():
            path = out_dir / f"{name}.{suffix}"
            atomic_write_lines(path, lines)
            written.append(path)
    return written


def read_extra(name: str, src_file: str, tgt_file: str) -> Pairs:
    """An --extra corpus: two parallel text files, one sentence a line."""
    from attnseq.errors import UserError

    src = Path(src_file).read_text(encoding="utf-8").splitlines()
    tgt = Path(tgt_file).read_text(encoding="utf-8").splitlines()
    if len(src) != len(tgt):
        raise UserError(f"--extra {name}: {len(src)} source lines but {len(tgt)} target lines")
    return [(s.strip(), t.strip()) for s, t in zip(src, tgt, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path, help="folder for SPLIT.forward/.reverse/.gdfa")
    parser.add_argument("overrides", nargs="*", help="attnseq train overrides (data=...)")
    parser.add_argument(
        "--extra",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "SRC_FILE", "TGT_FILE"),
        help="another parallel corpus to align with the splits (e.g. a gold-aligned test set)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from benchmark import compose

    from attnseq.data.sources import load_splits
    from attnseq.errors import UserError

    try:
        cfg = compose(list(args.overrides), threads=1)
        corpora = dict(load_splits(cfg.data, cfg.seed))
        for name, src_file, tgt_file in args.extra:
            corpora[name] = read_extra(name, src_file, tgt_file)
    except (UserError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    total = sum(len(pairs) for pairs in corpora.values())
    log.info("aligning %d sentence pairs (%s) with eflomal", total, ", ".join(corpora))
    for path in align_corpora(corpora, args.out_dir):
        print(path)
    print(f"train with: +data.alignments.train={(args.out_dir / 'train.gdfa').resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
