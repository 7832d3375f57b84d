"""The training runtime: a run's checks and composition root, the trainer and its seams, and
what a run needs around them (docs/internals/training.md)."""
