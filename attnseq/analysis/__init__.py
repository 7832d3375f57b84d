"""Looking into attention: alignment error rate and gold sets, saved attention, figures,
`visualize-alignment` and sweep reports."""
