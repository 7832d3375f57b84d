"""`attnseq eval`: a checkpoint's metrics on one split, from the checkpoint alone (plus its
data), into a result folder of its own named after what was evaluated and how,
OUT/CHECKPOINT/SPLIT.DECODING/ (`result_folder`), so that no evaluation replaces another's;
and `checkpoint_data`, the one way any command reads a checkpoint's data."""

import datetime
import hashlib
import json
import os
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from attnseq.alignment.forced import GoldAlignmentFiles, load_alignment_set
from attnseq.alignment.saved_attention import records_from_hypotheses
from attnseq.alignment.saved_attention import save_attention as write_saved_attention
from attnseq.alignment.segments import hypothesis_segment_maps, is_hierarchical
from attnseq.config.devices import resolve_device
from attnseq.config.resources import (
    check_generated_data,
    check_inference_memory,
    decoding_bytes,
    source_length,
)
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.batching import Example
from attnseq.data.locations import check_checkpoint_data, overridden_keys
from attnseq.data.prepare import PreparedData, prepare_data
from attnseq.data.sources import NoDataAtPath, load_pairs_from_path
from attnseq.data.tokenizers import TokenizerPair
from attnseq.data.unknown_tokens import UnknownCount, warn_unknown
from attnseq.decoding.settings import is_greedy, with_changes
from attnseq.errors import UserError
from attnseq.evaluation.evaluator import Evaluator, Hypothesis, make_evaluator, split_gold
from attnseq.io.atomic import atomic_write_json, atomic_write_lines
from attnseq.io.hf_hub import is_hub_id
from attnseq.io.user_paths import refuse_output_over_inputs
from attnseq.models.ensemble import load_ensemble
from attnseq.models.head_mask import pruned_heads_summary
from attnseq.models.positional import position_limit
from attnseq.models.seq2seq import Seq2Seq

# config keys that are decoding settings (named by DECODING), or that cannot change a result
DECODING_PREFIX = "decoding."
NEUTRAL_KEYS = {"trainer.device", "trainer.threads", "trainer.progress", "data.eval_max_tokens"}
LONGEST_OVERRIDES_NAME = 60  # longer override lists are named by a hash (all are recorded)
# the files a result folder may hold: attention.npz with saved attention
RESULT_FILES = ("metrics.json", "hyps.txt", "refs.txt", "attention.npz")


@dataclass
class EvalResult:
    """One evaluation's folder and its metrics.json record."""

    folder: Path
    record: dict[str, Any]


class EvalMetrics(dict[str, float]):
    """An evaluation's metrics (name -> value) that also say where they were written."""

    def __init__(self, metrics: dict[str, float], result: EvalResult) -> None:
        super().__init__(metrics)
        self.result = result


def default_root(checkpoint: Path) -> Path:
    """RUN/eval for RUN/checkpoints/NAME.pt; eval/ beside any other checkpoint (a Hugging
    Face model folder's eval/ is beside the folder; hf:ORG/NAME's in the working directory)."""
    if is_hub_id(checkpoint):
        return Path("eval")
    folder = checkpoint.parent
    return (folder.parent if folder.name == "checkpoints" else folder) / "eval"


def decoding_name(settings: DecodingConfig) -> str:
    """'greedy', 'beam5-lp0.6', 'beam4-lp1-min8-norepeat3-cov0.2',
    'sample-t0.7-k0-p0.9-n1-seed0', ...: every setting whatever the checkpoint's defaults, so
    that names compare across checkpoints."""
    searches = not is_greedy(settings) and not settings.sample
    if settings.sample:  # every sampling setting
        parts = [
            f"sample-t{settings.temperature:g}-k{settings.top_k}-p{settings.top_p:g}"
            f"-n{settings.num_samples}-seed{settings.seed}"
        ]
    else:
        parts = [f"beam{settings.beam}"] if searches else ["greedy"]
    if searches:  # greedy decoding and sampling rank nothing: alpha plays no part
        parts.append(f"lp{settings.length_penalty:g}")
        if settings.length_penalty_offset != 5.0:
            parts.append(f"lpk{settings.length_penalty_offset:g}")
        if settings.stop_at_current_length:
            parts.append("stopcurrent")
    if settings.eos_at_limit:
        parts.append("eosatlimit")
    if settings.forced_first_token is not None:
        parts.append(f"first{settings.forced_first_token}")
    if settings.min_length:
        parts.append(f"min{settings.min_length}")
    if settings.no_repeat_ngram:
        parts.append(f"norepeat{settings.no_repeat_ngram}")
    if settings.coverage_penalty and not settings.sample:
        parts.append(f"cov{settings.coverage_penalty:g}")
    default = DecodingConfig()
    limit = (settings.max_output_ratio, settings.max_output_extra)
    if limit != (default.max_output_ratio, default.max_output_extra):
        parts.append(f"maxlen{limit[0]:g}x+{limit[1]}")
    return "-".join(parts)


