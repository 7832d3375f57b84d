"""Shell completion of `attnseq train`'s Hydra overrides, from Hydra's own completion asked
in-process."""

import os

from attnseq.config import CONFIG_DIR


def _completion_plugin():  # -> hydra.plugins.completion_plugin.CompletionPlugin
    from hydra._internal.core_plugins.bash_completion import BashCompletion
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    from attnseq.config.schema import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2(
        task_name="train", config_search_path=create_config_search_path(str(CONFIG_DIR))
    )
    return BashCompletion(hydra.config_loader)


def _experiments() -> list[str]:
    return sorted(path.stem for path in (CONFIG_DIR / "experiment").glob("*.yaml"))


def train_completions(args: list[str], incomplete: str) -> list[str]:
    """Completions of `incomplete` after the words `args` of `attnseq train ARGS`: Hydra's
    (groups, options, config keys) and attnseq's own `config=EXPERIMENT`.

    A shell that splits `key=value` at "=" (bash with "=" in COMP_WORDBREAKS) passes the key,
    "=" and the value as separate words: they are joined again for Hydra, and each completion
    is cut to the part the shell replaces (what follows the "=").
    """
    words, full, cut = list(args), incomplete, 0
    if full == "=" and words:  # the shell replaces what follows the "=": nothing yet
        full = words.pop() + full
        cut = len(full)
    elif len(words) >= 2 and words[-1] == "=":
        full = words[-2] + "=" + full
        words = words[:-2]
        cut = len(full) - len(incomplete)
    matches = [f"config={name}" for name in _experiments()] if "=" in full else ["config="]
    matches = [match for match in matches if match.startswith(full) and match != full]
    if not full.startswith("config="):
        matches += _hydra_matches(words, full)
    return sorted({match[cut:] for match in matches})


def _hydra_matches(words: list[str], word: str) -> list[str]:
    from hydra.core.global_hydra import GlobalHydra

    try:
        return _completion_plugin()._query(config_name="train", line=" ".join([*words, word]))
    except Exception:  # noqa: BLE001  a completion that fails offers nothing, not a traceback
        return []
    finally:
        GlobalHydra.instance().clear()


def query(shell: str) -> str:
    """Hydra's `-sc query=SHELL`: completions of COMP_LINE (`attnseq train ...`), one line."""
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    after = words[2:] if len(words) > 1 and words[1] == "train" else words[1:]
    if line.endswith(" "):
        args, incomplete = after, ""
    else:
        args, incomplete = after[:-1], (after[-1] if after else "")
    return " ".join(train_completions(args, incomplete))


def shell_word(incomplete: str) -> str:
    """The word being completed as the shell sent it. Click turns a lone "=" into "", but
    after `key=` bash's current word is "=" and its completions must start with it."""
    words, position = os.environ.get("COMP_WORDS"), os.environ.get("COMP_CWORD", "")
    if incomplete or words is None or not position.isdigit():
        return incomplete
    split = words.split()
    index = int(position)
    return "=" if index < len(split) and split[index] == "=" else incomplete


# Typer's bash script, plus: no space after a completed Hydra key (`model.hidden=`, `model.`)
# or group path (`hydra/`), which the user goes on typing, as in Hydra's own script.
_BASH_SCRIPT = """
%(complete_func)s() {
    local IFS=$'\\n'
    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \\
                   COMP_CWORD=$COMP_CWORD \\
                   %(autocomplete_var)s=complete_bash $1 ) )
    if [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *[=/.] ]]; then
        compopt -o nospace
    fi
    return 0
}

complete -o default -F %(complete_func)s %(prog_name)s
"""


def install_bash_script() -> None:
    """Make `--show-completion bash` and `--install-completion bash` print `_BASH_SCRIPT`."""
    from typer import _completion_classes, _completion_shared

    _completion_shared._completion_scripts["bash"] = _BASH_SCRIPT
    _completion_classes.BashComplete.source_template = _BASH_SCRIPT


def shell_completion(request: str) -> str:
    """Hydra's `-sc` flag under `attnseq train`: `install=SHELL` prints the script that
    completes every attnseq command (train's overrides included), `uninstall=bash` the
    command that removes it, `query=SHELL` the completions of $COMP_LINE."""
    from typer._completion_shared import get_completion_script

    from attnseq.errors import UserError

    action, _, shell = request.partition("=")
    if action == "install" and shell:
        return get_completion_script(
            prog_name="attnseq", complete_var="_ATTNSEQ_COMPLETE", shell=shell
        )
    if action == "uninstall" and shell == "bash":
        return "complete -r attnseq"
    if action == "query" and shell:
        return query(shell)
    raise UserError(
        f"-sc {request}: expected install=SHELL, uninstall=bash or query=SHELL "
        "(SHELL: bash, zsh, fish)"
    )
