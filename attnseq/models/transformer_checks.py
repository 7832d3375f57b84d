"""The transformer's checks of its constructor arguments: sizes that fit together and a known
norm placement, each failure a ValueError that says what would be valid."""

NORMS = ("pre", "post")


def check_options(d_model: int, heads: int, layers: tuple[int, int], norm: str) -> None:
    """Reject inconsistent hyperparameters with a message that says what would be valid.

    `layers` is (enc_layers, dec_layers); the other arguments are the constructor's.
    """
    if heads <= 0 or d_model % heads != 0:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by heads ({heads}); "
            f"e.g. heads in {[h for h in range(1, d_model + 1) if d_model % h == 0][:8]}"
        )
    if min(layers) < 1:
        # weights are stacked per layer, and a decoder needs cross-attention to see the source
        enc_layers, dec_layers = layers
        raise ValueError(
            f"enc_layers and dec_layers must be at least 1, got {enc_layers} and {dec_layers}"
        )
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
