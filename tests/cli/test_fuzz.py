"""A fuzzer of every command of the command line, holding each invocation to the promise the
command line makes: a user's mistake ends with an `error:` line and exit status 2, never a
traceback; nothing the user gave as input is changed; nothing hangs.

The invocations come from the commands themselves: `typer.main.get_command(app)` lists them,
and each command's parameters (arguments and options: their types, choices, bounds, defaults,
metavars and help) decide what is tried, so a new command or option is fuzzed without an edit
here. Each case draws how many options it gives and how hostile it is; a parameter given gets a
plausible value (a checkpoint where a checkpoint is asked for, a sentence for --src TEXT, the
default, a metavar's alternative or a word of its own help for a string option), so that the
work behind the checks is reached, or a hostile one:

    numbers   -1, 0, 2**31, 10**20, nan, inf, 1e999, "", 1.5, an Arabic digit, hex, the bounds
    text      "", blanks, combining marks, right-to-left text, emoji, 5,000 characters, a lone
              surrogate (what argv holds for bytes that are not UTF-8: os.fsdecode(b"\\xff"))
    paths     missing, a folder, /dev/null, /dev/full, /proc/x.html, /proc/self/status, /sys, a
              named pipe, a 5,000-character name, a line break in a name, a file as a folder
              (src.txt/), symbolic links dangling or to themselves, a truncated checkpoint,
              every input (so an input given as the output, by its path or through a link)
    overrides keys of the config schema (attnseq/config/schema.py) set to such values

`attnseq train` takes Hydra overrides and flags: its cases are the tiny training of
helpers.TINY (one update: about a second) with one or two schema keys drawn, now and then a
Hydra flag; most are refused before training starts.

Each case runs in this process (helpers.attnseq_in_process) and must keep these promises: no
exception escapes and no "Traceback" is printed; the exit status is 0 or 2, or 1 where that is
documented (a training whose loss diverged, `doctor --verify-cache` finding a damaged cache
entry); exit status 2 comes with an `error:` line (Click's own usage errors say `Error:`); every
input keeps its bytes, the named pipe stays a pipe, the symbolic links their targets, and
/dev/null and /dev/full stay devices; the command answers within CASE_SECONDS (SIGALRM raises in
the command; a hang in C code that never returns to Python ends the test process after
BACKSTOP_FACTOR times that, naming the case). A case runs under a limit on the address space,
so that a command allocating tens of GB fails at once instead of taking the machine. The named
pipe gets a writer while a case that names it runs, as `<(...)` would give it.

Case N of a command is drawn by random.Random(f"{SEED}:{command}:{N}") and starts from the same
files (the workspace is put back after every case), so each is reproducible alone. A failure
prints the command line to paste into a shell (its files stay in pytest's temporary folder) and
the pytest line that runs that case again:

    ATTNSEQ_FUZZ_SEED=S ATTNSEQ_FUZZ_CASE=N python -m pytest -n 0 \\
        "tests/cli/test_fuzz.py::test_every_command_keeps_its_promise[COMMAND]"

The default run tries DEFAULT_CASES per command and DEFAULT_TRAIN_CASES trainings (about 100
cases, about 20 s on one core); `-m slow` tries SLOW_TOTAL; ATTNSEQ_FUZZ_SEED draws others.
"""

import contextlib
import dataclasses
import enum
import faulthandler
import json
import logging
import os
import random
import re
import shlex
import shutil
import signal
import stat
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
import yaml
from helpers import TINY, TINY_SIZES, attnseq_in_process, untrained_checkpoint

import attnseq
from attnseq.cli.app import app
from attnseq.config.conversion import config_to_dict
from attnseq.config.schema import TrainConfig

SEED = int(os.environ.get("ATTNSEQ_FUZZ_SEED", "0"))
ONLY_CASE = os.environ.get("ATTNSEQ_FUZZ_CASE")  # run only this case number
CASE_SECONDS = 60.0  # a case answers in about a second; a busy machine is slower
BACKSTOP_FACTOR = 3  # a case still running after this many CASE_SECONDS is stuck outside Python
ADDRESS_SPACE_HEADROOM = 6 * 1024**3  # bytes of address space a case may add to the process's

DEFAULT_CASES = 8  # per command other than train
DEFAULT_TRAIN_CASES = 4
OPTION_DRAWS = 128  # cases per command in which every option of the command is drawn
SLOW_TOTAL = 10_000  # -m slow: cases over all commands
SLOW_TRAIN_CASES = 300

COMMANDS: dict[str, Any] = dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
TRAIN = "train"
PACKAGE = Path(attnseq.__file__).parent  # whose frames a failure shows


# ------------------------------------------------------------------------------ values
SURROGATE = os.fsdecode(b"\xff\xfe")  # what argv holds for bytes that are not UTF-8
NOT_UTF8 = os.fsdecode(b"caf\xe9.pt")  # a checkpoint whose name is Latin-1
LONG = "x" * 5000
TEXTS = (
    "",
    " ",
    "\t",
    "a",
    "June 5, 2001",
    "e\u0301\u0301\u0301\u0301",
    "\u202eabc\u202c",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\U0001f600\U0001f9ea",
    SURROGATE,
    LONG,
    "-",
    "--",
    "nan",
    "0",
    "-1",
    "a\nb",
    "a,b,,c",
    ",",
    "${oc.env:HOME}",
    "'",
    '"',
    "\\",
)
INTS = (
    "-1",
    "0",
    "1",
    "2",
    "3",
    "7",
    "2147483648",
    "-2147483649",
    "100000000000000000000",
    "9" * 40,
    "nan",
    "inf",
    "",
    "1.5",
    "1e3",
    "\u0663",
    "+4",
    "-0",
    "0x10",
    " 5 ",
    "10**20",
)
FLOATS = (
    "-1",
    "0",
    "0.5",
    "1",
    "2.5",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "1e999",
    "-1e999",
    "1e-320",
    "",
    "abc",
    "1,5",
    "1_000",
    "0x1p-3",
)
SENTENCES = ("June 5, 2001", "4 May 2001", "2001-06-05", "March 3rd, 1998")
SUFFIXES = (".txt", ".png", ".svg", ".pdf", ".html", ".npz", ".pt", ".csv", ".json", "", ".PNG")
STDIN = ("June 5, 2001\n4 May 2001\n", "", "\n\n", b"caf\xe9\n", LONG + "\n", "a\rb\n", "x")

# Overrides after a checkpoint (eval, translate, heads): plausible ones, and odd forms.
PLAUSIBLE_OVERRIDES = (
    "decoding.beam=2",
    "decoding.length_penalty=0.6",
    "decoding.max_output_extra=3",
    "trainer.threads=1",
    "decoding.no_repeat_ngram=2",
    "data.test_size=5",
    "data.valid_size=5",
)
ODD_OVERRIDES = (
    "foo",
    "=",
    "=1",
    "~decoding.beam",
    "+trainer.extra=1",
    "decoding.beam",
    "decoding.beam=",
    "decoding.beam=[1,2]",
    "decoding.beam=${oc.env:HOME}",
    "model.hidden=8",
    "decoding.beam=1,2",
    "missing.pt",
    "hydra.run.dir=/proc/run",
    "data=reverse",
    "trainer=nope",
    "config=nope",
)
# Choices of `attnseq train` that reach other models, data and schedules.
PLAUSIBLE_TRAINING = (
    "model=transformer",
    "model=rnn_luong",
    "data=reverse",
    "data=copy",
    "decoding.beam=2",
    "optim.scheduler=cosine",
    "model.attention.score=general",
    "optim.label_smoothing=0.1",
)
HYDRA_FLAGS = (
    ["--cfg", "job"],
    ["--cfg", "nope"],
    ["--help"],
    ["--hydra-help"],
    ["-m"],
    ["--info"],
    ["-x"],
)

