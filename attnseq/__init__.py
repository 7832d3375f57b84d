"""attnseq: sequence-to-sequence experiments with attention."""

__version__ = "0.1.0"
