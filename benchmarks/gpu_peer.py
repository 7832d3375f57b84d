"""The Hugging Face Marian peer of bench/peers (hf_seq2seq.py) on a GPU: training target
tokens/s, peak GPU memory and greedy and beam-5 generation sentences/s, to stand beside
benchmarks/benchmark.py's attnseq figures. Prints one JSON object (progress goes to stderr).

Usage (benchmarks/gpu_check.sh runs it from the copies benchmarks/gpu_prepare.sh makes):

    python3 benchmarks/gpu_peer.py .gpu-data/peer .gpu-data/multi30k OUT_DIR \\
        --budget 20 --precisions fp32,bf16 --sentences 64 --device cuda

PEER_DIR holds hf_seq2seq.py and spm/spm.model (its joint 8,000-piece SentencePiece model);
DATA_DIR holds Multi30k's train and test_2016_flickr files.

The peer's script trains and generates on the CPU. Here its own `train` runs unchanged (data
encoding, MarianMTModel of the transformer benchmark's sizes, collator, Seq2SeqTrainer with its
arguments and budget callback), with two training arguments changed: the device (`use_cpu`) and
the precision (`bf16`/`fp16`). The budget (seconds of wall clock including its data encoding
and model building, as in the peer's runs) starts when `train` is called. Its figures are the
peer's own: target tokens/s after its first 10 steps (`steady_trg_tok_per_s`) and over the
whole run. Generation repeats the peer's `evaluate` call (`model.generate` on batches of 64 test
sentences in file order, at most 100 new tokens, length penalty 1, beam 1 and 5) on the device,
timed between device synchronisations after one untimed batch, over the first N sentences; its
model has trained for seconds only, so `mean_output_tokens` says how long the outputs ran.

Model FLOPs per token use benchmark.py's split estimate (RESULTS.md, "MFU"): 6 x encoder
weights per source token, 6 x decoder weights and the output projection (counted although it
shares the embedding) per target token; embedding look-ups and sinusoidal positions are free.
"""

import argparse
import contextlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

BATCH_SENTENCES = 114  # the peer runs' sentences per step (RESULTS.md, "Batches")
GENERATE_BATCH = 64


