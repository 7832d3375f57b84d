"""The Python API holds its arguments to the command line's standard: a wrong type is a
TypeError naming the argument, a bad value a UserError in Python's words, text that UTF-8 cannot
write and an output path that cannot be written are refused before the work; and for arbitrary
values of every argument (hypothesis) each call gives a result, a TypeError or a UserError,
never another exception."""

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import attnseq
from attnseq.api import arguments
from attnseq.api.model import Model
from attnseq.cli.app import app

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCE = "June 5, 2001"


# ------------------------------------------------------------------- wrong types: TypeError
TYPE_CASES: list[tuple[str, Callable[[Model], Any], str]] = [
    ("translate(None)", lambda m: m.translate(None), "lines must be a str or a list of str"),
    ("translate(5)", lambda m: m.translate(5), "lines must be a str or a list of str, not int"),
    ("translate(bytes)", lambda m: m.translate(b"June"), r"not bytes \(decode bytes first"),
    ("list with None", lambda m: m.translate(["a", None]), r"lines\[1\] must be a str"),
    ("beam=2.5", lambda m: m.translate("a", beam=2.5), "beam must be an int or None, not float"),
    ("beam=True", lambda m: m.translate("a", beam=True), "beam must be an int or None, not bool"),
    ("nbest='2'", lambda m: m.translate("a", nbest="2"), "nbest must be an int or None, not str"),
    ("top_k=1.0", lambda m: m.translate("a", sample=True, top_k=1.0), "top_k must be an int or"),
    ("attention=1", lambda m: m.translate("a", attention=1), "attention must be True or False"),
    ("sample=3", lambda m: m.translate("a", sample=3), "sample must be True or False, not int"),
    ("sample={}", lambda m: m.translate("a", sample={"top_p": 0.9}), "sample must be True or"),
    ("unknown kw", lambda m: m.translate("a", beam_size=3), "unexpected keyword argument"),
    (
        "n_best",
        lambda m: m.translate("a", n_best=2),
        "'n_best'; the decoding settings are beam, nb",
    ),
    ("score mix", lambda m: m.score("a", ["b"]), "src and tgt must both be a str"),
    ("max_tokens", lambda m: m.score("a", "b", max_tokens=1.0), "max_tokens must be an int"),
    ("align method", lambda m: m.align("a b", "c d", method=None), "method must be a str"),
    ("align layer", lambda m: m.align("a b", "c d", layer="1"), "layer must be an int or None"),
    ("attention src", lambda m: m.attention(["a"]), "src must be a str, not list"),
    ("kind", lambda m: m.attention("a", kind=1), "kind must be a str"),
    ("explain methods", lambda m: m.explain("a", methods="attention"), "methods must be a list"),
    ("explain path", lambda m: m.explain("a", path=3), "path must be a str or path"),
]


@pytest.mark.parametrize(
    ("call", "message"), [c[1:] for c in TYPE_CASES], ids=[c[0] for c in TYPE_CASES]
)
def test_wrong_types_are_type_errors_naming_the_argument(
    call: Callable[[Model], Any], message: str, guarded_rnn: Model
) -> None:
    with pytest.raises(TypeError, match=message):
        call(guarded_rnn)


