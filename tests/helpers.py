"""Small builders shared by tests: a tiny config and tiny models."""

from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig


def tiny_config(*overrides: str) -> TrainConfig:
    """A config that trains in seconds: small splits, small model, few steps."""
    base = config_to_dict(TrainConfig())
    defaults = [
        "data.train_size=300",
        "data.valid_size=20",
        "data.test_size=20",
        "model.emb_dim=16",
        "model.hidden=32",
        "model.d_model=32",
        "model.heads=2",
        "model.enc_layers=1",
        "model.dec_layers=1",
        "model.ff_dim=64",
        "trainer.max_steps=6",
        "trainer.validate_every=3",
        "trainer.log_every=2",
        "trainer.progress=false",
        "trainer.num_heatmaps=2",
        "trainer.device=cpu",
    ]
    return config_from_dict(base, defaults + list(overrides))


def untrained_checkpoint(path, *overrides: str, pairs=None):
    """Save an untrained model of `tiny_config(*overrides)` as a checkpoint at `path` (config,
    tokenizers, weights: what eval, translate and visualize-alignment read). Tokenizers are
    trained on `pairs` when given, else on the config's training split. Returns the path."""
    import torch

    from attnseq.data.prepare import prepare_data, train_tokenizers
    from attnseq.io.checkpoint import save_checkpoint
    from attnseq.models.loading import model_for

    cfg = tiny_config(*overrides)
    torch.manual_seed(cfg.seed)
    if pairs is None:
        tokenizers = prepare_data(cfg.data, cfg.seed, splits=["train"]).tokenizers
    else:
        tokenizers = train_tokenizers(cfg.data, pairs)
    model = model_for(cfg, tokenizers)
    payload = {
        "config": config_to_dict(cfg),
        "tokenizers": tokenizers.state(),
        "model": model.state_dict(),
    }
    save_checkpoint(path, payload)
    return path


def eval_result(out):
    """The one result folder `attnseq eval --out OUT` wrote under OUT (the folder holding
    metrics.json: OUT/CHECKPOINT/SPLIT.DECODING/)."""
    from pathlib import Path

    folders = [path.parent for path in Path(out).rglob("metrics.json")]
    assert len(folders) == 1, folders
    return folders[0]