def result_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides that can change a result and are not decoding settings, sorted."""
    chosen = []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if not key.startswith(DECODING_PREFIX) and key not in NEUTRAL_KEYS:
            chosen.append(override)
    return sorted(chosen)


def result_folder(
    out: Path,
    checkpoint: Path,
    step: int | None,
    split: str,
    settings: DecodingConfig,
    overrides: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> Path:
    """OUT/CHECKPOINT/SPLIT.DECODING[+OVERRIDES][+EXTRA...]: CHECKPOINT the file name with its
    step (best-step1400), DECODING `decoding_name`, OVERRIDES those that may change the result
    (`result_overrides`); `extra` names what else the result depends on (e.g.
    align-GOLD_FILE)."""
    model = checkpoint.stem if step is None else f"{checkpoint.stem}-step{step}"
    name = f"{split}.{decoding_name(settings)}"
    changed = result_overrides(overrides)
    if changed:
        joined = ",".join(changed)
        if len(joined) > LONGEST_OVERRIDES_NAME:
            joined = "overrides-" + hashlib.sha1(joined.encode()).hexdigest()[:10]
        name += f"+{joined}"
    for part in extra:
        name += f"+{part}"
    return out / model / re.sub(r"[^\w.=,+-]", "_", name)


def write_result(
    folder: Path,
    metrics: dict[str, float],
    hypotheses: Sequence[str],
    references: Sequence[str],
    about: dict[str, Any],
) -> EvalResult:
    """Write hyps.txt, refs.txt, then metrics.json (last: a folder whose metrics.json exists
    is complete). `about` says what was evaluated (checkpoint, split, ...)."""
    atomic_write_lines(folder / "hyps.txt", list(hypotheses))
    atomic_write_lines(folder / "refs.txt", list(references))
    record = {**about, **metrics}
    if any(key.endswith("/bleu") for key in metrics):
        from attnseq.evaluation.metrics import bleu_signature

        record["bleu_signature"] = bleu_signature()
    record["evaluated_at"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    atomic_write_json(folder / "metrics.json", record)
    return EvalResult(folder, record)


# metrics.json field -> the types attnseq eval writes it with (a record lacking one is older)
RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "checkpoint": (str, type(None)),
    "checkpoint_step": (int, type(None)),
    "split": (str,),
    "examples": (int,),
    "decoding": (dict,),
    "overrides": (list,),
    "bleu_signature": (str,),
}


def read_record(path: Path) -> dict[str, Any]:
    """The metrics.json of an eval result folder, or a UserError naming it as damaged when it
    is not a regular file holding a JSON object whose fields have the types eval writes them
    with (`RECORD_TYPES`; the overrides a list of strings)."""

    def damaged(problem: str) -> UserError:
        return UserError(f"{path} is damaged ({problem}): not the metrics.json of attnseq eval")

    try:
        if not path.is_file():
            raise damaged("not a regular file")
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise damaged(getattr(error, "msg", None) or type(error).__name__) from None
    if not isinstance(record, dict):
        raise damaged(f"a JSON {type(record).__name__}, not an object")
    for key, types in RECORD_TYPES.items():
        value = record.get(key)
        wrong = key in record and (not isinstance(value, types) or isinstance(value, bool))
        if wrong or key == "overrides" and not all(isinstance(item, str) for item in value or []):
            raise damaged(f"{key} is {json.dumps(value)[:40]}")
    return record


def record_decoding_name(record: dict[str, Any]) -> str | None:
    """`decoding_name` of the settings an eval record names; None when it names none this
    version reads."""
    settings = record.get("decoding")
    known = {spec.name for spec in fields(DecodingConfig)}
    if not isinstance(settings, dict) or not settings.keys() <= known:
        return None
    try:
        return decoding_name(replace(DecodingConfig(), **settings))
    except (TypeError, ValueError):
        return None


def describe(
    checkpoint: Path,
    payload: dict[str, Any],
    split: str,
    examples: int,
    settings: DecodingConfig,
    overrides: Sequence[str],
    alignments: Any = None,
) -> dict[str, Any]:
    """The record's description of an evaluation: what was evaluated, and how. `alignments`:
    the gold word-alignment files (evaluation.GoldAlignmentFiles) of an alignment evaluation."""
    about: dict[str, Any] = {
        "checkpoint": str(checkpoint if is_hub_id(checkpoint) else checkpoint.resolve()),
        "checkpoint_step": checkpoint_step(payload),
        "split": split,
        "examples": examples,
        "decoding": asdict(settings),
        "overrides": list(overrides),
    }
    if "averaged_from" in payload:
        about["averaged_from"] = list(payload["averaged_from"])
    if alignments is not None:
        about["alignments"] = {
            key: value if value is None else str(value) for key, value in asdict(alignments).items()
        }
    return about


def checkpoint_step(payload: dict[str, Any]) -> int | None:
    """The training step of a checkpoint; None for an average (it has no progress)."""
    progress = payload.get("progress")
    if isinstance(progress, dict) and isinstance(progress.get("step"), int):
        return progress["step"]
    return None


# -------------------------------------------------------------------------------- attnseq eval
NAMED_SPLITS = ("train", "valid", "test")


def evaluate_checkpoint(
    path: Path,
    split: str = "test",
    max_tokens: int | None = None,
    out_dir: Path | None = None,
    overrides: list[str] | None = None,
    device_name: str = "auto",
    save_attention: bool = False,
    alignments: GoldAlignmentFiles | None = None,
    decoding: Mapping[str, Any] | None = None,
    ensemble: Sequence[Path] = (),
    names: Mapping[str, str] | None = None,
    keep: Sequence[tuple[str, Path | None]] = (),
) -> EvalMetrics:
    """Metrics of a checkpoint on one split; the result goes to a folder under `out_dir`
    (default RUN/eval) named after the checkpoint, its step, the split and every decoding
    setting, which the returned metrics name (`.result.folder`).

    `save_attention`: also write the cross-attention of every output hypothesis to
    attention.npz in that folder (format: attnseq/alignment/saved_attention.py).
    The attention diagnostics of the split (``SPLIT/attention/...``,
    attnseq/alignment/diagnostics.py) come with the metrics, as in training's
    metrics.json.
    `decoding`: changes of the checkpoint's decoding settings (setting -> value, e.g. {"beam":
    5} or {"sample": True, "seed": 1}; decoding/settings.py, `with_changes`).
    `ensemble`: more checkpoints that decode with this one as an ensemble.
    `alignments`: also score the attention against a gold word-alignment set, as
    ``align/aer``, ``align/precision``, ``align/recall`` and per layer/head
    (``align/aer/layer2/head3``, ``align/aer/layer2/mean``), read with `alignments.method`
    (the result folder names the method when it is not the plain attention).
    `names`: what messages call the arguments `split` and `save_attention` (a command passes
    its options; by default their own names).
    `keep`: (name, path) of more files the result must not replace: the caller's inputs (a
    comparison's references, for one).
    """
    names = {"split": "split", "save_attention": "save_attention", **(names or {})}
    overrides = list(overrides or [])
    trained = load_ensemble([path, *ensemble], overrides)
    cfg, tokenizers = trained.cfg, trained.tokenizers
    cfg.decoding = with_changes(cfg.decoding, decoding or {})
    dataset_split = split in NAMED_SPLITS or split in cfg.data.splits
    # before any work: the data's locations (read again through checkpoint_data below)
    check_data(cfg, overridden_keys(overrides), dataset_split, f"{names['split']} PATH")
    if max_tokens:
        cfg.data.eval_max_tokens = max_tokens
    device = resolve_device(cfg.trainer.device if device_name == "auto" else device_name)
    model = trained.model.to(device)
    _check_attention_wanted(cfg, save_attention, alignments, names["save_attention"])
    alignment_set = None
    if alignments is not None:  # read and check the gold set before the slow work
        alignment_set = load_alignment_set(
            alignments, tokenizers.src, tokenizers.tgt, position_limit(model)
        )
    name, data = _prepare_split(cfg, overrides, split, dataset_split, tokenizers, names["split"])
    _check_decoding_memory(cfg, tokenizers.tgt.vocab_size, device, name, len(data.examples[name]))
    texts = {} if dataset_split else {(f"{split} source", f"{split} target"): data.examples[name]}
    if alignment_set is not None:
        texts[(alignments.name("src"), alignments.name("tgt"))] = alignment_set.examples
    gold = split_gold(cfg, name, tokenizers) if dataset_split else None
    evaluator = make_evaluator(cfg, data, name, device, gold)
    folder = result_folder(
        out_dir or default_root(path),
        path,
        checkpoint_step(trained.payload),
        name,
        evaluator.decoding,
        overrides,
        _alignment_tags(alignments),
    )
    if ensemble:  # beside the first member's own results
        folder = folder.with_name(f"{folder.name}+ensemble{len(ensemble) + 1}")
    inputs = [*eval_inputs(path, split, ensemble, alignments, names["split"]), *keep]
    for result_file in RESULT_FILES:  # before the slow decoding
        refuse_output_over_inputs(folder / result_file, "eval result", inputs)
    metrics, decoded = evaluator.evaluate_hypotheses(model, need_weights=save_attention)
    metrics.update(evaluator.attention_diagnostics(model))  # as training's test metrics
    print(f"{name}: decoded {evaluator.decode_rate.summary()}", file=sys.stderr)
    results = {f"{name}/{key}": value for key, value in metrics.items()}
    if alignment_set is not None:
        scores = alignment_set.score(model, device, method=alignments.method)
        results.update({f"align/{key}": value for key, value in scores.items()})
    if save_attention:
        _save_eval_attention(folder / "attention.npz", cfg, model, evaluator, decoded, data, name)
    hypotheses = evaluator.texts(decoded)
    about = describe(
        path, trained.payload, name, len(hypotheses), evaluator.decoding, overrides, alignments
    )
    if ensemble:
        about["ensemble"] = trained.payload["ensemble"]
    if pruned := pruned_heads_summary(model):  # a checkpoint of `attnseq heads --prune`
        about["pruned_heads"] = pruned
    result = write_result(folder, results, hypotheses, evaluator.references, about)
    warn_unknown(_unknown_counts(tokenizers, texts))  # after the work: an error ends alone
    return EvalMetrics(results, result)


def checkpoint_data(
    cfg: TrainConfig,
    tokenizers: TokenizerPair,
    splits: Sequence[str],
    given: Collection[str] = (),
    *,
    pairs: Mapping[str, list[tuple[str, str]]] | None = None,
    reads_dataset: bool = True,
    local_file: str = "",
    overridable: bool = True,
) -> PreparedData:
    """The splits `splits` of a checkpoint's data, prepared with its tokenizers: what eval,
    heads and compare read a checkpoint's data through, so that each is checked first
    (`check_data`, with the arguments `given` to `overridable`). `pairs`: splits the caller
    read itself (a file the user named), by name."""
    check_data(cfg, given, reads_dataset, local_file, overridable)
    chosen = None if pairs is None else dict(pairs)
    return prepare_data(
        cfg.data, cfg.seed, tokenizers=tokenizers, splits=list(splits), pairs=chosen
    )


def check_data(
    cfg: TrainConfig,
    given: Collection[str],
    reads_dataset: bool,
    local_file: str = "",
    overridable: bool = True,
) -> None:
    """UserError for data a checkpoint's config cannot reach here: a location outside the
    user's data root, data from the Hub (data.locations.check_checkpoint_data, whose
    arguments these are), or, where the dataset's splits are read, a generated task too large
    to make (`check_generated_data`)."""
    check_checkpoint_data(cfg.data, given, reads_dataset, local_file, overridable)
    if reads_dataset:
        check_generated_data(cfg)


def _unknown_counts(
    tokenizers: TokenizerPair, texts: dict[tuple[str, str], Sequence[Example]]
) -> list[UnknownCount]:
    """The unknown tokens of each text the user gave: (source name, target name) -> its
    encoded pairs (a split read from a file, the sentences of a gold alignment set)."""
    counts = []
    for names, examples in texts.items():
        for index, tokenizer in enumerate((tokenizers.src, tokenizers.tgt)):
            side = ("source", "target")[index]
            count = UnknownCount(names[index], f"the model's {side} vocabulary", tokenizer.unk_id)
            counts.append(count.add_all(example[index] for example in examples))
    return counts


def eval_inputs(
    path: Path,
    split: str,
    ensemble: Sequence[Path] = (),
    alignments: GoldAlignmentFiles | None = None,
    split_name: str = "split",
) -> list[tuple[str, Path | None]]:
    """(name, path) of every file an evaluation reads that a result must not replace: the
    checkpoints, the split when it is a file (not a split name that happens to name a folder),
    and the gold word-alignment files; each named as the messages call it (`split_name`, the
    gold set's `names`)."""
    split_file = Path(split) if Path(split).is_file() else None
    inputs: list[tuple[str, Path | None]] = [("CHECKPOINT", path), (split_name, split_file)]
    inputs += [(f"ensemble member {number}", member) for number, member in enumerate(ensemble, 2)]
    if alignments is not None:
        inputs += [
            (alignments.name(field), getattr(alignments, field))
            for field in ("gold", "src", "tgt", "possible")
        ]
    return inputs


def _alignment_tags(alignments: GoldAlignmentFiles | None) -> list[str]:
    """What the result folder's name says about the gold set and how it was read."""
    if alignments is None:
        return []
    method = "" if alignments.method == "attention" else f"-{alignments.method}"
    return [f"align-{alignments.gold.name}{method}"]


def _check_attention_wanted(
    cfg: TrainConfig,
    save_attention: bool,
    alignments: GoldAlignmentFiles | None,
    save_name: str,
) -> None:
    """Saving attention and scoring it against gold links need a model with attention."""
    no_attention = cfg.model.family.value == "rnn" and cfg.model.attention.score.value == "none"
    if no_attention and (save_attention or alignments is not None):
        asked = save_name if save_attention else alignments.name("gold")  # type: ignore[union-attr]
        raise UserError(f"{asked}: this model has no attention (model.attention.score=none)")


def _check_decoding_memory(
    cfg: TrainConfig, vocab: int, device: torch.device, name: str, examples: int
) -> None:
    """UserError when a batch of the split's decoding cannot fit the device (resources.py,
    `decoding_bytes`: its sentences at a typical length, each with its beam), before the slow
    work: a beam no memory could hold is one line, not a process the kernel ends. A batch holds
    no more sentences than the split has, whatever data.eval_max_tokens allows."""
    tokens = min(cfg.data.eval_max_tokens, max(1, examples) * source_length(cfg))
    bounded = replace(cfg, data=replace(cfg.data, eval_max_tokens=tokens))
    check_inference_memory(
        decoding_bytes(bounded, vocab),
        device,
        f"decoding {name} with decoding.beam={cfg.decoding.beam}",
        "the beam or the batch budget",
    )


def _prepare_split(
    cfg: TrainConfig,
    overrides: list[str],
    split: str,
    dataset_split: bool,
    tokenizers: TokenizerPair,
    option: str,
) -> tuple[str, PreparedData]:
    """(name, data) of the split to evaluate: a split of the dataset, or a file's pairs named
    after the file, read through `checkpoint_data`; `option` is what messages call the split
    argument."""
    if dataset_split:
        name, pairs = split, None
    else:
        name = Path(split).name.replace(".", "_") or "file"
        try:
            pairs = {name: load_pairs_from_path(split, cfg.data)}
        except NoDataAtPath:
            if "/" in split or os.sep in split:
                raise
            # a bare name that names no file either: most likely a split name mistyped
            names = ", ".join(dict.fromkeys([*NAMED_SPLITS, *cfg.data.splits]))
            raise UserError(
                f"unknown split {split!r}: the checkpoint's data ({cfg.data.name}) has the "
                f"splits {names}; {option} also takes a data file (.jsonl, .tsv or a parallel "
                f"prefix), and there is none at {split} or under the data root"
            ) from None
    data = checkpoint_data(
        cfg,
        tokenizers,
        [name],
        overridden_keys(overrides),
        pairs=pairs,
        reads_dataset=dataset_split,
        local_file=f"{option} PATH",
    )
    if name not in data.examples:
        raise UserError(f"unknown split {split!r}; this dataset has: {', '.join(data.examples)}")
    return name, data


def _save_eval_attention(
    path: Path,
    cfg: TrainConfig,
    model: Seq2Seq,
    evaluator: Evaluator,
    decoded: list[Hypothesis],
    data: PreparedData,
    split: str,
) -> None:
    """`attnseq eval --save-attention`: the cross-attention of every hypothesis, to `path`
    (hierarchical models: with the segment attention, alignment/segments.py)."""
    tokenizers = data.tokenizers
    segment_maps = None
    if is_hierarchical(model):
        outputs = [
            (list(h.tokens), 0 if h.attention is None else int(h.attention.shape[-2]))
            for h in decoded
        ]
        sources = [src for src, _ in evaluator.examples]
        segment_maps = hypothesis_segment_maps(model, sources, outputs, evaluator.extended)
    saved = write_saved_attention(
        path,
        records_from_hypotheses(
            decoded,
            evaluator.examples,
            data.pairs[split],
            tokenizers.src,
            tokenizers.tgt,
            model.eos_id,
            extended=evaluator.extended,
            segment_maps=segment_maps,
        ),
        split=split,
        family=cfg.model.family.value,
        beam=evaluator.decoding.beam,
        length_penalty=evaluator.decoding.length_penalty,
        src_kind=type(tokenizers.src).kind,
        tgt_kind=type(tokenizers.tgt).kind,
    )
    print(f"cross-attention of {len(decoded)} hypotheses: {saved}")
