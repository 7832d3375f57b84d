"""Data-parallel training: two gloo processes on CPU, on the generated reverse task.

- Each rank trains on its own shard: disjoint examples, the same number of steps; the loss
  goes down; with the same global batch (the union of the ranks' batches) the losses match a
  single-process run to float tolerance.
- Only rank 0 writes: rank 1 creates nothing, Hydra's files included. Resume (resume=auto)
  continues on every rank from rank 0's checkpoint.

The ranks are separate processes started the way torchrun starts them (RANK, WORLD_SIZE,
MASTER_ADDR, ... in the environment; the CLI test runs torchrun itself), each in its own empty
working directory, so a file written by rank 1 shows up there.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.data.batching import TokenBatchSampler, example_lengths
from attnseq.data.prepare import prepare_data
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training import trainer
from attnseq.training.run import run_training

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# 200 examples, 100 tokens a batch: 18 batches an epoch, 9 per rank; 24 steps cross epochs.
# No dropout: the single-process reference must draw the same (no) random numbers.
TINY = [
    "data.name=reverse",
    "data.tokenizer=word",
    "data.train_size=200",
    "data.max_tokens=100",
    "data.valid_size=10",
    "data.test_size=10",
    "model.dropout=0.0",
    "optim.lr=0.01",
    "trainer.max_steps=24",
    "trainer.validate_every=12",
    "trainer.num_heatmaps=1",
    "trainer.threads=1",
]

# One rank: record every update (the batch's example indices, the loss) and the metrics.
WORKER = """
import json, sys
from pathlib import Path
import torch
sys.path.insert(0, {tests!r})
from helpers import tiny_config
from attnseq.training import trainer
from attnseq.training.run import run_training

torch.set_num_threads(1)
updates = []
update = trainer.Trainer.update

def recorded(self, micro_batches):
    outcome = update(self, micro_batches)
    indices = [i for batch, _ in micro_batches for i in batch.indices.tolist()]
    updates.append([indices, outcome.loss if outcome.applied else None])
    return outcome

trainer.Trainer.update = recorded
run_dir, record = Path(sys.argv[1]), Path(sys.argv[2])
metrics = run_training(tiny_config(*sys.argv[3:]), run_dir)
record.write_text(json.dumps({{"updates": updates, "metrics": metrics}}))
"""


def test_sampler_shards_partition_each_epoch_into_equal_interleaved_shares() -> None:
    lengths = [(3 + i % 7, 2 + i % 5) for i in range(101)]
    whole = TokenBatchSampler(lengths, max_tokens=40, seed=5)
    shards = [TokenBatchSampler(lengths, 40, seed=5, num_replicas=3, rank=r) for r in range(3)]
    assert len(whole) == whole.global_len
    assert all(len(shard) == len(whole) // 3 for shard in shards)
    for epoch in (0, 1, 7):
        batches = whole.batches(epoch)
        parts = [shard.batches(epoch) for shard in shards]
        # step k of the three ranks = batches 3k, 3k+1, 3k+2 of the single-process order
        assert [b for step in zip(*parts, strict=True) for b in step] == batches[
            : 3 * len(parts[0])
        ]
        assert parts == [shard.batches(epoch) for shard in shards]  # a pure function of epoch
    assert shards[0].batches(0) != shards[0].batches(1)  # reshuffled each epoch
    with pytest.raises(ValueError, match="rank"):
        TokenBatchSampler(lengths, 40, num_replicas=2, rank=2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The environment torchrun gives a worker."""
    return {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "OMP_NUM_THREADS": "1",
    }


