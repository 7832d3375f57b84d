"""Decoding with CTranslate2 (`attnseq translate --engine ctranslate2 FOLDER`): a folder written
by `attnseq export` (models/ctranslate2_export.py), decoded by `ctranslate2.Translator` as a
backend of decoding/translate.py's `TextTranslator`, so the input and output rules are that
loop's. It searches (greedy or beam search), never samples. The settings map onto the engine's
options; where its length penalty, coverage penalty, scores and attention differ from
attnseq's searches is listed in docs/internals/decoding.md.
"""

import json
from pathlib import Path
from typing import Any

import torch

from attnseq.config.conversion import config_from_dict
from attnseq.config.devices import DEVICE_FORMS, check_device_name
from attnseq.config.schema import DecodingConfig
from attnseq.data.tokenizers import TokenizerPair
from attnseq.decoding.settings import Hypothesis
from attnseq.decoding.translate import SourceBatch, TextTranslator
from attnseq.errors import UserError
from attnseq.models.ctranslate2_export import (
    EXPORT_FILE,
    import_ctranslate2,
    vocabulary_tokens,
)


class CTranslate2Translator(TextTranslator):
    """An exported model folder, ready to decode text with CTranslate2.

    Args:
        folder: the export folder.
        device: auto, cpu, cuda or cuda:N (CTranslate2 has no mps).
        compute_type: the engine's weight/compute type ("default": as exported; "int8",
            "float32", "float16", "int8_float16", ...).
        overrides: key=value changes of the stored config (decoding settings).
        threads: the engine's CPU threads per translation (0: its default).
    """

    def __init__(
        self,
        folder: Path,
        device: str = "auto",
        compute_type: str = "default",
        overrides: list[str] | None = None,
        threads: int = 0,
    ) -> None:
        stored = _read_export(folder)
        self.cfg = config_from_dict(stored["config"], overrides)
        self.tokenizers = TokenizerPair.from_state(stored["tokenizers"])
        self.position_limit = int(stored["position_limit"])
        self.src_tokens = vocabulary_tokens(self.tokenizers.src)
        target = vocabulary_tokens(self.tokenizers.tgt)
        self.tgt_ids = {token: index for index, token in enumerate(target)}
        # what attnseq never generates: <pad>, and the start token unless it is EOS (BART's)
        tgt = self.tokenizers.tgt
        never = [tgt.pad_id] + ([tgt.bos_id] if tgt.bos_id != tgt.eos_id else [])
        self.suppressed = [[target[index]] for index in never]
        self.target_tokens = target
        ctranslate2 = import_ctranslate2()
        self.device, self.compute_type = engine_device(device, ctranslate2), compute_type
        try:
            self.engine = ctranslate2.Translator(
                str(folder),
                device=self.device.type,
                device_index=self.device.index or 0,
                compute_type=compute_type,
                intra_threads=threads,
            )
        except (RuntimeError, ValueError) as error:
            raise UserError(f"ctranslate2 cannot load {folder}: {error}") from None

    def check(self, settings: DecodingConfig, batch_size: int) -> None:
        """UserError for settings out of range, a batch size below 1, or sampling (the engine
        searches: greedy or beam search)."""
        super().check(settings, batch_size)
        if settings.sample:
            raise UserError(
                "the CTranslate2 engine decodes with greedy or beam search: it does not sample"
            )

    def _decode_batch(self, batch: SourceBatch) -> list[list[Hypothesis]]:
        """One batch through the engine: the n-best list of each source. `batch.extended` is
        empty and `batch.generator` None: exports hold no copy models, and the engine never
        samples. The engine takes one output limit per batch: it decodes up to the batch's
        largest ratio * S + extra and each output is cut to its own limit afterwards (for
        greedy decoding exactly attnseq's rule); PAD and BOS are suppressed."""
        sources, settings, attention = batch.sources, batch.settings, batch.attention
        limits = [
            int(len(ids) * settings.max_output_ratio) + settings.max_output_extra for ids in sources
        ]
        # the target position table holds position_limit rows; BOS takes position 0
        longest = min(max(limits), self.position_limit - 1)
        results = self.engine.translate_batch(
            [[self.src_tokens[i] for i in ids] for ids in sources],
            beam_size=settings.beam,
            num_hypotheses=settings.nbest,
            length_penalty=settings.length_penalty,
            coverage_penalty=settings.coverage_penalty,
            no_repeat_ngram_size=settings.no_repeat_ngram,
            min_decoding_length=settings.min_length,
            max_decoding_length=max(longest, 1),
            suppress_sequences=self.suppressed,
            return_scores=True,
            return_attention=attention,
            target_prefix=self._forced_prefix(settings, len(sources)),
        )
        return [
            [self._hypothesis(result, k, limit, attention) for k in range(len(result.hypotheses))]
            for result, limit in zip(results, limits, strict=True)
        ]

    def _forced_prefix(self, settings: DecodingConfig, count: int) -> list[list[str]] | None:
        """decoding.forced_first_token (BART's <s>) as every output's first token."""
        forced = settings.forced_first_token
        return None if forced is None else [[self.target_tokens[forced]]] * count

    def _hypothesis(self, result: Any, k: int, limit: int, attention: bool) -> Hypothesis:
        tokens = [self.tgt_ids[token] for token in result.hypotheses[k]][:limit]
        weights = None
        if attention:
            rows = torch.tensor(result.attention[k], dtype=torch.float32)  # (T_out, S)
            weights = rows[: len(tokens) + 1][None, None]  # (1, 1, T_out, S)
        score = float(result.scores[k])
        return Hypothesis(tokens, score, weights, normalized_score=score)


def _read_export(folder: Path) -> dict[str, Any]:
    """attnseq_export.json of an export folder (UserError when it is none)."""
    path = folder / EXPORT_FILE
    if not folder.is_dir() or not path.is_file():
        raise UserError(
            f"{folder} is not a CTranslate2 export of attnseq (no {EXPORT_FILE}); write one "
            "with `attnseq export CHECKPOINT FOLDER`"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path} cannot be read: {error}") from None


def engine_device(name: str, ctranslate2: Any) -> torch.device:
    """The device CTranslate2 runs on for `name` (torch's spelling), checked against the GPUs
    CTranslate2 itself sees (its CUDA build may differ from torch's).

    Raises:
        UserError: not a device, mps, or a CUDA device CTranslate2 lacks here.
    """
    name = check_device_name(name)
    gpus = ctranslate2.get_cuda_device_count()
    if name == "auto":
        return torch.device("cuda" if gpus > 0 else "cpu")
    device = torch.device(name)
    if device.type == "mps":
        raise UserError("device=mps: CTranslate2 runs on cpu or cuda; decode on mps with torch")
    if device.type == "cuda" and (device.index or 0) >= gpus:
        raise UserError(
            f"device={name} but CTranslate2 sees {gpus} CUDA device(s) here; "
            f"valid forms: {DEVICE_FORMS}"
        )
    return device