def test_wrong_types_of_load_plot_alignment_and_train(
    untrained_checkpoints: dict[str, Path],
) -> None:
    with pytest.raises(TypeError, match="threads must be an int, 'auto' or None, not float"):
        attnseq.load(untrained_checkpoints["rnn"], "cpu", threads=1.5)
    with pytest.raises(TypeError, match="path must be a str or path"):
        attnseq.load(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="overrides must be a list of str"):
        attnseq.load(untrained_checkpoints["rnn"], "cpu", overrides="decoding.beam=3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="device must be a str or torch.device, not int"):
        attnseq.load(untrained_checkpoints["rnn"], 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="attention must be an AttentionMap"):
        attnseq.plot_alignment(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"overrides\[0\] must be a str, not NoneType"):
        attnseq.train([None])  # type: ignore[list-item]


# ------------------------------------------------------------- bad values: UserError, early
VALUE_CASES: list[tuple[str, Callable[[Model], Any], str]] = [
    ("length_penalty=nan", lambda m: m.translate("a", length_penalty=math.nan), "finite"),
    ("length_penalty=inf", lambda m: m.translate("a", length_penalty=math.inf), "finite"),
    ("beam=0", lambda m: m.translate("a", beam=0), "^beam=0: must be >= 1$"),
    ("nbest above beam", lambda m: m.translate("a", beam=2, nbest=3), "nbest=3 is more"),
    ("temperature=0", lambda m: m.translate("a", sample=True, temperature=0), "must be >= 1e-06"),
    ("ratio=1e300", lambda m: m.translate("a", max_output_ratio=1e300), r"reach \S+e\+30\d pieces"),
    ("top_p=2", lambda m: m.translate("a", sample=True, top_p=2.0), "must be <= 1"),
    ("seed=2**64", lambda m: m.translate("a", sample=True, seed=2**64), "must be <= 18446"),
    ("sample and beam", lambda m: m.translate("a", sample=True, beam=3), "and beam 3 searches"),
    ("temperature alone", lambda m: m.translate("a", temperature=0.5), "go with sample"),
    ("length_penalty=11", lambda m: m.translate("a", length_penalty=11), "must be <= 10"),
    ("beam=10**30", lambda m: m.translate("a", beam=10**30), "beam must fit in a 64-bit integer"),
    ("batch_size=0", lambda m: m.translate("a", batch_size=0), "batch_size=0: must be >= 1"),
    ("score('', '')", lambda m: m.score("", ""), "src is empty"),
    ("max_tokens=0", lambda m: m.score("a", "b", max_tokens=0), "max_tokens=0: must be >= 1"),
    ("layer=3", lambda m: m.align("a b", "c d", layer=3), "^layer must be in 1..1"),
    ("method", lambda m: m.align("a b", "c d", method="atention"), "Did you mean 'attention'"),
    ("kind", lambda m: m.attention("a", kind="crosss"), "kind='crosss' is not one of"),
    ("attention('')", lambda m: m.attention(" "), "src is empty"),
    ("explain('')", lambda m: m.explain(""), "src is empty"),
    ("explain a long tgt", lambda m: m.explain("a", "x " * 5000), "explain takes at most"),
]


@pytest.mark.parametrize(
    ("call", "message"), [c[1:] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES]
)
def test_bad_values_are_user_errors_in_pythons_words(
    call: Callable[[Model], Any], message: str, guarded_rnn: Model
) -> None:
    with pytest.raises(attnseq.UserError, match=message) as raised:
        call(guarded_rnn)
    assert "--" not in str(raised.value)  # Python's words, not the command line's


# ------------------------------------------------ text UTF-8 cannot write, paths, before work
def test_explain_refuses_a_lone_surrogate_and_an_unwritable_path_before_the_work(
    guarded_rnn: Model, tmp_path: Path
) -> None:
    model = guarded_rnn
    with pytest.raises(attnseq.UserError, match=r"src holds a lone surrogate '\\udcff' at index 4"):
        model.explain("June\udcff 5")
    with pytest.raises(attnseq.UserError, match=r"lines\[1\] holds a lone surrogate"):
        model.translate(["a", "\ud800"])
    with pytest.raises(attnseq.UserError, match="path /proc/a.html: cannot write into /proc"):
        model.explain(SOURCE, path="/proc/a.html")
    with pytest.raises(attnseq.UserError, match="path .* is a folder"):
        model.explain(SOURCE, path=tmp_path)


def test_the_explain_command_refuses_them_with_exit_2(
    untrained_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    command = ["explain", str(untrained_checkpoints["rnn"]), "--device", "cpu", "--threads", "1"]
    # argv that is no UTF-8 reaches Python as lone surrogates (surrogateescape)
    result = CliRunner().invoke(app, [*command, "--src", "June\udcff 5", "--out", "e.html"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "--src is not UTF-8 text" in result.output
    result = CliRunner().invoke(app, [*command, "--src", SOURCE, "--out", "/proc/x.html"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "--out /proc/x.html: cannot write into /proc" in result.output
    figure = tmp_path / "a.png"
    command = ["visualize-alignment", str(untrained_checkpoints["rnn"]), "--out", str(figure)]
    result = CliRunner().invoke(app, [*command, "--src", "June\udcff 5", "--device", "cpu"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "--src is not UTF-8 text" in result.output and not figure.exists()


# --------------------------------------------------- arbitrary values (property-based tests)
# Values of every kind, chosen where the checks have edges: the types an argument takes and
# the ones it does not, zero, negatives, sizes past int64, NaN and infinities, empty text,
# lone surrogates, a 5,000-character line. Integers stay small or absurd: a mid-sized beam
# that fits the memory is a valid request that only takes long.
INTEGERS = st.integers(-3, 6) | st.sampled_from([2**31, 2**63, 10**9, 10**30, -(10**20)])
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, 0.5, 1.0, 1e-300])
TEXTS = st.text(max_size=12) | st.sampled_from(
    ["", " ", SOURCE, "\ud800", "a\udcff", "x" * 5000, "\x00", "é ü ß", "\r\n", "1998-03-03"]
)
JUNK = st.none() | st.booleans() | INTEGERS | FLOATS | st.binary(max_size=4) | st.just(object())
ANY = (
    JUNK
    | TEXTS
    | st.lists(TEXTS | st.none(), max_size=3)
    | st.dictionaries(TEXTS, INTEGERS, max_size=2)
)
LINES = TEXTS | st.lists(TEXTS, max_size=3) | st.tuples(TEXTS) | ANY
NUMBERS = INTEGERS | FLOATS | JUNK
# the decoding settings besides beam, nbest and sample (which the fuzzer draws on their own)
OTHER_SETTINGS = [
    key for key in arguments.DECODING_SETTINGS if key not in ("beam", "nbest", "sample")
]
CHANGES = st.dictionaries(
    st.sampled_from([*OTHER_SETTINGS, "beam_size", "n_best", "topk"]), NUMBERS, max_size=3
)
METHODS = st.sampled_from(["attention", "shift-att", "rollout", "saliency", "nope"])
KINDS = st.sampled_from(["cross", "encoder", "decoder", "segment", "x"])


def survives(call: Callable[[], Any]) -> None:
    """`call` gives a result, a TypeError or a UserError; anything else fails the test."""
    with contextlib.suppress(TypeError, attnseq.UserError):
        call()


def pick(data: st.DataObject, good: st.SearchStrategy) -> Any:
    """A value of `good` seven times in eight, else anything at all: each argument is mostly
    one the function takes, so that a call often gets past its first argument's checks."""
    return data.draw(ANY if data.draw(st.integers(0, 7)) == 0 else good)


def fuzz(examples: int) -> Callable:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,  # the same examples on every run: a failure is reproducible
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


SMALL = st.integers(1, 4)  # a size that is valid and quick
GOOD_CHANGES = st.dictionaries(
    st.sampled_from(OTHER_SETTINGS),
    st.integers(0, 3) | st.floats(0.0, 2.0),
    max_size=3,
)


def check_translate(model: Model, data: st.DataObject) -> None:
    lines = pick(data, TEXTS | st.lists(TEXTS, max_size=3))
    beam, nbest = pick(data, st.none() | SMALL), pick(data, st.none() | SMALL)
    sampled = data.draw(st.integers(0, 3)) == 0  # a search three times in four
    sample, attention = (
        pick(data, st.booleans() if sampled else st.none()),
        pick(data, st.booleans()),
    )
    batch_size = pick(data, SMALL)
    changes = data.draw(CHANGES if data.draw(st.integers(0, 7)) == 0 else GOOD_CHANGES)
    survives(
        lambda: model.translate(
            lines,
            beam=beam,
            sample=sample,
            nbest=nbest,
            attention=attention,
            batch_size=batch_size,
            **changes,
        )
    )


def pairs(data: st.DataObject) -> tuple[Any, Any]:
    """A source and a target argument: one pair of str, or lists of one length, mostly."""
    texts = TEXTS if data.draw(st.booleans()) else st.lists(TEXTS, min_size=2, max_size=2)
    return pick(data, texts), pick(data, texts)


def check_score(model: Model, data: st.DataObject) -> None:
    src, tgt = pairs(data)
    max_tokens = pick(data, st.none() | SMALL)
    survives(lambda: model.score(src, tgt, max_tokens=max_tokens))


def check_align(model: Model, data: st.DataObject) -> None:
    src, tgt = pairs(data)
    method = pick(data, METHODS)
    layer, head = pick(data, st.none() | SMALL), pick(data, st.none() | SMALL)
    batch_size = pick(data, SMALL)
    survives(
        lambda: model.align(src, tgt, method=method, layer=layer, head=head, batch_size=batch_size)
    )


def check_attention(model: Model, data: st.DataObject) -> None:
    src, tgt, kind = pick(data, TEXTS), pick(data, st.none() | TEXTS), pick(data, KINDS)
    survives(lambda: model.attention(src, tgt, kind))


CHECKS = {
    "translate": check_translate,
    "score": check_score,
    "align": check_align,
    "attention": check_attention,
}


def check_load(paths: dict[str, Path], data: st.DataObject) -> None:
    path = pick(data, st.sampled_from([*paths.values(), "/dev/null", "/proc", "", "x.pt"]))
    device = pick(data, st.sampled_from(["cpu", "auto", "cuda", "cuda:7", "gpu", "mps"]))
    override = st.sampled_from(["decoding.beam=3", "decoding.beam=0", "model.hidden=3", "x=1", "="])
    overrides = pick(data, st.none() | st.lists(override | TEXTS, max_size=2))
    ensemble = pick(data, st.just(()) | st.lists(st.sampled_from([*paths.values()]), max_size=1))
    threads = pick(data, st.none() | st.sampled_from(["auto", "x"]) | INTEGERS)
    survives(
        lambda: attnseq.load(path, device, overrides=overrides, ensemble=ensemble, threads=threads)
    )


def run_property(
    name: str, family: str, examples: int, models: dict[str, Model], paths: dict[str, Path]
) -> None:
    @fuzz(examples)
    @given(data=st.data())
    def property_holds(data: st.DataObject) -> None:
        if name == "load":
            check_load({**paths, "run": paths["rnn"].parents[1]}, data)
        else:
            CHECKS[name](models[family], data)

    property_holds()


FUNCTIONS = [(name, family) for name in (*CHECKS, "load") for family in ("rnn", "transformer")]
FUNCTIONS = [(name, family) for name, family in FUNCTIONS if name != "load" or family == "rnn"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "family"), FUNCTIONS)
def test_arbitrary_arguments_give_a_result_a_type_error_or_a_user_error(
    name: str, family: str, models: dict[str, Model], untrained_checkpoints: dict[str, Path]
) -> None:
    run_property(name, family, 50, models, untrained_checkpoints)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "family"), FUNCTIONS)
def test_many_arbitrary_arguments(
    name: str, family: str, models: dict[str, Model], untrained_checkpoints: dict[str, Path]
) -> None:
    run_property(name, family, 2000, models, untrained_checkpoints)
