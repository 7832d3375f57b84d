"""Gradient accumulation (optim.accumulate) and the weights' moving average (optim.ema_decay).

- N micro-batches make the update of one batch holding them: the same loss, token counts and
  gradients to float tolerance (no dropout); DDP all-reduces on the last micro-batch only.
- The moving average (its formula: tests/training/test_ema.py) is what validation and the
  checkpoints' `model` hold, and a resumed run continues it exactly.
"""

import math
from pathlib import Path

import pytest
import torch
from helpers import tiny_config, tiny_model

from attnseq.config.schema import OptimConfig
from attnseq.data.batching import TokenBatchSampler, collate, example_lengths
from attnseq.data.loader import TokenCounts
from attnseq.data.prepare import prepare_data
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.averaging import average_checkpoints
from attnseq.training.distributed import WorldInfo
from attnseq.training.optim import build_optimizer
from attnseq.training.precision import MixedPrecision
from attnseq.training.run import run_training
from attnseq.training.train_step import UpdateParts, train_step

PAD, BOS, EOS = 0, 2, 3
EXAMPLES = [
    ([4, 5, 6, 7, 8], [8, 7, 6, 5, 4]),
    ([9, 10], [10, 9]),
    ([5, 11, 4], [4, 11, 5, 6]),
    ([7, 8, 9, 10, 11, 4], [6]),
]


def batch_of(indices: list[int]):
    examples = [EXAMPLES[i] for i in indices]
    batch = collate(examples, indices, pad_id=PAD, bos_id=BOS, eos_id=EOS)
    counts = TokenCounts(
        src=sum(len(src) for src, _ in examples),
        tgt=sum(len(tgt) + 1 for _, tgt in examples),  # EOS is a target position
        padded=batch.src.numel() + batch.tgt_in.numel(),
    )
    return batch, counts


def parts_for(module: torch.nn.Module, model: torch.nn.Module) -> UpdateParts:
    optim = OptimConfig(lr=1e-2)
    precision = MixedPrecision("fp32", torch.device("cpu"))
    return UpdateParts(module, model, build_optimizer(model, optim), precision, optim, WorldInfo())


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_micro_batches_make_the_update_of_their_union(family: str) -> None:
    whole_model, split_model = tiny_model(family), tiny_model(family)
    whole = train_step(parts_for(whole_model, whole_model), [batch_of([0, 1, 2, 3])], step=0)
    micro = [batch_of([0, 1]), batch_of([2]), batch_of([3])]  # different paddings
    split = train_step(parts_for(split_model, split_model), micro, step=0)
    assert split.applied and whole.applied
    assert split.loss == pytest.approx(whole.loss, rel=1e-5)
    assert split.grad_norm == pytest.approx(whole.grad_norm, rel=1e-4)
    assert split.tokens[:2] == whole.tokens[:2] == (16.0, 16.0)
    expected = gradients(whole_model)
    assert expected.keys() == gradients(split_model).keys()
    for name, grad in gradients(split_model).items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_non_finite_loss_in_one_micro_batch_skips_the_whole_update() -> None:
    model = tiny_model("transformer")
    with torch.no_grad():
        model.output_proj.weight[0, 0] = math.nan
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    parts = parts_for(model, model)
    outcome = train_step(parts, [batch_of([0]), batch_of([1])], step=0)
    assert not outcome.applied and outcome.problem.startswith("loss nan")
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[name], equal_nan=True, msg=name)
    # the skip happens on the device: Adam's moments and step count stay untouched too
    for state in parts.optimizer.state.values():
        assert state["step"].item() == 0 and not state["exp_avg"].any()