# Parameters (by name) that read an existing input: the workspace entries that fit them. The
# other path parameters are outputs: a plausible value is a fresh path in the case's folder.
PATH_HINTS = {
    "checkpoint": ("rnn.pt", "tf.pt", "tf.pt", "run", "link.pt", NOT_UTF8),
    "checkpoints": ("rnn.pt", "tf.pt", "run/checkpoints/best.pt", NOT_UTF8),
    "reverse": ("tf.pt", "rnn.pt"),
    "src": ("src.txt",),
    "tgt": ("tgt.txt",),
    "input_file": ("src.txt", "pipe"),
    "gold_src": ("src.txt",),
    "gold_tgt": ("tgt.txt",),
    "gold": ("gold.txt",),
    "gold_possible": ("gold.txt",),
    "alignments": ("gold.txt",),
    "from_saved": ("attention.npz",),
    "multirun_dir": ("sweep",),
    "systems": ("tgt.txt", "src.txt", "tgt.txt"),  # compare: hypothesis files
    "ref": ("tgt.txt",),
}
# Arguments of several values that a command needs at least this many of (compare: A and B)
AT_LEAST = {"systems": 2}
TEXT_HINTS = {"src": SENTENCES, "tgt": SENTENCES}  # string parameters that take a sentence
# What most invocations give (other hinted inputs, such as --gold, go with modes of their own)
MAIN_INPUTS = {"checkpoint", "checkpoints", "src", "tgt", "multirun_dir", "systems", "ref"}


# ----------------------------------------------------------------------- the parameters
@dataclasses.dataclass(frozen=True)
class Param:
    """What the fuzzer knows of one parameter of a command, read from its Click object."""

    name: str
    flags: tuple[str, ...]  # the option's spellings ("--no-x" included); () for an argument
    kind: str  # int, float, str, path, bool or choice
    many: bool  # takes several values (an argument of nargs=-1)
    required: bool
    choices: tuple[str, ...]
    bounds: tuple[float | None, float | None]
    help: str
    default: Any  # what the command takes when the parameter is left out
    metavar: str  # how the help names the value; "N|auto" lists what it takes


def _kind(annotation: Any) -> str:
    """The kind of value a Python annotation (the element type of a list) takes."""
    for kind, base in (("bool", bool), ("int", int), ("float", float), ("path", os.PathLike)):
        if isinstance(annotation, type) and issubclass(annotation, base):
            return kind
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "choice"
    return "str"


# the kind of value of a plain Click parameter, by the name of its type
_CLICK_KINDS = {
    "integer": "int",
    "integer range": "int",
    "float": "float",
    "float range": "float",
    "boolean": "bool",
    "choice": "choice",
    "path": "path",
    "filename": "path",
    "file": "path",
}


def command_params(command: Any) -> list[Param]:
    """The parameters of a Click command: Typer's (whose type descriptor holds the Python
    annotation) or plain Click's (whose `type` says what it takes)."""
    params = []
    for param in command.params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is not None:
            annotation = descriptor.annotation
            if descriptor.is_list:
                annotation = (getattr(annotation, "__args__", None) or (str,))[0]
            kind = _kind(annotation)
            choices = tuple(
                str(choice.value if isinstance(choice, enum.Enum) else choice)
                for choice in (descriptor.choices or ())
            )
            if descriptor.is_choice and choices:
                kind = "choice"
            info = descriptor.parameter_info
            bounds = (getattr(info, "min", None), getattr(info, "max", None))
        else:
            kind = _CLICK_KINDS.get(param.type.name, "str")
            choices = tuple(str(choice) for choice in getattr(param.type, "choices", ()))
            bounds = (getattr(param.type, "min", None), getattr(param.type, "max", None))
        is_option = param.param_type_name == "option"
        if is_option and param.is_flag:
            kind = "bool"
        params.append(
            Param(
                name=param.name,
                flags=(*param.opts, *param.secondary_opts) if is_option else (),
                kind=kind,
                many=param.nargs == -1 or bool(param.multiple),
                required=bool(param.required),
                choices=choices,
                bounds=bounds,
                help=getattr(param, "help", None) or "",
                default=param.default,
                metavar=param.metavar or "",
            )
        )
    return params


def _schema_keys() -> list[tuple[str, Any]]:
    """(dotted key, default value) of every setting of the training config."""

    def walk(tree: dict, prefix: str) -> Iterator[tuple[str, Any]]:
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from walk(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    return list(walk(config_to_dict(TrainConfig()), ""))


SCHEMA_KEYS = _schema_keys()
RUN_KEYS = [
    (key, default) for key, default in SCHEMA_KEYS if key.startswith(("decoding.", "trainer."))
]


# --------------------------------------------------------------------------- workspace
@dataclasses.dataclass
class Workspace:
    """What every case may be given (checkpoints, texts, gold links, saved attention, a sweep,
    a named pipe, symbolic links) with their contents as made, and the environment (a cache
    folder and a data root of their own)."""

    inputs: Path
    env: dict[str, str]
    pristine: dict[Path, bytes]  # every input file: its bytes
    links: dict[Path, str]  # every symbolic link: its target
    fifo: Path

    def entry(self, name: str) -> str:
        return str(self.inputs / name)

    def odd_paths(self, scratch: Path) -> list[str]:
        """Paths that are no plain file to read or write, and every input."""
        return [
            str(self.inputs / "missing.txt"),
            str(self.inputs / "no" / "such" / "folder" / "out.png"),
            str(self.inputs),
            str(scratch),
            "/dev/null",
            "/dev/full",
            "/proc/x.html",
            "/proc/self/status",
            "/sys/x.png",
            str(self.fifo),
            LONG,
            str(scratch / LONG[:300] / "x.png"),
            str(self.inputs / "dangling.pt"),
            "",
            "-",
            ".",
            str(scratch / os.fsdecode(b"\xff.txt")),
            str(scratch / "\u01d8\u202e\U0001f600.png"),
            str(scratch / "line\nbreak.png"),
            str(self.inputs / "src.txt") + "/",
            *(str(path) for path in self.pristine),
            *(str(path) for path in self.links),
        ]


def _write_sweep(folder: Path) -> None:
    """A hand-made multirun folder: two finished jobs and one without metrics.json."""
    folder.mkdir(parents=True)
    (folder / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "test/bleu"}))
    for number, (lr, bleu) in enumerate([(0.001, 20.0), (0.0003, 30.5), (0.01, None)]):
        job = folder / str(number)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"optim.lr={lr}"]))
        if bleu is not None:
            (job / "metrics.json").write_text(json.dumps({"test/bleu": bleu, "test/loss": 1.0}))


