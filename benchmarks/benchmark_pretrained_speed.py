"""Speed at pretrained size: random-weight Hugging Face models of opus-mt-base's and bart-base's
shapes, read by attnseq as any model folder, decoded and trained by attnseq, by `transformers`
and (decoding) by CTranslate2, on Multi30k, in one thread count. Writes a JSON report and the
markdown page docs/results/pretrained_speed.md.

Usage (from the repository root, on an idle machine):

    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/benchmark_pretrained_speed.py

    # one shape, a shorter run, the profile of attnseq's decoding and update beside transformers'
    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/benchmark_pretrained_speed.py \\
        --models opus-mt-base --sentences 64 --repeats 1 --threads 1 --profile

    # seconds, for the tests: tiny shapes, a few sentences and updates
    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/benchmark_pretrained_speed.py \\
        --quick --out-dir /tmp/speed

What is measured (docs/results/pretrained_speed.md has the definitions beside the figures):

* The models: `MarianMTModel` (d 512, 6+6 layers, 8 heads, ff 2048, 58,101 tokens, swish,
  sinusoidal positions, scaled and shared embeddings) and `BartForConditionalGeneration`
  (d 768, 6+6, 12 heads, ff 3072, 50,265 tokens, gelu, learned positions) with transformers'
  own random initialisation, saved with a tokenizer of that vocabulary size (sentencepiece or
  byte-level BPE trained on Multi30k, the rest of the vocabulary filler entries the tokenizer
  never produces). attnseq reads the folder (`attnseq.load`); CTranslate2 reads it converted
  by its own `TransformersConverter`.
* Decoding: --sentences Multi30k test2016 sources, sorted by length and cut into batches of
  --batch-size, the same token ids for every system (tokenization is not timed); greedy and
  beam 4; every output exactly --new-tokens tokens long (EOS forbidden before, the search
  stopped at it: `min_length = max_length`), so that every system does the same work.
  attnseq: its beam search (`attnseq.decoding.decode`) and its greedy search
  (`token_by_token` with the most probable token: `decode` itself takes a beam of one for
  greedy with a min_length) of the imported model; transformers: `generate`
  (no_repeat_ngram_size 0, no forced EOS); CTranslate2: `translate_batch` with
  min_decoding_length = max_decoding_length, float32 and int8. Target tokens/s: output tokens
  over seconds; each figure the median of --repeats timed passes after one warm-up batch.
* Training: teacher-forced updates on the same Multi30k batches of --max-tokens padded
  tokens (attnseq's token-budget batching, collated once before timing), AdamW with the same
  learning rate, no weight decay, gradients clipped at norm 1. attnseq: `Trainer.update`
  (train_step: forward, loss, backward, clipping, fused AdamW step, schedule); transformers:
  `model(input_ids, attention_mask, decoder_input_ids, labels).loss`, backward,
  `clip_grad_norm_`, `torch.optim.AdamW`. Target tokens/s counts real target positions
  (tokens + EOS); each figure the median of --repeats rounds of --steps updates after
  --warmup. Each system trains in a process of its own, so its peak RSS is its own.
* --profile: torch.profiler over greedy and beam decoding of the first PROFILED_BATCHES
  batches and over --steps updates, attnseq and transformers, the operators with the most
  self CPU time.

Options: --models opus-mt-base,bart-base, --sentences N (500), --batch-size B (32), --beam K
(4), --new-tokens N (24), --max-tokens N (4096), --steps N (5), --warmup N (2), --repeats N
(3), --threads N (2: torch's intra-op threads and CTranslate2's intra_threads), --train-pairs
N (Multi30k training pairs batched, 6000), --data DIR ($ATTNSEQ_DATA), --work-dir DIR (where
the model folders are built and kept for the next run; default a temporary folder), --out-dir
DIR (docs/results), --no-ctranslate2 (decode without it).
"""

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # profile_training.py, next to this

from profile_training import top_operators  # noqa: E402

from attnseq.errors import UserError  # noqa: E402

PAGE = "pretrained_speed"
SYSTEMS = ("attnseq", "transformers", "ctranslate2-float32", "ctranslate2-int8")
TRAINERS = ("attnseq", "transformers")
PROFILED_BATCHES = 4  # --profile: the decoding batches profiled (where the time goes, not how much)
LEARNING_RATE = 1e-4
CLIP_NORM = 1.0


