"""Scoring trained models: the evaluator (validation and test decoding), the metrics, and the
result folders of `attnseq eval`."""
