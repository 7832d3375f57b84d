"""The Python API: `attnseq.load`, `Model` and its results, `plot_alignment`, `attnseq.train`,
`attnseq.compare`, and the checks of their arguments."""