@dataclass(frozen=True)
class Shape:
    """One stand-in: its transformers class, its config settings and its tokenizer's sizes."""

    kind: str  # "marian" or "bart"
    config: dict[str, Any]
    vocab: int  # the model's vocabulary, filler entries included
    pieces: int  # what the tokenizer is trained to (the rest of `vocab` is filler)
    lines: int  # Multi30k training lines (per language) the tokenizer is trained on


SHAPES = {
    "opus-mt-base": Shape(
        "marian",
        {
            "d_model": 512,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "encoder_attention_heads": 8,
            "decoder_attention_heads": 8,
            "encoder_ffn_dim": 2048,
            "decoder_ffn_dim": 2048,
            "activation_function": "swish",
            "scale_embedding": True,
            "max_position_embeddings": 512,
        },
        vocab=58_101,
        pieces=8000,
        lines=10_000,
    ),
    "bart-base": Shape(
        "bart",
        {
            "d_model": 768,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "encoder_attention_heads": 12,
            "decoder_attention_heads": 12,
            "encoder_ffn_dim": 3072,
            "decoder_ffn_dim": 3072,
            "activation_function": "gelu",
            "scale_embedding": False,
            "max_position_embeddings": 1024,
        },
        vocab=50_265,
        pieces=8000,
        lines=10_000,
    ),
}


def _tiny(shape: Shape, d_model: int, heads: int, vocab: int) -> Shape:
    """`shape` in small, for --quick: 2+2 layers of `d_model`, a small vocabulary with filler."""
    tiny = {
        "d_model": d_model,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": 2 * d_model,
        "decoder_ffn_dim": 2 * d_model,
        "max_position_embeddings": 256,
    }
    return replace(shape, config={**shape.config, **tiny}, vocab=vocab, pieces=200, lines=400)


QUICK_SHAPES = {
    "opus-mt-base": _tiny(SHAPES["opus-mt-base"], 32, 4, 600),
    "bart-base": _tiny(SHAPES["bart-base"], 48, 6, 700),
}


# ------------------------------------------------------------------------------ the models
def corpus(data: Path, split: str, language: str) -> list[str]:
    """Multi30k's lines of `split` (train, val, test_2016_flickr) in `language`."""
    path = data / "multi30k" / f"{split}.{language}"
    if not path.is_file():
        raise UserError(f"no Multi30k at {path}: set ATTNSEQ_DATA (or --data) to the data folder")
    return path.read_text(encoding="utf-8").splitlines()


def with_filler(tokens: list[str], size: int, last: Sequence[str] = ()) -> dict[str, int]:
    """The vocabulary `tokens`, filler entries the tokenizer never produces and `last`, in
    that order: `size` ids in all."""
    count = size - len(tokens) - len(last)
    if count < 0:
        raise ValueError(f"{len(tokens) + len(last)} tokens do not fit a vocabulary of {size}")
    filler = [f"<filler_{index}>" for index in range(count)]
    return {token: index for index, token in enumerate([*tokens, *filler, *last])}


