"""Word alignments of a training config's sentence pairs with eflomal (Östling & Tiedemann 2016,
"Efficient Word Alignment with Markov Chain Monte Carlo", PBML 106;
attnseq/alignment/eflomal_baseline.py), as Pharaoh files that `data.alignments` reads for guided
alignment training, and as the statistical baseline to score attention alignments against.
For pairs in two text files, `attnseq align --method eflomal --src F --tgt F` does the same.

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
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnseq.config.schema import TrainConfig

log = logging.getLogger("attnseq")

Pairs = list[tuple[str, str]]


def read_extra(name: str, src_file: str, tgt_file: str) -> Pairs:
    """An --extra corpus: two parallel text files, one sentence a line."""
    from attnseq.errors import UserError

    src = Path(src_file).read_text(encoding="utf-8").splitlines()
    tgt = Path(tgt_file).read_text(encoding="utf-8").splitlines()
    if len(src) != len(tgt):
        raise UserError(f"--extra {name}: {len(src)} source lines but {len(tgt)} target lines")
    return [(s.strip(), t.strip()) for s, t in zip(src, tgt, strict=True)]


def config(overrides: list[str]) -> "TrainConfig":
    """The validated config that `attnseq train OVERRIDES` would train with."""
    from attnseq.config.checks import validate
    from attnseq.config.composition import compose, rewrite_config_selector, typed_config

    cfg = typed_config(compose(rewrite_config_selector(overrides)))
    validate(cfg)
    return cfg


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
    from attnseq.alignment.eflomal_baseline import write_alignment_files
    from attnseq.data.sources import load_splits
    from attnseq.errors import UserError

    try:
        cfg = config(list(args.overrides))
        corpora = dict(load_splits(cfg.data, cfg.seed))
        for name, src_file, tgt_file in args.extra:
            corpora[name] = read_extra(name, src_file, tgt_file)
    except (UserError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    total = sum(len(pairs) for pairs in corpora.values())
    log.info("aligning %d sentence pairs (%s) with eflomal", total, ", ".join(corpora))
    for path in write_alignment_files(corpora, args.out_dir):
        print(path)
    print(f"train with: +data.alignments.train={(args.out_dir / 'train.gdfa').resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