def test_ddp_all_reduces_on_the_last_micro_batch_only(tmp_path: Path) -> None:
    """One gloo process: DDP's communication hook runs once per bucket per synchronised
    backward pass, so three micro-batches call it as often as one batch does."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        calls = []

        def counting_hook(state, bucket):
            calls.append(bucket.index())
            future = torch.futures.Future()
            future.set_result(bucket.buffer())
            return future

        counts = []
        for micro in ([batch_of([0, 1, 2, 3])], [batch_of([0, 1]), batch_of([2]), batch_of([3])]):
            model = tiny_model("transformer")
            module = DistributedDataParallel(model)
            module.register_comm_hook(None, counting_hook)
            calls.clear()
            parts = parts_for(module, model)
            parts.world = WorldInfo(rank=0, world_size=1, local_rank=0)
            assert train_step(parts, micro, step=0).applied
            counts.append(len(calls))
        assert counts[0] >= 1 and counts[1] == counts[0]
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------- checked options


def test_ema_and_accumulate_are_checked_options() -> None:
    for bad in ("optim.ema_decay=1.0", "optim.ema_decay=-0.1", "optim.accumulate=0"):
        with pytest.raises(UserError):
            tiny_config(bad)


# ------------------------------------------------------------------- training runs
RUN = [
    "data.train_size=120",
    "data.max_tokens=60",
    "data.valid_size=8",
    "data.test_size=8",
    "model.dropout=0.3",  # a wrongly restored RNG changes the weights
    "optim.accumulate=3",
    "optim.ema_decay=0.8",
    "trainer.max_steps=6",
    "trainer.validate_every=3",
    "trainer.num_heatmaps=0",
    "trainer.threads=1",
]


@pytest.mark.slow
def test_a_resumed_run_with_both_continues_exactly(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    run_training(tiny_config(*RUN), straight)
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    run_training(tiny_config(*RUN, "trainer.max_steps=3"), first)
    run_training(
        tiny_config(*RUN, f"resume={first / 'checkpoints' / 'last.pt'}"),
        resumed,
    )
    a = load_checkpoint(straight / "checkpoints" / "last.pt")
    b = load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert a["progress"]["step"] == b["progress"]["step"] == 6
    assert a["ema"] == b["ema"] == {"decay": 0.8, "updates": 6}
    for key in ("model", "training_model"):
        assert a[key].keys() == b[key].keys()
        for name, value in a[key].items():
            torch.testing.assert_close(b[key][name], value, rtol=0, atol=0, msg=f"{key} {name}")
    # the saved model is the average, not the training weights
    assert any(not torch.equal(a["model"][n], v) for n, v in a["training_model"].items())


@pytest.mark.slow
def test_validation_and_best_pt_use_the_average(tmp_path: Path, monkeypatch) -> None:
    from attnseq.evaluation.evaluator import Evaluator

    seen: list[torch.Tensor] = []
    evaluate = Evaluator.evaluate

    def recording(self, model):
        seen.append(next(iter(model.state_dict().values())).clone())
        return evaluate(self, model)

    monkeypatch.setattr(Evaluator, "evaluate", recording)
    run = tmp_path / "run"
    run_training(tiny_config(*RUN, "trainer.max_steps=3"), run)
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    first_name = next(iter(last["model"]))
    torch.testing.assert_close(seen[0], last["model"][first_name])  # validated at step 3
    averaged = average_checkpoints([run / "checkpoints" / "last.pt"])
    assert "training_model" not in averaged and "ema" not in averaged


def batches_per_epoch(*overrides: str) -> int:
    cfg = tiny_config(*overrides)
    train = prepare_data(cfg.data, cfg.seed).examples["train"]
    return len(TokenBatchSampler(example_lengths(train), cfg.data.max_tokens))


@pytest.mark.slow
def test_accumulation_counts_updates_not_batches(tmp_path: Path, caplog) -> None:
    per_epoch = batches_per_epoch(*RUN)
    assert per_epoch > 12
    run = tmp_path / "run"
    with caplog.at_level("INFO", logger="attnseq"):
        run_training(tiny_config(*RUN, "optim.ema_decay=0", "trainer.max_steps=4"), run)
    assert f"{per_epoch} batches per epoch, 3 per update" in caplog.text
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 4
    assert (last["progress"]["epoch"], last["progress"]["batch_in_epoch"]) == (0, 12)
    assert "training_model" not in last and "ema" not in last