def run_ranks(tmp_path: Path, overrides: list[str]) -> list[dict]:
    """Two ranks of `run_training`; rank 0 trains into tmp/run, rank 1 is given tmp/run1."""
    port = free_port()
    script = WORKER.format(tests=str(TESTS))
    processes = []
    for rank in range(2):
        cwd = tmp_path / f"cwd{rank}"
        cwd.mkdir()
        run_dir = tmp_path / ("run" if rank == 0 else "run1")
        record = tmp_path / f"record{rank}.json"
        command = [sys.executable, "-c", script, str(run_dir), str(record), *overrides]
        processes.append(
            subprocess.Popen(
                command,
                cwd=cwd,
                env=rank_env(rank, 2, port),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=180)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for rank, (process, output) in enumerate(zip(processes, outputs, strict=True)):
        assert process.returncode == 0, f"rank {rank} failed:\n{output}"
    return [json.loads((tmp_path / f"record{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.slow
def test_shards_are_disjoint_and_losses_match_one_process(tmp_path: Path, monkeypatch) -> None:
    ranks = run_ranks(tmp_path, TINY)
    updates = [record["updates"] for record in ranks]
    assert len(updates[0]) == len(updates[1]) == 24  # the same number of steps on each rank
    assert all(loss is not None for rank in updates for _, loss in rank)

    # In each epoch the two ranks' examples never overlap and none repeats.
    cfg = tiny_config(*TINY)
    train = prepare_data(cfg.data, cfg.seed).examples["train"]
    steps_per_epoch = len(TokenBatchSampler(example_lengths(train), 100, num_replicas=2))
    assert 2 <= steps_per_epoch < 24  # several epochs
    for start in range(0, 24 - steps_per_epoch + 1, steps_per_epoch):
        seen = [
            [i for indices, _ in rank[start : start + steps_per_epoch] for i in indices]
            for rank in updates
        ]
        assert not set(seen[0]) & set(seen[1])
        assert len(set(seen[0] + seen[1])) == len(seen[0]) + len(seen[1])

    # Both ranks report the global loss, so the same numbers; and it goes down.
    losses = [loss for _, loss in updates[0]]
    assert losses == pytest.approx([loss for _, loss in updates[1]], rel=1e-12)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.1

    # Only rank 0 writes: rank 1 was given its own run directory and working directory.
    assert not (tmp_path / "run1").exists()
    assert list((tmp_path / "cwd1").iterdir()) == []
    assert list((tmp_path / "cwd0").iterdir()) == []  # rank 0 writes into its run dir only
    run = tmp_path / "run"
    assert {p.name for p in (run / "checkpoints").iterdir()} == {"best.pt", "last.pt"}
    assert (run / "metrics.json").is_file() and (run / "hyps" / "test.txt").is_file()
    assert ranks[0]["metrics"] == ranks[1]["metrics"]  # every rank returns rank 0's metrics
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 24 and last["progress"]["world_size"] == 2
    assert len(last["rng_ranks"]) == 2

    # One process, each step on the union of the two ranks' batches: the same losses.
    merged = [a + b for (a, _), (b, _) in zip(updates[0], updates[1], strict=True)]

    class UnionBatches:
        def __init__(self, *args, **kwargs) -> None:
            self.global_len = len(merged)

        def __len__(self) -> int:
            return len(merged)

        def batches(self, epoch: int) -> list[list[int]]:
            return merged if epoch == 0 else []

        def epoch_batches(self, epoch: int) -> list[list[int]]:  # what the trainer iterates
            return self.batches(epoch)

        def padding_share(self, epoch: int) -> float:
            return 0.0

    single = []
    update = trainer.Trainer.update

    def recorded(self, micro_batches):
        outcome = update(self, micro_batches)
        single.append(outcome.loss if outcome.applied else None)
        return outcome

    monkeypatch.setattr(trainer, "TokenBatchSampler", UnionBatches)
    monkeypatch.setattr(trainer.Trainer, "update", recorded)
    torch.set_num_threads(1)
    run_training(tiny_config(*TINY), tmp_path / "single")
    assert len(single) == 24
    assert single[:5] == pytest.approx(losses[:5], rel=1e-5, abs=1e-6)
    assert single == pytest.approx(losses, rel=1e-3)


def torchrun(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=2 -m attnseq train ARGS`, each rank started in
    tmp/cwdRANK (so whatever a rank writes relative to its working directory lands there)."""
    script = 'cd "$0/cwd$RANK" && exec "$1" -m attnseq train "${@:2}"'
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--no-python",
        "bash",
        "-c",
        script,
        str(tmp_path),
        sys.executable,
        *args,
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=240, env={**os.environ, "COLUMNS": "200"}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


CLI = [arg for arg in TINY if not arg.startswith("trainer.max_steps=")]
CLI += ["trainer.validate_every=4", "trainer.progress=false"]


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> tuple[Path, Path]:
    """(tmp folder, rank 0's run directory) of a 4-step run through torchrun and the CLI."""
    tmp_path = tmp_path_factory.mktemp("torchrun")
    for rank in range(2):
        (tmp_path / f"cwd{rank}").mkdir()
    torchrun(tmp_path, *CLI, "trainer.max_steps=4")
    (run,) = (tmp_path / "cwd0" / "outputs").glob("*/*")
    return tmp_path, run


@pytest.mark.slow  # a torchrun launch of two ranks
def test_torchrun_cli_only_rank0_writes(torchrun_run) -> None:
    tmp_path, run = torchrun_run
    assert list((tmp_path / "cwd1").iterdir()) == []  # no outputs/, no .hydra, no train.log
    files = {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}
    assert {
        ".hydra/config.yaml",
        "train.log",
        "checkpoints/best.pt",
        "checkpoints/last.pt",
        "metrics.json",
        "hyps/test.txt",
    } <= files
    # events.out.tfevents.TIME.HOST.PID.N: one process wrote TensorBoard events
    assert len({p.name.rsplit(".", 2)[1] for p in (run / "tb").iterdir()}) == 1
    assert "on each of 2 processes" in (run / "train.log").read_text()


@pytest.mark.slow  # two torchrun launches
def test_torchrun_resume_auto_continues_on_every_rank(torchrun_run) -> None:
    tmp_path, run = torchrun_run
    # resume=auto: every rank continues from rank 0's last.pt, in the same run directory.
    resumed = torchrun(tmp_path, *CLI, "trainer.max_steps=6", "resume=auto", f"hydra.run.dir={run}")
    assert list((tmp_path / "cwd1").iterdir()) == []
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 6
    assert "resuming at step 4" in (run / "train.log").read_text(), resumed.stdout
