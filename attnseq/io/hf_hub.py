"""`hf:ORG/NAME[@REVISION]`: a model of the Hugging Face Hub as a local folder, through
huggingface_hub's cache (downloaded into it first when the machine is online, read from it when
offline: HF_HUB_OFFLINE=1 or no network)."""

import os
import re
from pathlib import Path

from attnseq.errors import UserError

HUB_PREFIX = "hf:"
# what a model folder needs: config, weights and tokenizer files, nothing else of the repository
MODEL_FILES = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model.bin",
    "*.spm",
    "*vocab*.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
# a repository id: NAME or ORG/NAME, as the Hub spells them
_REPO_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def is_hub_id(path: str | Path) -> bool:
    """Whether `path` is spelled as a Hub model, hf:ORG/NAME[@REVISION]."""
    return os.fspath(path).startswith(HUB_PREFIX)


def parse_hub_id(text: str | Path) -> tuple[str, str | None]:
    """(repository, revision or None) of hf:ORG/NAME[@REVISION]; UserError when it is none."""
    spelled = os.fspath(text)
    repo, _, revision = spelled.removeprefix(HUB_PREFIX).partition("@")
    if not _REPO_ID.fullmatch(repo) or ".." in repo or ("@" in spelled and not revision):
        raise UserError(
            f"{spelled} is not a Hugging Face model id: write hf:ORG/NAME or hf:ORG/NAME@REVISION "
            "(e.g. hf:Helsinki-NLP/opus-mt-de-en)"
        )
    return repo, revision or None


def cache_location() -> str:
    """Where huggingface_hub keeps its downloads (HF_HUB_CACHE, else HF_HOME/hub)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def hub_folder(text: str | Path, offline: bool | None = None) -> Path:
    """The local folder of the model hf:ORG/NAME[@REVISION]: its snapshot in the cache,
    downloaded first when the Hub can be reached (only the files a model folder needs).

    Args:
        offline: read the cache only; None = huggingface_hub's setting (HF_HUB_OFFLINE).

    Raises:
        UserError: not a model id, huggingface_hub missing, the model or revision unknown,
            or not in the cache when the Hub cannot be reached (the message says where the
            cache is and how to fill it).
    """
    repo, revision = parse_hub_id(text)
    try:
        import huggingface_hub
        from huggingface_hub import constants, errors
    except ImportError:
        raise UserError(
            f"{text}: reading models of the Hugging Face Hub needs huggingface_hub: "
            "pip install 'attnseq[hf]'"
        ) from None
    local_only = constants.HF_HUB_OFFLINE if offline is None else offline
    # a partly downloaded snapshot: huggingface_hub 2 says so, earlier ones say "not found"
    incomplete = getattr(errors, "IncompleteSnapshotError", errors.LocalEntryNotFoundError)
    try:
        folder = huggingface_hub.snapshot_download(
            repo, revision=revision, allow_patterns=MODEL_FILES, local_files_only=local_only
        )
    except (errors.LocalEntryNotFoundError, incomplete):
        raise UserError(_not_cached(os.fspath(text), repo)) from None
    except (errors.RepositoryNotFoundError, errors.GatedRepoError) as error:
        raise UserError(
            f"{text}: the Hub has no model {repo} that this machine may read ({error})"
        ) from None
    except errors.RevisionNotFoundError:
        raise UserError(f"{text}: the model {repo} has no revision {revision}") from None
    except errors.HfHubHTTPError as error:
        raise UserError(f"{text}: the Hub refused the download ({error})") from None
    return Path(folder)


def _not_cached(text: str, repo: str) -> str:
    return (
        f"{text} is not in the Hugging Face cache ({cache_location()}; HF_HOME or HF_HUB_CACHE "
        "set where it is) and the Hub cannot be reached from here: on a machine with network, "
        f"run `huggingface-cli download {repo}` with the same cache, then copy the cache here, "
        "or pass the model's folder instead"
    )