def build_marian(folder: Path, shape: Shape, lines: list[str]) -> None:
    """A MarianMTModel of `shape` with a joint sentencepiece model (source.spm = target.spm)
    and its vocab.json (</s> 0, <unk> 1, the pieces, filler, <pad> last)."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    work = folder / "spm"
    work.mkdir(parents=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(work / "joint"),
        vocab_size=shape.pieces,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    processor = spm.SentencePieceProcessor(model_file=str(work / "joint.model"))
    pieces = [
        processor.id_to_piece(index)
        for index in range(processor.get_piece_size())
        if not (processor.is_control(index) or processor.is_unknown(index))
    ]
    vocab = with_filler(["</s>", "<unk>", *pieces], shape.vocab, last=["<pad>"])
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = MarianTokenizer(
        vocab=str(work / "vocab.json"),
        source_spm=str(work / "joint.model"),
        target_spm=str(work / "joint.model"),
        source_lang="de",
        target_lang="en",
    )
    tokenizer.save_pretrained(folder)  # copies the files it reads
    shutil.rmtree(work)
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        **shape.config,
    )
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)


def build_bart(folder: Path, shape: Shape, lines: list[str]) -> None:
    """A BartForConditionalGeneration of `shape` with a byte-level BPE (vocab.json and
    merges.txt: <s> 0, <pad> 1, </s> 2, <unk> 3, the merges' tokens, filler, <mask> last)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartConfig, BartForConditionalGeneration

    folder.mkdir(parents=True)
    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    bpe.train_from_iterator(
        lines,
        vocab_size=shape.pieces,
        min_frequency=2,
        special_tokens=specials,
        show_progress=False,
    )
    bpe.save_model(str(folder))
    trained = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    ordered = sorted(trained, key=trained.__getitem__)
    vocab = with_filler(ordered, shape.vocab, last=["<mask>"])
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    config = BartConfig(
        vocab_size=len(vocab),
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=2,
        # what CTranslate2's BART converter reads (older transformers' BartConfig had it)
        normalize_before=False,
        **shape.config,
    )
    torch.manual_seed(0)
    BartForConditionalGeneration(config).save_pretrained(folder)


def build_model(folder: Path, shape: Shape, data: Path) -> Path:
    """The stand-in of `shape` in `folder` (kept when it is there: a --work-dir reused)."""
    if (folder / "config.json").is_file():
        return folder
    count = shape.lines
    lines = corpus(data, "train", "de")[:count] + corpus(data, "train", "en")[:count]
    (build_marian if shape.kind == "marian" else build_bart)(folder, shape, lines)
    return folder


def hf_classes(kind: str) -> tuple[Any, Any]:
    """(model class, tokenizer class) of transformers for a stand-in kind."""
    if kind == "marian":
        from transformers import MarianMTModel, MarianTokenizer

        return MarianMTModel, MarianTokenizer
    from transformers import BartForConditionalGeneration, BartTokenizer

    return BartForConditionalGeneration, BartTokenizer


# ------------------------------------------------------------------------------ decoding
Decoder = Callable[[list[list[int]], int], list[int]]  # (batch of ids, beam) -> output lengths


def source_batches(
    tokenizer: Any, sources: list[str], size: int, longest: int
) -> list[list[list[int]]]:
    """The sources as transformers' tokenizer makes them (EOS last, at most `longest` ids),
    longest first, in batches of `size`: the same ids for every system."""
    ids = [tokenizer(text, truncation=True, max_length=longest)["input_ids"] for text in sources]
    ids.sort(key=len, reverse=True)
    return [ids[start : start + size] for start in range(0, len(ids), size)]


def padded(batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) right-padded ids and (B,) lengths."""
    width = max(len(ids) for ids in batch)
    src = torch.tensor([ids + [pad] * (width - len(ids)) for ids in batch])
    return src, torch.tensor([len(ids) for ids in batch])


def attnseq_decoder(folder: Path, new_tokens: int) -> tuple[Decoder, Any]:
    """attnseq's searches (`decode`) on the imported model, every output `new_tokens` long."""
    import attnseq
    from attnseq.decoding import decode
    from attnseq.decoding.greedy import most_probable, token_by_token

    translator = attnseq.load(folder, "cpu").translator
    model = translator.model
    base = translator.settings()
    fixed = replace(
        base,
        nbest=1,
        min_length=new_tokens,
        max_output_ratio=0.0,
        max_output_extra=new_tokens,
        eos_at_limit=False,
        no_repeat_ngram=0,
        forced_first_token=None,
        length_penalty=1.0,
    )

    def run(batch: list[list[int]], beam: int) -> list[int]:
        src, lengths = padded(batch, model.pad_id)
        with torch.inference_mode():
            if beam == 1:  # `decode` takes a beam of one for greedy with a min_length
                limits = torch.full_like(lengths, new_tokens)
                found = token_by_token(
                    model, src, lengths, limits, most_probable, False, {}, min_length=new_tokens
                )
                return [len(hypothesis.tokens) for hypothesis in found]
            nbests = decode(model, src, lengths, replace(fixed, beam=beam))
        return [len(nbest[0].tokens) for nbest in nbests]

    return run, model


def transformers_decoder(folder: Path, kind: str, new_tokens: int) -> tuple[Decoder, Any]:
    """transformers' `generate`, `new_tokens` new tokens exactly."""
    model_class, _ = hf_classes(kind)
    model = model_class.from_pretrained(folder).eval()
    pad = model.config.pad_token_id

    def run(batch: list[list[int]], beam: int) -> list[int]:
        src, _ = padded(batch, pad)
        with torch.inference_mode():
            out = model.generate(
                input_ids=src,
                attention_mask=src.ne(pad),
                num_beams=beam,
                do_sample=False,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                no_repeat_ngram_size=0,
                length_penalty=1.0,
                forced_eos_token_id=None,
                forced_bos_token_id=None,
                num_return_sequences=1,
            )
        return [out.size(1) - 1] * len(batch)  # every row as long: min = max new tokens

    return run, model


def ctranslate2_decoder(
    converted: Path, tokenizer: Any, compute_type: str, threads: int, new_tokens: int
) -> Decoder:
    """CTranslate2's `translate_batch` on the converted folder, `new_tokens` tokens exactly."""
    import ctranslate2

    translator = ctranslate2.Translator(
        str(converted),
        device="cpu",
        compute_type=compute_type,
        intra_threads=threads,
        inter_threads=1,
    )

    def run(batch: list[list[int]], beam: int) -> list[int]:
        tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in batch]
        results = translator.translate_batch(
            tokens,
            beam_size=beam,
            max_batch_size=len(batch),
            min_decoding_length=new_tokens,
            max_decoding_length=new_tokens,
            no_repeat_ngram_size=0,
            length_penalty=1.0,
        )
        return [len(result.hypotheses[0]) for result in results]

    return run


