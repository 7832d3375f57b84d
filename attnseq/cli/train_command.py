"""`attnseq train`: every argument is a Hydra override or flag, handed to the Hydra entry;
`--help` is Hydra's application help, rendered from the file tree."""

import shutil
import string
import textwrap

import typer
from typer.core import TyperCommand

from attnseq.cli.doctor import print_version
from attnseq.cli.user_errors import user_errors
from attnseq.config import CONFIG_DIR

HELP_FLAGS = {"--help", "-h"}
_HANDLED_FLAGS = HELP_FLAGS | {"--resolve"}
_HYDRA_ONLY = ("$FLAGS_HELP", "${FLAGS_HELP}", "$HYDRA_CONFIG_GROUPS", "${HYDRA_CONFIG_GROUPS}")


class TrainCommand(TyperCommand):
    """`attnseq train`: its arguments are Hydra overrides, completed by Hydra."""

    def shell_complete(self, ctx, incomplete):  # noqa: ANN001, ANN201  (click's signature)
        from typer.core import CompletionItem

        from attnseq.cli.completion import shell_word, train_completions

        matches = train_completions(list(ctx.args), shell_word(incomplete))
        return [CompletionItem(match) for match in matches]


def train(ctx: typer.Context) -> None:
    """Train a model. Every argument is a Hydra override or flag (see `attnseq train --help`).

    \b
    attnseq train                                   # the embedded default, offline
    attnseq train config=reverse_rnn_luong          # packaged configs/experiment/NAME.yaml
    attnseq train config=path/to/my.yaml            # your own experiment file
    attnseq train model.hidden=256 optim.lr=3e-4    # any override
    attnseq train -m data=reverse,copy trainer.max_steps=50   # multirun sweep
    attnseq train --cfg job                         # print the composed config
    """
    args = list(ctx.args)
    if "--version" in args:  # Hydra's own would print only Hydra's version
        print_version(True)
    completion = _shell_completion_request(args)
    if completion is not None:
        from attnseq.cli.completion import shell_completion

        with user_errors():
            typer.echo(shell_completion(completion))
        return
    from attnseq.cli import hydra_entry
    from attnseq.cli.hydra_entry import split_flags
    from attnseq.cli.preflight import check_flags
    from attnseq.config.composition import rewrite_config_selector

    with user_errors():
        args = rewrite_config_selector(args)
        help_text = train_help(args)
        if help_text is not None:
            typer.echo(help_text)
            return
        flags, overrides = split_flags(args)
        check_flags(flags)
        if "--hydra-help" in flags:
            # Hydra composes its own config alone for its help: a key of attnseq's config
            # would be unknown there, and nothing in that help depends on one
            hydra_only = [arg for arg in overrides if arg.lstrip("+~").startswith("hydra")]
            args = [*flags, *hydra_only]
        hydra_entry.run_hydra(args)  # the config is checked once composed (preflight.py)


def _shell_completion_request(args: list[str]) -> str | None:
    """The value of Hydra's `-sc/--shell-completion` flag (`install=bash`), if given."""
    for position, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in ("-sc", "--shell-completion"):
            if equals:
                return value
            return args[position + 1] if position + 1 < len(args) else ""
    return None


def config_groups() -> str:
    """`group: option, option` for every folder of YAML configs, as Hydra's help lists them,
    wrapped to the terminal's width (at most 100 columns)."""
    width = min(shutil.get_terminal_size().columns, 100)  # COLUMNS, as Click's help reads it
    lines = []
    for folder in sorted(path for path in CONFIG_DIR.rglob("*") if path.is_dir()):
        options = sorted(path.stem for path in folder.glob("*.yaml"))
        if options:
            line = f"{folder.relative_to(CONFIG_DIR).as_posix()}: {', '.join(options)}"
            wrapped = textwrap.fill(
                line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
            )
            lines.append(wrapped + "\n")
    return "".join(lines)


def train_help(args: list[str]) -> str | None:
    """The help text for `attnseq train ARGS` (ARGS holding --help), or None for Hydra's:
    Hydra's template (`hydra.help` in train.yaml) filled with the packaged config groups, read
    from the file tree, where Hydra's own help asks its config loader once per group.

    Overrides that do not compose raise UserError, as they would for a run.
    """
    flags = [arg for arg in args if arg.startswith("-")]
    overrides = [arg for arg in args if not arg.startswith("-")]
    if not HELP_FLAGS & set(flags) or set(flags) - _HANDLED_FLAGS:
        return None
    if any(arg.lstrip("+~").startswith("hydra.searchpath") for arg in overrides):
        return None  # groups from another folder: only Hydra's loader sees them
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, flag_override
    from omegaconf.errors import OmegaConfBaseException

    from attnseq.config.composition import describe_composition_error
    from attnseq.config.schema import register_configs
    from attnseq.errors import UserError

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("train", overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        raise UserError(describe_composition_error(error, overrides)) from None
    template = str(cfg.hydra.help.template)
    if any(name in template for name in _HYDRA_ONLY):
        return None
    with flag_override(cfg, ["struct", "readonly"], False):
        del cfg["hydra"]
    config = OmegaConf.to_yaml(cfg, resolve="--resolve" in flags)
    return string.Template(template).substitute(APP_CONFIG_GROUPS=config_groups(), CONFIG=config)