def make_workspace(root: Path) -> Workspace:
    """Untrained tiny checkpoints (a GRU with Bahdanau attention, a transformer, a copy of it
    under a Latin-1 name), a run directory, texts (parallel dates, one line, not UTF-8, CRLF,
    5,000 characters, blank lines, empty), gold links, attention saved by
    `eval --save-attention`, a sweep, a named pipe and symbolic links (to a checkpoint, to
    nothing, to itself), a truncated checkpoint."""
    inputs = root / "inputs"
    inputs.mkdir(parents=True)
    env = {"ATTNSEQ_CACHE": str(root / "cache"), "ATTNSEQ_DATA": str(root / "data")}
    untrained_checkpoint(inputs / "rnn.pt")
    untrained_checkpoint(inputs / "tf.pt", "model.family=transformer")
    (inputs / "run" / "checkpoints").mkdir(parents=True)
    (inputs / "run" / ".hydra").mkdir()
    shutil.copyfile(inputs / "rnn.pt", inputs / "run" / "checkpoints" / "best.pt")
    shutil.copyfile(inputs / "tf.pt", inputs / NOT_UTF8)
    texts = {
        "src.txt": "June 5, 2001\n4 May 2001\nMarch 3rd, 1998\n",
        "tgt.txt": "2001-06-05\n2001-05-04\n1998-03-03\n",
        "gold.txt": "0-0 1-0\n0-0 2-0\n0-0 1?0 2-0\n",
        "one.txt": "June 5, 2001\n",
        "crlf.txt": "June 5, 2001\r\n4 May 2001\r\n",
        "long.txt": LONG + "\n",
        "blank.txt": "\n \n\n",
    }
    for name, text in texts.items():
        (inputs / name).write_text(text, encoding="utf-8")
    (inputs / "latin1.txt").write_bytes(b"caf\xe9 June 5\n")
    (inputs / "empty.txt").write_bytes(b"")
    saved = root / "saved"
    result = attnseq_in_process(
        "eval",
        str(inputs / "tf.pt"),
        "--save-attention",
        "--out",
        str(saved),
        "--threads",
        "1",
        "data.test_size=3",
        cwd=root,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    shutil.copyfile(next(saved.rglob("attention.npz")), inputs / "attention.npz")
    _write_sweep(inputs / "sweep")
    (inputs / "link.pt").symlink_to(inputs / "rnn.pt")
    (inputs / "dangling.pt").symlink_to(inputs / "gone.pt")
    (inputs / "loop.pt").symlink_to(inputs / "loop.pt")
    whole = (inputs / "tf.pt").read_bytes()
    (inputs / "truncated.pt").write_bytes(whole[: len(whole) // 2])
    fifo = inputs / "pipe"
    os.mkfifo(fifo)
    pristine = {path: path.read_bytes() for path in sorted(inputs.rglob("*")) if _regular(path)}
    links = {path: os.readlink(path) for path in sorted(inputs.rglob("*")) if path.is_symlink()}
    return Workspace(inputs, env, pristine, links, fifo)


def _regular(path: Path) -> bool:
    return stat.S_ISREG(path.lstat().st_mode)


# ------------------------------------------------------------------------------ cases
@dataclasses.dataclass(frozen=True)
class Case:
    """One invocation: `attnseq ARGS` in `cwd`, with `stdin`; the paths it names as inputs
    (which must keep their bytes) and as outputs (which it may replace)."""

    command: str
    number: int
    args: tuple[str, ...]
    cwd: Path
    stdin: str | bytes = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def shell_line(self, env: dict[str, str]) -> str:
        """The command line to paste into a POSIX shell."""
        variables = " ".join(f"{key}={_shell_word(value)}" for key, value in env.items())
        words = " ".join(_shell_word(arg) for arg in self.args)
        line = f"cd {_shell_word(str(self.cwd))} && {variables} attnseq {words}"
        if self.stdin:
            text = self.stdin if isinstance(self.stdin, str) else os.fsdecode(self.stdin)
            line = f"printf %s {_shell_word(text)} | ({line})"
        return line

    def pytest_line(self) -> str:
        return (
            f"ATTNSEQ_FUZZ_SEED={SEED} ATTNSEQ_FUZZ_CASE={self.number} python -m pytest -n 0 "
            f"'tests/cli/test_fuzz.py::test_every_command_keeps_its_promise[{self.command}]'"
        )


_RUN = re.compile(r"([A-Za-z0-9])\1{99,}")  # a character repeated 100 times or more


def _shell_word(text: str) -> str:
    """`text` as one shell word: a long run of one character spelled by printf, bytes that are
    not printable ASCII as $'\\xNN'."""
    run = _RUN.search(text)
    if run is not None:
        head, tail = text[: run.start()], text[run.end() :]
        spelled = f'"$(printf %{len(run.group())}s "" | tr " " {run.group(1)})"'
        return (_shell_word(head) if head else "") + spelled + (_shell_word(tail) if tail else "")
    data = os.fsencode(text)
    if all(32 <= byte < 127 for byte in data):
        return shlex.quote(text)
    return _shell_bytes(data)


def _shell_bytes(data: bytes) -> str:
    escaped = (chr(b) if 32 <= b < 127 and chr(b) not in "'\\" else f"\\x{b:02x}" for b in data)
    return "$'" + "".join(escaped) + "'"


def _abbreviated(text: str) -> str:
    """`text` with each long run of one character written as its count."""
    return _RUN.sub(lambda run: f"{run.group(1)}...({len(run.group())} times)", text)


@dataclasses.dataclass(frozen=True)
class Mix:
    """How a case draws: the chance that an optional parameter is given, and that a value is
    hostile. Sparse, mild cases reach the work; dense, hostile ones the combinations."""

    given: float
    hostile: float

    @staticmethod
    def draw(rng: random.Random) -> "Mix":
        return Mix(rng.choice([0.05, 0.15, 0.3]), rng.choice([0.1, 0.25, 0.5]))


def _plain_text(rng: random.Random, param: Param) -> str:
    """What a string option plausibly takes: a sentence where it asks for one, its default,
    an alternative its metavar lists ("N|auto": a small number or auto), or a word of its help
    (where a plain string option names its choices), alone or two joined by a comma."""
    if param.name in TEXT_HINTS:
        return rng.choice(TEXT_HINTS[param.name])
    if isinstance(param.default, str) and param.default and rng.random() < 0.6:
        return param.default
    listed = param.metavar.split("|") if "|" in param.metavar else []
    if listed and rng.random() < 0.8:
        choice = rng.choice(listed)
        return str(rng.randint(1, 2)) if choice.isupper() else choice
    words = re.findall(r"[A-Za-z0-9][\w./-]*[A-Za-z0-9]|\b\w\b", param.help) or ["x"]
    if rng.random() < 0.2:
        return ",".join(rng.sample(words, min(2, len(words))))
    return rng.choice(words)


def _number(rng: random.Random, param: Param, hostile: bool) -> str:
    low, high = param.bounds
    if hostile:
        edges = [
            str(int(bound) + step)
            for bound in (low, high)
            if bound is not None
            for step in (-1, 0, 1)
        ]
        return rng.choice([*(INTS if param.kind == "int" else FLOATS), *edges])
    if param.kind == "int":
        return str(rng.randint(int(low) if low is not None else 0, 4))
    return rng.choice(["0", "0.5", "1", "1.5"])


def _config_value(rng: random.Random, default: Any) -> str:
    """A hostile value for a config key whose default is `default`, as an override spells it."""
    if isinstance(default, bool):
        pool: tuple[str, ...] = ("true", "false", "1", "maybe", "", "null")
    elif isinstance(default, int):
        pool = (*INTS, "null")
    elif isinstance(default, float):
        pool = (*FLOATS, "null")
    elif isinstance(default, list):
        pool = ("[]", "[1,2]", "[a]", "null", "[", "1")
    else:
        pool = (*TEXTS, *INTS[:6], "null")
    return rng.choice(pool)


def _override(rng: random.Random, hostile: bool) -> str:
    if not hostile:
        return rng.choice(PLAUSIBLE_OVERRIDES)
    if rng.random() < 0.3:
        return rng.choice(ODD_OVERRIDES)
    # a third of the keys from decoding.* and trainer.*: the settings a checkpoint's commands use
    keys = RUN_KEYS if rng.random() < 0.33 else SCHEMA_KEYS
    key, default = rng.choice(keys)
    return f"{key}={_config_value(rng, default)}"


def _value(rng: random.Random, mix: Mix, param: Param, ws: Workspace, scratch: Path) -> str:
    """One value of `param`: plausible (what the command is meant to get) or hostile."""
    hostile = rng.random() < mix.hostile
    if param.kind == "path":
        if hostile:
            return rng.choice(ws.odd_paths(scratch))
        if param.name in PATH_HINTS:
            return ws.entry(rng.choice(PATH_HINTS[param.name]))
        folder = scratch / rng.choice(["", "", "new/", "new/deeper/"])
        return str(folder / f"out{rng.choice(SUFFIXES)}")
    if param.kind in ("int", "float"):
        return _number(rng, param, hostile)
    if param.kind == "choice":
        return rng.choice(TEXTS) if hostile else rng.choice(param.choices)
    if param.name == "overrides":
        return _override(rng, hostile)
    if hostile:
        return rng.choice([*TEXTS, *INTS[:8], *FLOATS[5:9]])
    return _plain_text(rng, param)


def _given(rng: random.Random, mix: Mix, param: Param) -> bool:
    """Whether a case gives `param`: nearly always when it is required, mostly when it is a
    main input (without one most commands stop at once), else as the case's mix says."""
    if param.required:
        return rng.random() < 0.97
    if param.name in MAIN_INPUTS:
        return rng.random() < 0.85
    return rng.random() < mix.given


def make_case(command: str, number: int, ws: Workspace, scratch: Path) -> Case:
    """Case `number` of `command`: each parameter given or not, with a drawn value, the
    options in a random order around the arguments, and now and then an option given twice,
    an unknown one or --help."""
    rng = random.Random(f"{SEED}:{command}:{number}")
    if command == TRAIN:
        return _train_case(rng, number, scratch)
    mix = Mix.draw(rng)
    positional: list[str] = []
    options: list[list[str]] = []
    inputs: list[str] = []
    outputs: list[str] = []
    for param in command_params(COMMANDS[command]):
        if not _given(rng, mix, param):
            continue
        count = rng.choice([1, 1, 2, 3]) if param.many else 1
        values = [_value(rng, mix, param, ws, scratch) for _ in range(count)]
        if param.many and param.kind == "path":  # the same input twice is one mistake of
            values = list(dict.fromkeys(values))  # its own, tested by each command's tests
            spare = [ws.entry(hint) for hint in PATH_HINTS.get(param.name, ())]
            spare = [value for value in dict.fromkeys(spare) if value not in values]
            values += spare[: max(0, AT_LEAST.get(param.name, 1) - len(values))]
        if param.kind == "path":
            (inputs if param.name in PATH_HINTS else outputs).extend(values)
        if not param.flags:  # an argument
            positional += values
        elif param.kind == "bool":
            options.append([rng.choice(param.flags)])
        elif rng.random() < 0.15:
            options.append([f"{param.flags[0]}={values[0]}"])
        else:
            options.append([param.flags[0], values[0]])
    if options and rng.random() < 0.05:
        options.append(rng.choice(options))
    if rng.random() < 0.04:
        options.append([rng.choice(["--no-such-option", "--help", "-x", "--"])])
    rng.shuffle(options)
    split = rng.randint(0, len(options))
    args = [arg for option in options[:split] for arg in option]
    args += positional + [arg for option in options[split:] for arg in option]
    stdin = rng.choice(STDIN)
    return Case(command, number, (command, *args), scratch, stdin, tuple(inputs), tuple(outputs))


def _train_case(rng: random.Random, number: int, scratch: Path) -> Case:
    """One update on 200 generated dates, with one or two overrides drawn (after TINY's, so
    they win) and now and then a Hydra flag."""
    tiny = [
        *TINY,
        "trainer.max_steps=1",
        "trainer.validate_every=1",
        "trainer.max_minutes=0.2",
        "trainer.progress=false",
        "logger=[]",
        f"hydra.run.dir={scratch / 'run'}",
    ]
    drawn = [
        _override(rng, True) if rng.random() < 0.7 else rng.choice(PLAUSIBLE_TRAINING)
        for _ in range(rng.choice([1, 1, 2]))
    ]
    if "model=transformer" in drawn:  # a run refuses the other family's sizes: give its own
        sizes = {arg for arg in TINY if arg.startswith("model.")}
        tiny = [arg for arg in tiny if arg not in sizes] + TINY_SIZES["transformer"]
    flags = rng.choice(HYDRA_FLAGS) if rng.random() < 0.1 else []
    return Case(TRAIN, number, (TRAIN, *flags, *tiny, *drawn), scratch)


# ------------------------------------------------------------------------ running a case
class CaseTimeout(BaseException):
    """Raised in the command by SIGALRM; a BaseException, so that no `except Exception` in
    the command takes it for an error of its own."""


@contextlib.contextmanager
def time_limit(seconds: float, case: Case, env: dict[str, str]) -> Iterator[None]:
    """CaseTimeout in the command after `seconds`. After BACKSTOP_FACTOR times that (stuck in C
    code that never returns to Python), the case and every thread's stack on stderr, and the
    process ends: nothing else would end such a test."""

    def on_alarm(signum: int, frame: object) -> None:
        raise CaseTimeout(f"no answer within {seconds:.0f} s")

    def backstop() -> None:
        sys.__stderr__.write(f"\nfuzz case stuck outside Python: {case.shell_line(env)}\n")
        faulthandler.dump_traceback(sys.__stderr__, all_threads=True)
        os._exit(70)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    watchdog = threading.Timer(seconds * BACKSTOP_FACTOR, backstop)
    watchdog.daemon = True
    watchdog.start()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        watchdog.cancel()


@contextlib.contextmanager
def address_space_limit() -> Iterator[None]:
    """At most ADDRESS_SPACE_HEADROOM more bytes of address space while a case runs (where
    /proc/self/status says how much the process has: Linux)."""
    import resource

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    size = re.search(r"VmSize:\s+(\d+) kB", status)
    if size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(size.group(1)) * 1024 + ADDRESS_SPACE_HEADROOM
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def fifo_writer(fifo: Path, text: bytes) -> Iterator[None]:
    """A writer of the named pipe while a case runs: whenever a reader has it open, `text` is
    written and the pipe closed, so the reader sees its end."""
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                stop.wait(0.02)
                continue
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.set_blocking(fd, True)
                    os.write(fd, text)
            except OSError:
                pass  # the reader went away
            finally:
                os.close(fd)
            stop.wait(0.05)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _tidy_after_command() -> None:
    """What a command may leave in this process: torch's thread count (tests run on one) and
    logging handlers on the runner's closed streams (conftest.py says why)."""
    torch.set_num_threads(1)
    for logger in (logging.getLogger(), logging.getLogger("attnseq")):
        for handler in list(logger.handlers):
            if getattr(getattr(handler, "stream", None), "closed", False):
                logger.removeHandler(handler)


def _allowed_failure(case: Case, stderr: str) -> bool:
    """Exit status 1 where it is documented: a training whose loss or weights diverged
    (attnseq/cli/hydra_entry.py), a damaged cache entry found by `doctor --verify-cache`."""
    if case.command == TRAIN:
        return "training diverged" in stderr or "became non-finite" in stderr
    return case.command == "doctor" and "damaged cache entr" in stderr


def _paths(values: tuple[str, ...]) -> set[Path]:
    """The paths `values` name, as given and resolved."""
    paths = set()
    for value in values:
        paths.add(Path(value))
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            paths.add(Path(value).resolve())
    return paths


# The devices the cases name, with their (major, minor) numbers on Linux.
DEVICES = {"/dev/null": (1, 3), "/dev/full": (1, 7)}


def _replaced_devices() -> list[str]:
    """/dev/null or /dev/full replaced by a file (only root can), named; root puts them back."""
    replaced = []
    for name, (major, minor) in DEVICES.items():
        with contextlib.suppress(OSError):
            if stat.S_ISCHR(os.lstat(name).st_mode):
                continue
        replaced.append(f"{name} is no longer a device: the command replaced it")
        if os.geteuid() == 0:
            fresh = f"{name}.attnseq-fuzz"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(fresh)
            os.mknod(fresh, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(fresh, 0o666)
            os.replace(fresh, name)
    return replaced


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _changed_inputs(ws: Workspace, case: Case) -> list[str]:
    """What the case did to the workspace other than to the paths it was told to write (its
    outputs that are not also its inputs), and to the devices; then the workspace is put back
    as it was made, so that every case starts from the same files."""
    writable = _paths(case.outputs) - _paths(case.inputs)
    changes = []
    for path, data in ws.pristine.items():
        try:
            now = path.read_bytes() if _regular(path) else None
        except OSError:
            now = None
        if now != data:
            if path not in writable:
                changes.append(f"input {path} was {'replaced' if now is None else 'changed'}")
            _remove(path)
            path.write_bytes(data)
    for path, target in ws.links.items():
        if not path.is_symlink() or os.readlink(path) != target:
            if path not in writable:
                changes.append(f"symbolic link {path} was replaced")
            _remove(path)
            path.symlink_to(target)
    if not ws.fifo.is_fifo():
        if ws.fifo not in writable:
            changes.append(f"named pipe {ws.fifo} was replaced")
        _remove(ws.fifo)
        os.mkfifo(ws.fifo)
    made = {*ws.pristine, *ws.links, ws.fifo}
    for path in sorted(ws.inputs.rglob("*"), reverse=True):  # what the case added
        if path not in made and not any(path in known.parents for known in made):
            _remove(path)
    return changes + _replaced_devices()


def _where(error: BaseException) -> str:
    """The last frames of attnseq's own code that `error` passed through, and the error."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).is_relative_to(PACKAGE)
    ][-6:]
    lines = traceback.format_list(frames) + traceback.format_exception_only(error)
    return "".join(lines).rstrip()


@dataclasses.dataclass
class Outcome:
    """What a case did: its exit status (None when it raised or hung), its standard error and
    the promises it broke, one line each."""

    case: Case
    status: int | None
    stderr: str
    problems: list[str]

    def report(self, env: dict[str, str]) -> str:
        """The broken promises, the end of stderr, and how to run the case again."""
        lines = [f"{self.case.command} case {self.case.number}", *self.problems]
        if self.stderr:
            lines.append(f"stderr ends: {self.stderr[-1500:].rstrip()}")
        lines = [_abbreviated("\n  ".join(lines))]
        lines += [f"reproduce: {self.case.shell_line(env)}", f"or: {self.case.pytest_line()}"]
        return "\n  ".join(lines)


def run_case(case: Case, ws: Workspace) -> Outcome:
    """Run one case and check its promises."""
    problems = []
    result = None
    uses_fifo = any(str(ws.fifo) in arg for arg in case.args)
    feeder = fifo_writer(ws.fifo, b"June 5, 2001\n") if uses_fifo else contextlib.nullcontext()
    try:
        with feeder, address_space_limit(), time_limit(CASE_SECONDS, case, ws.env):
            result = attnseq_in_process(*case.args, cwd=case.cwd, env=ws.env, input=case.stdin)  # type: ignore[arg-type]
    except CaseTimeout as timeout:
        problems.append(f"hang: {timeout}")
    except Exception as error:  # the runner re-raises what escaped the command
        if isinstance(error, MemoryError) or "can't allocate memory" in str(error):
            problems.append(
                f"more than {ADDRESS_SPACE_HEADROOM / 1024**3:.0f} GiB asked for: a size to "
                "refuse with one line before the work (or a real need; then raise the limit)"
            )
        problems.append("exception escaped:\n" + _where(error))
    finally:
        _tidy_after_command()
    status, stderr = (result.returncode, result.stderr) if result is not None else (None, "")
    if result is not None:
        if "Traceback" in result.stdout + stderr:
            problems.append("traceback printed")
        if status not in (0, 2) and not (status == 1 and _allowed_failure(case, stderr)):
            problems.append(f"exit status {status}")
        if status == 2 and not re.search(r"^(error|Error): \S", stderr, re.MULTILINE):
            problems.append("exit status 2 without an `error:` line")
    problems += _changed_inputs(ws, case)
    return Outcome(case, status, stderr, problems)


def fuzz(command: str, count: int, ws: Workspace, scratch: Path) -> list[Outcome]:
    """Run `count` cases of `command` (only case ATTNSEQ_FUZZ_CASE when that is set); fail
    with every broken promise and its command line."""
    numbers = [int(ONLY_CASE)] if ONLY_CASE is not None else range(count)
    outcomes = []
    for number in numbers:
        folder = scratch / f"case{number}"
        folder.mkdir()
        outcomes.append(run_case(make_case(command, number, ws, folder), ws))
    failures = [outcome.report(ws.env) for outcome in outcomes if outcome.problems]
    assert not failures, f"{len(failures)} of {len(outcomes)} cases broke a promise:\n\n" + (
        "\n\n".join(failures)
    )
    return outcomes


# -------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return make_workspace(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_keeps_its_promise(command: str, workspace: Workspace, tmp_path) -> None:
    count = DEFAULT_TRAIN_CASES if command == TRAIN else DEFAULT_CASES
    outcomes = fuzz(command, count, workspace, tmp_path)
    if ONLY_CASE is None:  # the cases reach the work, not only the checks before it
        assert any(outcome.status == 0 for outcome in outcomes), (
            f"no case of {command} got as far as doing its work: give its new parameter a "
            "plausible value (PATH_HINTS, TEXT_HINTS)"
        )


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_keeps_its_promise_at_length(
    command: str, workspace: Workspace, tmp_path
) -> None:
    others = (SLOW_TOTAL - SLOW_TRAIN_CASES) // (len(COMMANDS) - 1)
    fuzz(command, SLOW_TRAIN_CASES if command == TRAIN else others, workspace, tmp_path)


def test_the_cases_come_from_the_commands_own_parameters(tmp_path: Path) -> None:
    """Every option of every command is drawn, under its own spellings, with its choices and
    bounds: a new option is fuzzed without an edit of this file."""
    ws = Workspace(tmp_path / "inputs", {}, {}, {}, tmp_path / "inputs" / "pipe")
    for name, command in COMMANDS.items():
        if name == TRAIN:
            continue
        cases = [make_case(name, number, ws, tmp_path) for number in range(OPTION_DRAWS)]
        drawn = {arg.split("=")[0] for case in cases for arg in case.args}
        for param in command_params(command):
            if param.flags:
                assert drawn & set(param.flags), (name, param.name)
    translate = {param.name: param for param in command_params(COMMANDS["translate"])}
    assert translate["engine"].kind == "choice" and "ctranslate2" in translate["engine"].choices
    assert translate["beam"].kind == "int" and translate["sample"].kind == "bool"
    assert translate["input_file"].kind == "path" and translate["overrides"].many
    assert translate["input_file"].flags[:2] == ("--input", "-i")
    explain = {param.name: param for param in command_params(COMMANDS["explain"])}
    assert explain["beam"].bounds[0] == 1 and explain["src"].kind == "str"
    assert [case.args for case in cases] == [
        make_case(name, number, ws, tmp_path).args for number in range(OPTION_DRAWS)
    ]  # the same seed, the same cases


@pytest.mark.slow
def test_a_broken_promise_is_reported_with_its_command_line(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks can fail: a command that lets an OSError out, one that writes into its
    input and one that does not answer are each reported, with the line that runs them again,
    and the workspace is put back for the next case."""
    import attnseq.io.user_paths

    src = Path(workspace.entry("src.txt"))
    args = ("score", workspace.entry("rnn.pt"), "--src", str(src), "--tgt", str(src))
    case = Case("score", 7, (*args, "--out", str(tmp_path / "out.txt")), tmp_path, "", (str(src),))
    behaviours = {
        "raises": (lambda *_: os.stat(LONG), "exception escaped:", "OSError: [Errno 36]"),
        "writes": (lambda *_: src.write_text("changed\n"), f"input {src} was changed", ""),
        "hangs": (lambda *_: signal.pause(), "hang: no answer within 1 s", ""),
    }
    # Unpatched first: the case keeps its promises as it is, and the modules that bind
    # check_output_file when imported (attnseq.api) import the real one, not a patch that
    # would outlive this test in the process.
    assert run_case(case, workspace).problems == []
    for name, (behaviour, first, detail) in behaviours.items():
        # Only the hang waits for the limit: the others keep the full limit, so that a busy
        # machine does not turn a slow answer into a reported hang.
        if name == "hangs":
            monkeypatch.setattr(sys.modules[__name__], "CASE_SECONDS", 1.0)
        monkeypatch.setattr(attnseq.io.user_paths, "check_output_file", behaviour)
        outcome = run_case(case, workspace)
        assert outcome.problems[0].startswith(first) and detail in outcome.problems[0], name
        report = outcome.report(workspace.env)
        assert "reproduce: cd " in report and " attnseq score " in report, report
        assert "ATTNSEQ_FUZZ_CASE=7 " in report and "promise[score]" in report, report
        assert src.read_bytes() == workspace.pristine[src]


# ------------------------------------------------- compare and sweep-report: crafted inputs
# What drawn invocations seldom build: outputs that are the inputs, a nearly full disk for
# --out, damaged metrics.json of eval results and of a run's eval cache, and checkpoints whose
# data config points at files outside the data root or at the Hub. Each case runs through
# run_case (its promises above) and keeps more: its own crafted files keep their bytes, no
# host is looked up, the crafted checkpoints' data is never read.
SECRET = "secret-text-of-the-crafted-data"
LINES = [f"line {number} of the test" for number in range(12)]


def _lines(path: Path, lines: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def _crafted_checkpoint(ws: Workspace, path: Path, **data: Any) -> Path:
    """The workspace's GRU checkpoint with its data config's keys `data` changed."""
    from attnseq.io.checkpoint import load_checkpoint, save_checkpoint

    payload = load_checkpoint(ws.inputs / "rnn.pt")
    payload["config"]["data"].update(data)
    save_checkpoint(path, {k: v for k, v in payload.items() if k not in ("format", "version")})
    return path


def _eval_result(folder: Path, checkpoint: Path | None, hyps: list[str], record: str = "") -> str:
    """An eval result folder of LINES: `hyps`, and metrics.json `record` (default: a sound one
    naming `checkpoint`)."""
    _lines(folder / "hyps.txt", hyps)
    _lines(folder / "refs.txt", LINES)
    sound = {"checkpoint": None if checkpoint is None else str(checkpoint), "split": "test"}
    (folder / "metrics.json").write_text(record or json.dumps({**sound, "test/bleu": 1.0}))
    return str(folder)


def _damaged_cache_run(ws: Workspace, run: Path, seed: int, lr: float) -> Path:
    """A finished sweep job whose RUN/eval holds the eval result compare would reuse, its
    metrics.json damaged."""
    from helpers import sweep_job

    from attnseq.config.conversion import config_from_dict
    from attnseq.evaluation.checkpoint_eval import default_root, result_folder
    from attnseq.io.checkpoint import load_checkpoint

    sweep_job(ws.inputs / "rnn.pt", run, seed, lr=lr)
    checkpoint = run / "checkpoints" / "best.pt"
    decoding = config_from_dict(load_checkpoint(checkpoint)["config"]).decoding
    cached = result_folder(default_root(checkpoint), checkpoint, None, "test", decoding)
    cached.mkdir(parents=True)
    (cached / "metrics.json").write_text('{"checkpoint": 5}')
    return run


@contextlib.contextmanager
def nearly_full_disk(room: int) -> Iterator[None]:
    """attnseq's atomic writes (attnseq/io/atomic.py) on a disk with `room` bytes left for each
    file: a write past them fails with ENOSPC, as a full disk's does."""
    import errno
    import types

    import attnseq.io.atomic as atomic

    real = atomic.os

    class Full:
        def __init__(self, handle: Any) -> None:
            self.handle, self.written = handle, 0

        def write(self, data: bytes) -> int:
            self.written += len(data)
            if self.written > room:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.handle.write(data)

        def __enter__(self) -> "Full":
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.handle, name)

    patched = types.ModuleType("os")
    patched.__dict__.update(vars(real))
    patched.fdopen = lambda fd, *args, **kwargs: Full(real.fdopen(fd, *args, **kwargs))  # type: ignore[attr-defined]
    atomic.os = patched  # type: ignore[assignment]
    try:
        yield
    finally:
        atomic.os = real  # type: ignore[assignment]


@contextlib.contextmanager
def no_network(looked_up: list[str]) -> Iterator[None]:
    """Every host name lookup recorded in `looked_up` and failed."""
    import socket

    real = socket.getaddrinfo

    def refuse(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, "no network in the fuzzer")

    socket.getaddrinfo = refuse
    try:
        yield
    finally:
        socket.getaddrinfo = real


@dataclasses.dataclass(frozen=True)
class CraftedCase:
    """A case of compare or sweep-report with its crafted files, the exit status it must end
    with, and the disk room its writes get (None: the whole disk)."""

    case: Case
    status: int
    room: int | None = None


def crafted_compare_cases(ws: Workspace, scratch: Path) -> list[CraftedCase]:
    """The cases, each in a folder of its own under `scratch`."""
    fast = ("--resamples", "20", "--trials", "20", "--no-attention")
    secret = scratch / "secret"
    for split in ("train", "valid", "test"):
        for side in ("src", "tgt"):
            _lines(secret / f"{split}.{side}", [f"{SECRET} {n}" for n in range(12)])
    splits = {"train": "train", "valid": "valid", "test": "test"}
    local = _crafted_checkpoint(
        ws, scratch / "local.pt", source="local", root=str(secret), splits=splits
    )
    hub = _crafted_checkpoint(ws, scratch / "hub.pt", source="hub", hub_name="attacker/evil")
    out = scratch / "out"
    ref = _lines(scratch / "ref.txt", LINES)
    other = _lines(scratch / "other.txt", [line + " x" for line in LINES])
    (scratch / "linked").symlink_to(out)
    sweep = scratch / "sweep"
    for number, (seed, lr) in enumerate([(1, 0.1), (2, 0.1), (1, 0.2)]):
        (_damaged_cache_run if number == 0 else _sweep_run)(ws, sweep / str(number), seed, lr)
    (sweep / "multirun.yaml").write_text("{}\n")
    crafted_run = scratch / "crafted_run" / "checkpoints"
    crafted_run.mkdir(parents=True)
    shutil.copyfile(local, crafted_run / "best.pt")
    _lines(out / "compare.json", LINES)
    _lines(out / "compare.png", LINES)
    _lines(scratch / "earlier" / "compare.json", ["an earlier comparison"])
    _lines(scratch / "earlier" / "compare.png", ["an earlier figure"])
    cases: list[CraftedCase] = []

    def add(status: int, *argv: str, room: int | None = None) -> None:
        cases.append(CraftedCase(Case(argv[0], len(cases), argv, scratch), status, room))

    # the outputs are the inputs: by their own path, through a link to their folder
    add(2, "compare", f"{out}/compare.json", f"{out}/compare.png", "--ref", ref, "--out", str(out))
    add(2, "compare", f"{out}/compare.json", other, "--ref", ref, "--out", str(scratch / "linked"))
    add(2, "compare", ref, other, "--ref", ref, "--out", ref)
    # a nearly full disk: the earlier outputs stay whole
    add(2, "compare", ref, other, "--ref", ref, "--out", str(scratch / "earlier"), *fast, room=500)
    # damaged metrics.json: of an eval result, of a run's eval cache (compare, sweep-report)
    for number, record in enumerate(['{"checkpoint": ', "[]", '{"checkpoint": 5}', "null"]):
        add(2, "compare", _eval_result(scratch / f"ev{number}", None, LINES, record), other)
    add(2, "compare", str(sweep / "0"), other, "--ref", ref)
    add(2, "sweep-report", str(sweep), "--significance", *fast[:4])
    # checkpoints whose data is outside the data root or on the Hub: never read
    for name, checkpoint in (("local", local), ("hub", hub)):
        first = _eval_result(scratch / f"{name}1", checkpoint, LINES)
        second = _eval_result(scratch / f"{name}2", checkpoint, [f"{line} y" for line in LINES])
        add(0, "compare", first, second, *fast)
    add(2, "compare", str(crafted_run.parent), other, "--ref", ref, *fast)
    return cases


def _sweep_run(ws: Workspace, run: Path, seed: int, lr: float) -> Path:
    from helpers import sweep_job

    return sweep_job(ws.inputs / "rnn.pt", run, seed, lr=lr)


@pytest.mark.slow
def test_compare_keeps_its_promise_on_crafted_inputs(workspace: Workspace, tmp_path: Path) -> None:
    problems = []
    for crafted in crafted_compare_cases(workspace, tmp_path):
        case = crafted.case
        files = {
            path: path.read_bytes()
            for path in tmp_path.rglob("*")
            if path.is_file() and not path.is_symlink() and "eval" not in path.parts
        }
        looked_up: list[str] = []
        disk = nearly_full_disk(crafted.room) if crafted.room else contextlib.nullcontext()
        with disk, no_network(looked_up):
            outcome = run_case(case, workspace)
        found = list(outcome.problems)
        if outcome.status != crafted.status:
            found.append(f"exit status {outcome.status}, not {crafted.status}")
        changed = [str(path) for path, data in files.items() if path.read_bytes() != data]
        found += [f"{path} was changed" for path in changed]
        found += [f"looked up {host}" for host in looked_up]
        cache = Path(workspace.env["ATTNSEQ_CACHE"])
        stored = (path for path in cache.rglob("*") if path.is_file())
        held = [path for path in stored if SECRET.encode() in path.read_bytes()]
        found += [f"{path} holds the crafted data" for path in held]
        if found:
            lines = [*found, f"stderr ends: {outcome.stderr[-800:].rstrip()}"]
            problems.append("\n  ".join([*lines, f"reproduce: {case.shell_line(workspace.env)}"]))
    assert not problems, "\n\n".join(problems)


# ----------------------------------------------------- writers: outputs over their inputs
def _training_state_checkpoint(path: Path, ws: Workspace) -> Path:
    """A copy of the workspace's GRU checkpoint with the entries a run resumes from (what a
    run's last.pt holds and an average or a saved model leaves out)."""
    from attnseq.io.checkpoint import load_checkpoint, save_checkpoint

    payload = load_checkpoint(ws.entry("rnn.pt"))
    payload.update(optimizer={"state": {}, "param_groups": []}, progress={"step": 3}, rng={})
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, payload)
    return path


def average_over_input_case(rng: random.Random, number: int, ws: Workspace, scratch: Path):
    """An `attnseq average` whose --out is one of its checkpoints under another spelling (the
    path itself, `./`, `sub/..`, a symbolic link, a hard link) or a file holding a run's
    training state, with --force now and then; (case, whether it must be refused)."""
    inputs = [ws.entry(name) for name in rng.sample(["rnn.pt", "run/checkpoints/best.pt"], 2)]
    state = _training_state_checkpoint(scratch / "run" / "checkpoints" / "last.pt", ws)
    hard = scratch / "hard.pt"
    os.link(inputs[0], hard)
    first = Path(inputs[0])
    spellings = [
        str(first),
        f"{first.parent}/./{first.name}",
        f"{first.parent}/../{first.parent.name}/{first.name}",
        ws.entry("link.pt") if first.name == "rnn.pt" else str(first),
        str(hard),
        str(state),
    ]
    out = rng.choice(spellings)
    force = rng.random() < 0.3
    args = ["average", inputs[0], inputs[-1], "--out", out, *(["--force"] if force else [])]
    refused = out != str(state) or not force
    guarded = (*inputs, *([] if out == str(state) and force else [out]))
    return Case("average", number, tuple(args), scratch, "", guarded, ()), refused, hard


def test_average_never_writes_over_its_inputs_or_a_runs_state(
    workspace: Workspace, tmp_path: Path
) -> None:
    """--out spelled as one of the checkpoints or naming a file a run resumes from: refused
    with one line, every input and the hard link to one keep their bytes; --force replaces a
    training state only."""
    failures = []
    for number in range(DEFAULT_CASES if ONLY_CASE is None else 1):
        number = int(ONLY_CASE) if ONLY_CASE is not None else number
        folder = tmp_path / f"case{number}"
        folder.mkdir()
        rng = random.Random(f"{SEED}:average-over-input:{number}")
        case, refused, hard = average_over_input_case(rng, number, workspace, folder)
        kept = hard.read_bytes()
        outcome = run_case(case, workspace)
        if refused and outcome.status != 2:
            outcome.problems.append(f"exit status {outcome.status}, not a refusal")
        if hard.read_bytes() != kept:
            outcome.problems.append(f"the hard link {hard} to an input was changed")
        if outcome.problems:
            failures.append(outcome.report(workspace.env))
    assert not failures, "\n\n".join(failures)


# ------------------------------------------------------------- writers: a nearly full disk
@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """No file written in the block grows past `limit` bytes (RLIMIT_FSIZE, SIGXFSZ ignored:
    such a write fails with EFBIG, as a full disk fails with ENOSPC part way)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


WRITERS = {
    "average": lambda ws, out: ["average", ws.entry("rnn.pt"), ws.entry("tf.pt"), "--out", out],
    "average-same": lambda ws, out: ["average", ws.entry("rnn.pt"), "--out", out],
    "translate": lambda ws, out: [
        "translate",
        ws.entry("rnn.pt"),
        "--input",
        ws.entry("src.txt"),
        "--out",
        out,
    ],
    "explain": lambda ws, out: ["explain", ws.entry("tf.pt"), "--src", "4 May", "--out", out],
}


def test_writers_on_a_nearly_full_disk_keep_the_previous_output(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A file-size limit under what the output needs: one line with exit status 2, the
    previous output as it was and nothing half-written beside it; an output that fits is
    written whole."""
    failures = []
    for number in range(DEFAULT_CASES if ONLY_CASE is None else 1):
        number = int(ONLY_CASE) if ONLY_CASE is not None else number
        rng = random.Random(f"{SEED}:nearly-full:{number}")
        writer = rng.choice(sorted(WRITERS))
        folder = tmp_path / f"case{number}"
        folder.mkdir()
        suffix = ".html" if writer == "explain" else ".txt" if writer == "translate" else ".pt"
        out = folder / f"previous{suffix}"
        previous = b"the previous output\n" * rng.choice([0, 1, 300])
        if previous:
            out.write_bytes(previous)
        case = Case(writer, number, tuple(WRITERS[writer](workspace, str(out))), folder)
        limit = rng.choice([1, 512, 4096, 65536])
        with file_size_limit(limit):
            outcome = run_case(case, workspace)
        left = sorted(path.name for path in folder.iterdir() if path != out)
        if left:
            outcome.problems.append(f"left beside the output: {left}")
        written = out.read_bytes() if out.exists() else None
        if outcome.status == 2 and written != (previous or None):
            outcome.problems.append("the previous output was changed by a write that failed")
        if outcome.status == 0 and (written is None or len(written) > limit):
            outcome.problems.append("exit status 0 without the whole output")
        if outcome.problems:
            failures.append(f"limit {limit} bytes: " + outcome.report(workspace.env))
    assert not failures, "\n\n".join(failures)


# ---------------------------------------------------------------- a damaged cache entry
META_DAMAGE = {
    "broken JSON": lambda meta: "{" + json.dumps(meta)[:40],
    "an array": lambda meta: "[]",
    "null": lambda meta: "null",
    "no test split": lambda meta: {**meta, "splits": [s for s in meta["splits"] if s != "test"]},
    "no splits": lambda meta: {key: value for key, value in meta.items() if key != "splits"},
    "files an array": lambda meta: {**meta, "files": list(meta["files"].values())},
    "rows a string": lambda meta: {
        **meta,
        "files": {k: {**v, "rows": str(v["rows"])} for k, v in meta["files"].items()},
    },
    "rows a bool": lambda meta: {
        **meta,
        "files": {k: {**v, "rows": True} for k, v in meta["files"].items()},
    },
    "rows huge": lambda meta: {
        **meta,
        "files": {k: {**v, "rows": 10**40} for k, v in meta["files"].items()},
    },
    "version a string": lambda meta: {**meta, "version": str(meta["version"])},
    "tokenizers null": lambda meta: {**meta, "tokenizers": None},
    "digests null": lambda meta: {**meta, "tokenizer_digests": None},
    "built_by an array": lambda meta: {**meta, "built_by": []},
    "another setting": lambda meta: {
        **meta,
        "built_by": {**meta["built_by"], "settings": {"max_examples": 1}},
    },
    "tokens traded": lambda meta: {
        **meta,
        "tokenizers": {
            side: {**state, "tokens": state["tokens"][:-2] + state["tokens"][:-3:-1]}
            for side, state in meta["tokenizers"].items()
        },
    },
    "stats a number": lambda meta: {**meta, "stats": 5},
    "a pipe": None,
    "a folder": None,
}


@pytest.mark.slow
def test_a_damaged_cache_meta_is_moved_aside_not_a_traceback(
    workspace: Workspace, tmp_path: Path
) -> None:
    """eval of a local file prepares a cache entry; its meta.json damaged in each way, eval
    moves the entry aside and prepares it again (exit status 0, one warning) and
    doctor --verify-cache names it (exit status 0 or 1), never a traceback."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.src").write_text("June 5, 2001\n4 May 2001\n", encoding="utf-8")
    (data / "test.tgt").write_text("2001-06-05\n2001-05-04\n", encoding="utf-8")
    env = {**workspace.env, "ATTNSEQ_CACHE": str(tmp_path / "cache")}
    local = [
        "data.source=local",
        "data.format=parallel",
        f"data.root={data}",
        "data.splits.test=test",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
    ]
    ws = dataclasses.replace(workspace, env=env)
    failures = []
    for number, damage in enumerate(META_DAMAGE):
        args = ("eval", ws.entry("rnn.pt"), "--threads", "1", "--out", str(tmp_path / "ev"))
        case = Case("eval", number, (*args, *local), tmp_path, "", (ws.entry("rnn.pt"),))
        first = run_case(case, ws)
        (entry,) = [p for p in (tmp_path / "cache" / "prepared").iterdir() if "." not in p.name]
        meta_file = entry / "meta.json"
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        meta_file.chmod(0o644)
        meta_file.unlink()
        if damage == "a pipe":
            os.mkfifo(meta_file)
        elif damage == "a folder":
            meta_file.mkdir()
        else:
            damaged = META_DAMAGE[damage](meta)  # type: ignore[misc]
            text = damaged if isinstance(damaged, str) else json.dumps(damaged)
            meta_file.write_text(text, encoding="utf-8")
        doctor = run_case(Case("doctor", number, ("doctor", "--verify-cache"), tmp_path), ws)
        again = run_case(case, ws)
        for outcome in (first, doctor, again):
            if outcome.status is not None and outcome.status != 0 and outcome is not doctor:
                outcome.problems.append(f"exit status {outcome.status}")
            if outcome.problems:
                failures.append(f"meta.json {damage}: " + outcome.report(ws.env))
        if not list((tmp_path / "cache" / "prepared").glob("*.damaged-*")):
            failures.append(f"meta.json {damage}: the entry was not moved aside")
        for aside in (tmp_path / "cache" / "prepared").glob("*.damaged-*"):
            shutil.rmtree(aside)
    assert not failures, "\n\n".join(failures)
