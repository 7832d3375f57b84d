"""`python -m attnseq` is the same CLI as `attnseq` (torchrun needs a module to start)."""

from attnseq.cli.app import main

main()
