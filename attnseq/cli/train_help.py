"""`attnseq train --help`: Hydra's application help, rendered without Hydra's slow path.

Hydra's own `--help` lists the options of every config group by asking its config loader once
per group, Hydra's internal groups included (each request copies the whole config repository):
about a second, longer than the rest of the command. The groups of attnseq's packaged configs
are the folders of `CONFIG_DIR`, so this module lists them from the file tree and fills the
same template (`hydra.help` in train.yaml) with the same composed config: the same text, in a
fraction of the time. Anything it does not reproduce (other flags, a template that asks for
Hydra's own flags or groups, an extra search path) is left to Hydra.
"""

import string

from attnseq.config import CONFIG_DIR

HELP_FLAGS = {"--help", "-h"}
_HANDLED_FLAGS = HELP_FLAGS | {"--resolve"}
_HYDRA_ONLY = ("$FLAGS_HELP", "${FLAGS_HELP}", "$HYDRA_CONFIG_GROUPS", "${HYDRA_CONFIG_GROUPS}")


def config_groups() -> str:
    """`group: option, option` for every folder of YAML configs, as Hydra's help lists them."""
    lines = []
    for folder in sorted(path for path in CONFIG_DIR.rglob("*") if path.is_dir()):
        options = sorted(path.stem for path in folder.glob("*.yaml"))
        if options:
            lines.append(f"{folder.relative_to(CONFIG_DIR).as_posix()}: {', '.join(options)}\n")
    return "".join(lines)


def train_help(args: list[str]) -> str | None:
    """The help text for `attnseq train ARGS` (ARGS holding --help), or None for Hydra's.

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

    from attnseq.cli.config_errors import describe_composition_error
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