def load_peer(peer_dir: Path) -> ModuleType:
    """hf_seq2seq.py imported from `peer_dir` (its transformers import comes with it)."""
    spec = importlib.util.spec_from_file_location("hf_seq2seq", peer_dir / "hf_seq2seq.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(peer_dir / "hf_seq2seq.py")
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    return peer


def flops_per_token(model: nn.Module) -> dict[str, int]:
    """6 x the weights a source token and a target token go through (split estimate)."""
    owners = {
        f"{name}.{param_name}" if name else param_name: module
        for name, module in model.named_modules(remove_duplicate=False)
        for param_name, _ in module.named_parameters(recurse=False, remove_duplicate=False)
    }
    split = {"encoder": 0, "decoder": 0}
    for name, param in model.named_parameters(remove_duplicate=False):
        if isinstance(owners[name], nn.Embedding):  # look-ups, sinusoidal positions included
            continue
        split["encoder" if ".encoder." in f".{name}" else "decoder"] += param.numel()
    return {"src": 6 * split["encoder"], "tgt": 6 * split["decoder"]}


def on_device(peer: ModuleType, device: torch.device, precision: str) -> None:
    """The peer's Seq2SeqTrainingArguments with the device and precision changed."""
    arguments = peer.Seq2SeqTrainingArguments

    def changed(**kwargs: Any) -> Any:
        kwargs.update(
            use_cpu=device.type == "cpu", bf16=precision == "bf16", fp16=precision == "fp16"
        )
        return arguments(**kwargs)

    peer.Seq2SeqTrainingArguments = changed


def train(
    peer: ModuleType, data: Path, spm: Path, out: Path, budget: float, precision: str, device
) -> dict[str, Any]:
    """One budgeted training run of the peer; its own figures, peak memory and FLOPs."""
    on_device(peer, device, precision)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    args = argparse.Namespace(
        data=str(data), spm=str(spm), out=str(out), budget=budget, batch_size=BATCH_SENTENCES
    )
    out.mkdir(parents=True, exist_ok=True)
    peer.START = time.time()  # the peer's budget counts from its start
    with contextlib.redirect_stdout(sys.stderr):  # its progress lines
        peer.train(args)
    stats = json.loads((out / "train_stats.json").read_text())
    steady_both, steady_tgt = stats["steady_src_trg_tok_per_s"], stats["steady_trg_tok_per_s"]
    flops = flops_per_token(peer.build_model())
    result = {
        "precision": precision,
        "steps": stats["steps"],
        "train_seconds": round(stats["train_wall_s"], 2),
        "batch_sentences": stats["batch_size_sentences"],
        "tgt_tokens_per_sec": round(stats["trg_tok_per_s"], 1),
        "steady_tgt_tokens_per_sec": None if steady_tgt is None else round(steady_tgt, 1),
        "steady_src_tokens_per_sec": None
        if steady_both is None
        else round(steady_both - steady_tgt, 1),
        "flops_per_src_token": flops["src"],
        "flops_per_tgt_token": flops["tgt"],
        "parameters": stats["params"],
        "final_loss": stats["final_loss"],
    }
    if steady_tgt is not None:
        model_flops = flops["src"] * result["steady_src_tokens_per_sec"] + flops["tgt"] * steady_tgt
        result["model_gflops_per_sec"] = round(model_flops / 1e9, 2)
    if device.type == "cuda":
        result["cuda_max_allocated_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return result


def generate(
    peer: ModuleType, data: Path, spm_dir: Path, model_dir: Path, sentences: int, device
) -> list[dict[str, Any]]:
    """Sentences/s of the peer's greedy and beam-5 generate calls on the device."""
    import sacrebleu
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(spm_dir / "spm.model"))
    sources = peer.read(str(data / "test_2016_flickr.de"))[:sentences]
    references = peer.read(str(data / "test_2016_flickr.en"))[:sentences]
    ids = peer.encode(spm, sources)
    model = peer.MarianMTModel.from_pretrained(str(model_dir)).to(device).eval()
    batches = []
    for start in range(0, len(ids), GENERATE_BATCH):
        chunk = ids[start : start + GENERATE_BATCH]
        width = max(len(x) for x in chunk)
        x = torch.full((len(chunk), width), peer.PAD, dtype=torch.long)
        mask = torch.zeros_like(x)
        for row, source in enumerate(chunk):
            x[row, : len(source)] = torch.tensor(source)
            mask[row, : len(source)] = 1
        batches.append((x.to(device), mask.to(device)))
    rows = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for search, beams in (("greedy", 1), ("beam5", 5)):

        def run(x: torch.Tensor, mask: torch.Tensor, beams: int = beams) -> torch.Tensor:
            return model.generate(
                input_ids=x, attention_mask=mask, num_beams=beams,
                max_new_tokens=peer.MAX_LEN, do_sample=False, length_penalty=1.0,
                early_stopping=True, decoder_start_token_id=peer.BOS,
                eos_token_id=peer.EOS, pad_token_id=peer.PAD,
            )  # fmt: skip

        with torch.inference_mode():
            run(*batches[0])  # warm-up: kernels chosen, caches allocated
            _sync(device)
            start = time.perf_counter()
            outputs = [run(x, mask) for x, mask in batches]
            _sync(device)
        seconds = time.perf_counter() - start
        hypotheses, output_tokens = [], 0
        for out in outputs:
            for row in out.tolist():
                tokens = [t for t in row if t > peer.EOS]
                output_tokens += len(tokens) + 1
                hypotheses.append(spm.decode(tokens))
        rows.append(
            {
                "search": search,
                "batch_size": GENERATE_BATCH,
                "sentences": len(sources),
                "seconds": round(seconds, 3),
                "sentences_per_sec": round(len(sources) / seconds, 2),
                "mean_output_tokens": round(output_tokens / len(sources), 2),
                "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2),
            }
        )
        print(f"  generate {search}: {rows[-1]['sentences_per_sec']} sent/s", file=sys.stderr)
    if device.type == "cuda":
        memory = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        for row in rows:
            row["cuda_max_allocated_mib"] = memory
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("peer_dir", type=Path, help="hf_seq2seq.py and spm/spm.model")
    parser.add_argument("data_dir", type=Path, help="Multi30k train and test_2016_flickr files")
    parser.add_argument("out_dir", type=Path, help="the peer's models and statistics")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per training run")
    parser.add_argument("--precisions", default="fp32", help="comma-separated: fp32,bf16,fp16")
    parser.add_argument("--sentences", type=int, default=64, help="test sentences generated")
    parser.add_argument("--device", default="cuda", help="a torch device")
    args = parser.parse_args(argv)
    precisions = args.precisions.split(",")
    if not set(precisions) <= {"fp32", "bf16", "fp16"} or args.sentences < 1:
        parser.error("--precisions takes fp32, bf16 and fp16; --sentences must be >= 1")
    for needed in (args.peer_dir / "hf_seq2seq.py", args.data_dir / "train.de"):
        if not needed.is_file():
            parser.error(f"{needed} not found (benchmarks/gpu_prepare.sh makes it)")
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    peer = load_peer(args.peer_dir)
    spm = args.peer_dir / "spm"
    report: dict[str, Any] = {
        "peer": "HF MarianMTModel (bench/peers/hf_seq2seq.py)",
        "transformers": peer.transformers.__version__,
        "device": str(device),
        "train": [],
    }
    for precision in precisions:
        print(f"peer: training {precision} for {args.budget:g} s", file=sys.stderr)
        out = args.out_dir / precision
        report["train"].append(train(peer, args.data_dir, spm, out, args.budget, precision, device))
    print("peer: generating", file=sys.stderr)
    model_dir = args.out_dir / precisions[0] / "model"  # weights are float32 in every run
    report["generate"] = generate(peer, args.data_dir, spm, model_dir, args.sentences, device)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