def convert(folder: Path, target: Path) -> Path:
    """The folder converted by CTranslate2's own converter (float32; int8 is quantized on
    load)."""
    from ctranslate2.converters import TransformersConverter

    if not (target / "model.bin").is_file():
        TransformersConverter(str(folder)).convert(str(target), force=True)
    return target


def time_passes(
    run: Decoder, batches: list[list[list[int]]], beam: int, repeats: int
) -> dict[str, Any]:
    """Median target tokens/s of `repeats` passes over `batches` (after a warm-up batch)."""
    run(batches[0], beam)
    rates, produced = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        produced = sum(sum(run(batch, beam)) for batch in batches)
        rates.append(produced / (time.perf_counter() - start))
    sentences = sum(len(batch) for batch in batches)
    return {
        "tokens_per_second": round(statistics.median(rates), 1),
        "all_rates": [round(rate, 1) for rate in rates],
        "mean_output_tokens": round(produced / sentences, 3),
        "sentences": sentences,
    }


def decoding_rows(
    name: str, folder: Path, shape: Shape, args: argparse.Namespace, work: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per search and system, and (with --profile) attnseq's and transformers' top
    operators per search."""
    _, tokenizer_class = hf_classes(shape.kind)
    tokenizer = tokenizer_class.from_pretrained(folder)
    sources = [line for line in corpus(args.data, "test_2016_flickr", "de") if line.strip()]
    longest = shape.config["max_position_embeddings"] - args.new_tokens - 1
    batches = source_batches(tokenizer, sources[: args.sentences], args.batch_size, longest)
    ours, _ = attnseq_decoder(folder, args.new_tokens)
    theirs, _ = transformers_decoder(folder, shape.kind, args.new_tokens)
    systems: dict[str, Decoder] = {"attnseq": ours, "transformers": theirs}
    if not args.no_ctranslate2:
        converted = convert(folder, work / f"{name}-ct2")
        for compute_type in ("float32", "int8"):
            systems[f"ctranslate2-{compute_type}"] = ctranslate2_decoder(
                converted, tokenizer, compute_type, args.threads, args.new_tokens
            )
    rows, profiles = [], {}
    for search, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        for system, run in systems.items():
            row = {"model": name, "task": "decoding", "search": search, "system": system}
            row.update(time_passes(run, batches, beam, args.repeats))
            rows.append(row)
            print(f"{name} {search} {system}: {row['tokens_per_second']} tok/s", file=sys.stderr)
        if args.profile:
            profiles[search] = {
                system: profiled(
                    lambda run=systems[system], beam=beam: each(
                        run, batches[:PROFILED_BATCHES], beam
                    )
                )
                for system in ("attnseq", "transformers")
            }
    return rows, profiles


def each(run: Decoder, batches: list[list[list[int]]], beam: int) -> list[list[int]]:
    """One pass of `run` over `batches`."""
    return [run(batch, beam) for batch in batches]


def profiled(work: Callable[[], Any], top: int = 12) -> list[dict[str, Any]]:
    """The `top` operators by self CPU time of one run of `work`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        work()
    return top_operators(profiler.key_averages(), top)


# ------------------------------------------------------------------------------ training
def training_batches(folder: Path, args: argparse.Namespace, target: Path) -> Path:
    """The Multi30k training batches both systems update on, saved in `target`: attnseq's
    token-budget batches (data.max_tokens padded tokens, shuffled) of the imported model's ids,
    as (src, src_lengths, tgt_in, tgt_out, tgt_lengths) and the real target positions."""
    from attnseq.data.batching import TokenBatchSampler, example_lengths
    from attnseq.data.loader import BatchLoader
    from attnseq.models.loading import load_trained_model

    trained = load_trained_model(folder)
    count = args.train_pairs
    sources, targets = (corpus(args.data, "train", side)[:count] for side in ("de", "en"))
    pairs = list(zip(sources, targets, strict=True))
    src, tgt = trained.tokenizers.src, trained.tokenizers.tgt
    limit = trained.cfg.model.max_positions - 2  # EOS and BOS fit the position table
    examples = [(src.encode(a)[:limit], tgt.encode(b)[:limit]) for a, b in pairs]
    model = trained.model
    sampler = TokenBatchSampler(
        example_lengths(examples), max_tokens=args.max_tokens, shuffle=True, seed=0
    )
    loader = BatchLoader(
        examples,
        pad_id=model.pad_id,
        bos_id=model.bos_id,
        eos_id=model.eos_id,
        device=torch.device("cpu"),
    )
    needed = args.warmup + args.steps * args.repeats
    batches: list[dict[str, Any]] = []
    epoch = 0
    while len(batches) < needed:
        for batch, counts in loader(sampler.batches(epoch)):
            tensors = ("src", "src_lengths", "tgt_in", "tgt_out", "tgt_lengths", "indices")
            batches.append({"tensors": [getattr(batch, key) for key in tensors], "counts": counts})
            if len(batches) == needed:
                break
        epoch += 1
    torch.save({"batches": batches, "pad_id": model.pad_id}, target)
    return target


def load_batches(path: Path) -> tuple[list[Any], int]:
    """The saved batches as (attnseq `Batch`, `TokenCounts`) and the pad id."""
    from attnseq.data.batching import Batch
    from attnseq.data.loader import TokenCounts

    saved = torch.load(path, weights_only=False)
    batches = [(Batch(*item["tensors"]), TokenCounts(*item["counts"])) for item in saved["batches"]]
    return batches, saved["pad_id"]


def attnseq_updates(folder: Path, max_tokens: int) -> Callable[[Any, Any], Any]:
    """attnseq's update of the imported model as `attnseq train model.init_from=FOLDER` runs
    it: `Trainer.update` (train_step and the schedule) with AdamW."""
    from attnseq.config.choices import OptimizerName
    from attnseq.models.loading import load_trained_model
    from attnseq.training.optim import LearningRateSchedule, TrainingBudget, build_optimizer
    from attnseq.training.trainer import Trainer

    trained = load_trained_model(folder)
    cfg, model = trained.cfg, trained.model.train()
    del trained  # its payload's copy of the weights
    cfg.data.max_tokens = max_tokens
    cfg.optim.name, cfg.optim.lr = OptimizerName.adamw, LEARNING_RATE
    cfg.optim.weight_decay, cfg.optim.clip_norm = 0.0, CLIP_NORM
    optimizer = build_optimizer(model, cfg.optim)
    schedule = LearningRateSchedule(optimizer, cfg.optim, TrainingBudget(10**6))
    run_dir = Path(tempfile.mkdtemp(prefix="attnseq-speed-"))  # the trainer never saves here
    device = torch.device("cpu")
    trainer = Trainer(
        model, optimizer, schedule, cfg, [([1], [1])], None, run_dir, None, device, {}
    )
    return lambda batch, counts: trainer.update([(batch, counts)])


def transformers_updates(folder: Path, kind: str, pad_id: int) -> Callable[[Any, Any], Any]:
    """A plain transformers loop: the model's own loss, backward, clipping, AdamW."""
    model_class, _ = hf_classes(kind)
    model = model_class.from_pretrained(folder).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)

    def update(batch: Any, counts: Any) -> Any:
        labels = batch.tgt_out.masked_fill(batch.tgt_out.eq(pad_id), -100)
        loss = model(
            input_ids=batch.src,
            attention_mask=batch.src.ne(pad_id),
            decoder_input_ids=batch.tgt_in,
            labels=labels,
        ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return update


def peak_rss() -> int:
    """This process's peak resident set size in bytes: Linux's VmHWM, which starts anew at
    exec (getrusage's ru_maxrss keeps the high-water mark of the parent that forked it), else
    ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def train_child(args: argparse.Namespace) -> dict[str, Any]:
    """One system's training figures (run in a process of its own)."""
    torch.set_num_threads(args.threads)
    batches, pad_id = load_batches(args.batches)
    if args.child == "attnseq":
        update = attnseq_updates(args.folder, args.max_tokens)
    else:
        update = transformers_updates(args.folder, args.kind, pad_id)
    for batch, counts in batches[: args.warmup]:
        update(batch, counts)
    rates, losses = [], []
    timed = batches[args.warmup :]
    for repeat in range(args.repeats):
        chosen = timed[repeat * args.steps : (repeat + 1) * args.steps]
        start = time.perf_counter()
        outcomes = [update(batch, counts) for batch, counts in chosen]
        tokens = sum(counts.tgt for _, counts in chosen)
        losses.append(float(outcomes[-1].loss if args.child == "attnseq" else outcomes[-1]))
        rates.append(tokens / (time.perf_counter() - start))
    result: dict[str, Any] = {
        "tokens_per_second": round(statistics.median(rates), 1),
        "all_rates": [round(rate, 1) for rate in rates],
        "peak_rss_mib": round(peak_rss() / 2**20, 1),
        "last_losses": [round(loss, 4) for loss in losses],
        "target_tokens_per_update": round(statistics.mean(counts.tgt for _, counts in timed), 1),
    }
    if args.profile:
        result["profile"] = profiled(
            lambda: [update(batch, counts) for batch, counts in timed[: args.steps]]
        )
    return result


def training_rows(
    name: str, folder: Path, shape: Shape, args: argparse.Namespace, work: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per training system, each measured in a child process."""
    saved = training_batches(folder, args, work / f"{name}-batches.pt")
    rows, profiles = [], {}
    for system in TRAINERS:
        command = [sys.executable, __file__, "--child", system, "--folder", str(folder)]
        command += ["--kind", shape.kind, "--batches", str(saved)]
        for option in ("threads", "max_tokens", "steps", "warmup", "repeats"):
            command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        command += ["--profile"] if args.profile else []
        child = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        if child.returncode != 0:
            raise RuntimeError(f"{name}: the {system} training child failed ({child.returncode})")
        result = json.loads(child.stdout.strip().splitlines()[-1])
        if "profile" in result:
            profiles[system] = result.pop("profile")
        rows.append({"model": name, "task": "training", "search": "", "system": system, **result})
        print(f"{name} training {system}: {result['tokens_per_second']} tok/s", file=sys.stderr)
    return rows, profiles


# ------------------------------------------------------------------------------ the report
def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def host(threads: int) -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15": [round(load, 2) for load in os.getloadavg()],
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "ctranslate2": version("ctranslate2"),
    }


def parameters(folder: Path, kind: str) -> int:
    """Parameters of the stand-in as transformers counts them (tied weights once)."""
    model_class, _ = hf_classes(kind)
    return sum(p.numel() for p in model_class.from_pretrained(folder).parameters())


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with `attnseq_ratio`: attnseq's tokens/s over this row's (same model, task and
    search); attnseq's own rows have 1."""
    ours = {
        (row["model"], row["task"], row["search"]): row["tokens_per_second"]
        for row in rows
        if row["system"] == "attnseq"
    }
    for row in rows:
        mine = ours.get((row["model"], row["task"], row["search"]))
        rate = row["tokens_per_second"]
        row["attnseq_ratio"] = round(mine / rate, 3) if mine and rate else None
    return rows


def markdown(report: dict[str, Any]) -> str:
    """docs/results/pretrained_speed.md: the command, the host, the table, the profiles."""
    machine, settings = report["host"], report["settings"]
    lines = [
        "# Speed at pretrained size",
        "",
        "Random-weight models of opus-mt-base's and bart-base's shapes (built offline with "
        "`transformers`), read by attnseq as any Hugging Face model folder; decoded by attnseq, "
        "`transformers` `generate` and CTranslate2, trained by attnseq and a plain "
        "`transformers` loop. What each figure measures is in the docstring of "
        "benchmarks/benchmark_pretrained_speed.py.",
        "",
        "Reproduce (from the repository root, on an idle machine):",
        "",
        "```",
        report["command"],
        "```",
        "",
        f"Host: {machine['cpu']} ({machine['cpu_count']} cores, load average "
        f"{' / '.join(str(x) for x in machine['load_average_1_5_15'])} at the start), "
        f"{machine['threads']} thread(s) for every system; Python {machine['python']}, "
        f"torch {machine['torch']}, transformers {machine['transformers']}, ctranslate2 "
        f"{machine['ctranslate2']}.",
        "",
        f"Decoding: {settings['sentences']} Multi30k test2016 sentences, batch "
        f"{settings['batch_size']}, every output {settings['new_tokens']} tokens "
        f"(min_length = max_length). Training: batches of {settings['max_tokens']} padded "
        f"tokens, {settings['steps']} updates per repeat after {settings['warmup']}. Each "
        f"figure is the median of {settings['repeats']} repeat(s), in target tokens/s; "
        "attnseq / system is attnseq's figure over the row's (above 1: attnseq is faster).",
        "",
        "| model | parameters | task | search | system | target tokens/s | attnseq / system "
        "| peak RSS (MiB) |",
        "|---|---:|---|---|---|---:|---:|---:|",
    ]
    for row in report["results"]:
        ratio = "" if row["system"] == "attnseq" else f"{row['attnseq_ratio']:.2f}x"
        rss = f"{row['peak_rss_mib']:,.0f}" if "peak_rss_mib" in row else ""
        count = f"{report['parameters'][row['model']] / 1e6:.1f}M"
        lines.append(
            f"| {row['model']} | {count} | {row['task']} | {row['search'] or '-'} | "
            f"{row['system']} | {row['tokens_per_second']:,.0f} | {ratio} | {rss} |"
        )
    lines += ["", *summary(report["results"])]
    if report.get("profiles"):
        lines += ["", "## Where the time goes", ""]
        lines += [
            "torch.profiler's operators with the most self CPU time (share of all profiled "
            f"self time) in each search of the first {PROFILED_BATCHES} batches and over one "
            "repeat of updates."
        ]
        for model, parts in report["profiles"].items():
            for part, systems in parts.items():
                lines += ["", f"### {model}, {part}", ""]
                lines += profile_table(systems)
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """In words: in how many rows attnseq is ahead of transformers, and its range of ratios to
    each system."""
    lines = []
    for system in SYSTEMS[1:]:
        ratios = [row["attnseq_ratio"] for row in rows if row["system"] == system]
        ratios = [ratio for ratio in ratios if ratio is not None]
        if not ratios:
            continue
        ahead = sum(ratio > 1 for ratio in ratios)
        lines.append(
            f"- attnseq / {system}: {min(ratios):.2f}x to {max(ratios):.2f}x; attnseq ahead in "
            f"{ahead} of {len(ratios)} row(s)."
        )
    return lines


def profile_table(systems: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The systems' top operators side by side: rank, then operator and share per system."""
    names = list(systems)
    header = "| # | " + " | ".join(f"{name} operator | self CPU %" for name in names) + " |"
    lines = [header, "|---:|" + "---|---:|" * len(names)]
    for rank in range(max(len(ops) for ops in systems.values())):
        cells = []
        for name in names:
            ops = systems[name]
            if rank < len(ops):
                cells += [f"`{ops[rank]['operator']}`", str(ops[rank]["self_cpu_share"])]
            else:
                cells += ["", ""]
        lines.append(f"| {rank + 1} | " + " | ".join(cells) + " |")
    return lines


def reproduce(argv: list[str]) -> str:
    """The command line of this run, as the page shows it."""
    arguments = " ".join(shlex.quote(argument) for argument in argv)
    script = "benchmarks/benchmark_pretrained_speed.py"
    return f"ATTNSEQ_DATA=../shared/data .venv/bin/python {script} {arguments}".rstrip()


def run(args: argparse.Namespace, argv: list[str], work: Path) -> dict[str, Any]:
    shapes = QUICK_SHAPES if args.quick else SHAPES
    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {
        "command": reproduce(argv),
        "host": host(args.threads),
        "settings": {
            key: getattr(args, key)
            for key in ("sentences", "batch_size", "beam", "new_tokens", "max_tokens")
            + ("steps", "warmup", "repeats", "threads", "quick")
        },
        "parameters": {},
        "results": [],
        "profiles": {},
    }
    for name in args.models.split(","):
        shape = shapes[name]
        print(f"{name}: building the stand-in", file=sys.stderr)
        folder = build_model(work / name, shape, args.data)
        report["parameters"][name] = parameters(folder, shape.kind)
        decoded, decoding_profiles = decoding_rows(name, folder, shape, args, work)
        trained, training_profiles = training_rows(name, folder, shape, args, work)
        report["results"] += decoded + trained
        if args.profile:
            profile = {f"decoding {search}": ops for search, ops in decoding_profiles.items()}
            report["profiles"][name] = {**profile, "training": training_profiles}
    report["results"] = with_ratios(report["results"])
    return report


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    data = os.environ.get("ATTNSEQ_DATA", "data")
    parser.add_argument("--models", default=",".join(SHAPES), help="comma-separated shapes")
    parser.add_argument("--sentences", type=int, default=500, help="test2016 sentences decoded")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--beam", type=int, default=4, help="the beam compared with greedy")
    parser.add_argument("--new-tokens", type=int, default=24, help="tokens of every output")
    parser.add_argument("--max-tokens", type=int, default=4096, help="a training batch's tokens")
    parser.add_argument("--steps", type=int, default=5, help="timed updates per repeat")
    parser.add_argument("--warmup", type=int, default=2, help="untimed updates first")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (the median)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every system")
    parser.add_argument("--train-pairs", type=int, default=6000, help="Multi30k pairs batched")
    parser.add_argument("--data", type=Path, default=Path(data), help="$ATTNSEQ_DATA")
    parser.add_argument("--work-dir", type=Path, help="where the models are built (kept)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "docs" / "results")
    parser.add_argument("--profile", action="store_true", help="the top operators too")
    parser.add_argument("--no-ctranslate2", action="store_true", help="decode without it")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, for the tests")
    # a training child: one system's updates (see `training_rows`)
    parser.add_argument("--child", choices=TRAINERS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    numbers = ("sentences", "batch_size", "beam", "new_tokens", "max_tokens", "steps")
    if any(getattr(args, key) < 1 for key in (*numbers, "repeats", "threads", "train_pairs")):
        named = ", ".join(f"--{key.replace('_', '-')}" for key in numbers)
        parser.error(f"{named}, --repeats, --threads and --train-pairs must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    unknown = [name for name in args.models.split(",") if name not in SHAPES]
    if unknown:
        parser.error(f"--models: {', '.join(unknown)} unknown (choose from {', '.join(SHAPES)})")
    return args


def quiet() -> None:
    """No progress bars or notices of transformers' on stderr, where the progress lines go."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = parse_arguments(given)
    quiet()
    if args.child:
        print(json.dumps(train_child(args)))
        return 0
    try:
        if args.work_dir is not None:
            args.work_dir.mkdir(parents=True, exist_ok=True)
            report = run(args, given, args.work_dir)
        else:
            with tempfile.TemporaryDirectory(prefix="attnseq-speed-") as folder:
                report = run(args, given, Path(folder))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from attnseq.io.atomic import atomic_write_json, atomic_write_text

    args.out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out_dir / f"{PAGE}.json", report)
    atomic_write_text(args.out_dir / f"{PAGE}.md", markdown(report))
    print(f"wrote {args.out_dir / PAGE}.json and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
