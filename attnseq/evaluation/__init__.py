"""Scoring trained models: the metrics, the evaluator, `attnseq eval` and its result folders,
paired significance tests, length buckets and word accuracy."""
