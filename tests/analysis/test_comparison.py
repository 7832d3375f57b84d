"""`attnseq compare` of single systems held to the command line's standard: an output never
replaces an input and is written whole; the data a checkpoint named by an eval folder points at
passes eval's checks; lines are counted as `wc -l` counts them; one system by two paths is one
system; every count and bucket edge is bounded; a damaged metrics.json, a figure path and a
special file are one line each; the text and compare.json say what was compared, how it was
decoded and scored, and that one run per system tests the sentences, not the methods."""

import json
import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint

runner = CliRunner()
FAST = ["--resamples", "30", "--trials", "60"]
REFS = [f"line {i} of the test set" for i in range(40)]


def compare(*args: str, code: int = 0):
    result = runner.invoke(app, ["compare", *args])
    assert result.exit_code == code, result.output
    if code == 2:
        assert len(result.output.strip().splitlines()) == 1, result.output
    return result


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def systems(folder: Path) -> tuple[Path, Path, Path]:
    """ref.txt, a.txt (the references with a word changed) and b.txt (the references) in
    `folder`."""
    ref = write_lines(folder / "ref.txt", REFS)
    a = write_lines(folder / "a.txt", [line.replace("test", "x") for line in REFS])
    b = write_lines(folder / "b.txt", REFS)
    return ref, a, b


def crafted_checkpoint(original: Path, path: Path, **data: object) -> Path:
    """The checkpoint `original` with its data config's keys `data` changed, at `path`."""
    payload = load_checkpoint(original)
    payload["config"]["data"].update(data)
    kept = {key: value for key, value in payload.items() if key not in ("format", "version")}
    save_checkpoint(path, kept)
    return path


def eval_folder(folder: Path, checkpoint: Path | None, hyps: list[str]) -> Path:
    """An `attnseq eval` result folder of `checkpoint` on its test split: REFS and `hyps`."""
    write_lines(folder / "hyps.txt", hyps)
    write_lines(folder / "refs.txt", REFS)
    record = {"checkpoint": None if checkpoint is None else str(checkpoint), "split": "test"}
    record |= {"test/bleu": 1.0, "decoding": {"beam": 1}, "overrides": []}
    (folder / "metrics.json").write_text(json.dumps(record))
    return folder


# ------------------------------------------------------------------- outputs and inputs
def test_an_out_folder_whose_files_are_inputs_is_refused_before_the_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ref, a, b = systems(tmp_path)
    json_input = write_lines(out / "compare.json", REFS)
    png_input = write_lines(out / "compare.png", REFS)
    kept = {path: path.read_bytes() for path in (json_input, png_input)}
    result = compare(str(json_input), str(png_input), "--ref", str(ref), "--out", str(out), code=2)
    assert f"--out {png_input} is the input SYSTEMS {png_input}" in result.output
    spelled = tmp_path / "other" / ".." / "out"  # another spelling of the same folder
    (tmp_path / "other").mkdir()
    result = compare(str(png_input), str(b), "--ref", str(ref), "--out", str(spelled), code=2)
    assert "compare.png is the input" in result.output
    (tmp_path / "via").mkdir()  # the reference file as compare.json, by a hard link
    os.link(ref, tmp_path / "via" / "compare.json")
    result = compare(str(a), str(b), "--ref", str(ref), "--out", str(tmp_path / "via"), code=2)
    assert "is the input --ref" in result.output
    assert {path: path.read_bytes() for path in kept} == kept


@pytest.mark.slow
def test_a_full_disk_keeps_the_previous_outputs_whole(tmp_path: Path) -> None:
    """The file size limit (RLIMIT_FSIZE) stands in for a nearly full disk: the figure and the
    JSON of the earlier compare stay as they were, with one line naming the file."""
    ref, a, b = systems(tmp_path)
    out = tmp_path / "out"
    compare(str(a), str(b), "--ref", str(ref), "--out", str(out), *FAST)
    before = {name: (out / name).read_bytes() for name in ("compare.json", "compare.png")}
    write_lines(ref, [line + " more" for line in REFS])

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    command = [sys.executable, "-m", "attnseq", "compare", str(a), str(b), "--ref", str(ref)]
    command += ["--out", str(out), *FAST]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        command, capture_output=True, text=True, preexec_fn=small_files, env=env, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: cannot write {out / 'compare.png'}: File too large"
    ]
    assert {name: (out / name).read_bytes() for name in before} == before
    assert sorted(path.name for path in out.iterdir()) == ["compare.json", "compare.png"]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("a.txt/sub", "is a file, not a folder"),
        ("/proc/attnseq-x", "cannot write into /proc"),
        ("/dev/null/x", "/dev/null is a file, not a folder"),
    ],
)
def test_an_out_folder_that_cannot_be_made_is_refused_before_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, message: str
) -> None:
    import attnseq.analysis.comparison as comparison

    ref, a, b = systems(tmp_path)
    out = str(tmp_path / where) if where.startswith("a.txt") else where

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the comparison ran before --out was checked")

    monkeypatch.setattr(comparison, "metric_scores", work)
    result = compare(str(a), str(b), "--ref", str(ref), "--out", out, code=2)
    assert message in result.output


def test_figure_paths_are_image_files(tmp_path: Path) -> None:
    ref, a, _ = systems(tmp_path)
    b = write_lines(tmp_path / "b.png", REFS)  # a hypothesis file with an image's name
    result = attnseq.compare([a, b], references=ref, resamples=30, trials=60)
    with pytest.raises(UserError, match="is a folder; give a file name"):
        result.save_figure(tmp_path)
    with pytest.raises(UserError, match=r"unknown format '\.txt'; use one of .*\.png"):
        result.save_figure(tmp_path / "x.txt")
    with pytest.raises(UserError, match="is the input system"):
        result.save_figure(b)
    assert b.read_text() == "".join(line + "\n" for line in REFS)
    assert result.save_figure(tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------------ what is read
@pytest.mark.slow
def test_checkpoint_data_outside_the_data_root_is_not_read(
    tmp_path: Path, rnn_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eval folder whose checkpoint's data is local files in a folder of its choosing: the
    files are never opened (eval's rule), the buckets fall back on the references, a note says
    why."""
    secret = tmp_path / "secret"
    for split in ("train", "valid", "test"):
        write_lines(secret / f"{split}.src", [f"secret source {i}" for i in range(40)])
        write_lines(secret / f"{split}.tgt", [f"secret target {i}" for i in range(40)])
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTNSEQ_CACHE", str(cache))
    crafted = crafted_checkpoint(
        rnn_checkpoint,
        tmp_path / "crafted.pt",
        source="local",
        root=str(secret),
        format="parallel",
        splits={"train": "train", "valid": "valid", "test": "test"},
    )
    one = eval_folder(tmp_path / "ev" / "e1", crafted, REFS)
    two = eval_folder(tmp_path / "ev" / "e5", crafted, [line + " x" for line in REFS])
    out = compare(str(two), str(one), "--no-attention", *FAST).stdout
    assert "bleu by reference length" in out
    assert f"data.root={str(secret)!r}" in out  # the note names what was refused
    stored = [path.read_bytes() for path in cache.rglob("*") if path.is_file()]
    assert not any(b"secret" in data for data in stored)


@pytest.mark.slow
def test_checkpoint_data_from_the_hub_is_not_downloaded(
    tmp_path: Path, rnn_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[object] = []

    def no_network(host: object, *args: object, **kwargs: object) -> list:
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    crafted = crafted_checkpoint(
        rnn_checkpoint,
        tmp_path / "hub.pt",
        source="hub",
        hub_name="attacker/evil-dataset",
        splits={"train": "train", "test": "test"},
    )
    one = eval_folder(tmp_path / "e1", crafted, REFS)
    two = eval_folder(tmp_path / "e2", crafted, [line + " x" for line in REFS])
    out = compare(str(one), str(two), "--no-attention", *FAST).stdout
    assert looked_up == []
    assert "Hugging Face Hub" in out and "bleu by reference length" in out


def test_lines_are_counted_as_wc_counts_them(tmp_path: Path) -> None:
    """Only "\\n" ends a line: a form feed or U+2028 inside a line leaves a 39-line file 39
    lines, U+0085 inside a line leaves a 40-line file 40."""
    ref = write_lines(tmp_path / "ref.txt", REFS)
    short = REFS[:39]
    short[3] = short[3] + "\f" + REFS[39]
    short[7] = short[7] + "\u2028more"
    write_lines(tmp_path / "short.txt", short)
    result = compare(str(tmp_path / "short.txt"), str(ref), "--ref", str(ref), code=2)
    assert "39 lines but the references have 40" in result.output
    whole = list(REFS)
    whole[5] = whole[5] + "\u0085next"
    write_lines(tmp_path / "nel.txt", whole)
    compare(str(tmp_path / "nel.txt"), str(ref), "--ref", str(ref), *FAST)
    (tmp_path / "crlf.txt").write_bytes("".join(f"{line}\r\n" for line in REFS).encode())
    record = json.loads(
        compare(
            str(tmp_path / "crlf.txt"), str(ref), "--ref", str(ref), "--format", "json", *FAST
        ).stdout
    )
    assert record["systems"][str(tmp_path / "crlf.txt")]["exact_match"]["score"] == 1.0


@pytest.mark.slow
def test_special_files_are_named_as_what_they_are(tmp_path: Path) -> None:
    ref, a, _ = systems(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, what in (("/dev/zero", "a character device"), (str(fifo), "a named pipe")):
        result = compare(str(a), path, "--ref", str(ref), code=2)
        assert what in result.output and "no such file" not in result.output
    result = compare(str(a), str(tmp_path / "gone.txt"), "--ref", str(ref), code=2)
    assert "not found" in result.output
    result = compare(str(a), str(ref), "--ref", "/dev/zero", code=2)
    assert "--ref" in result.output and "a character device" in result.output
    command = [sys.executable, "-m", "attnseq", "compare", str(a), "/dev/stdin", "--ref", str(ref)]
    done = subprocess.run(command, input="x\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: hypothesis file /dev/stdin is a named pipe (FIFO), not a regular text file"
    ]


@pytest.mark.slow
def test_a_damaged_metrics_json_is_one_line(tmp_path: Path) -> None:
    ref, a, _ = systems(tmp_path)
    for number, damage in enumerate(
        ['{"checkpoint": ', "[]", '{"checkpoint": 5}', '{"split": ["test"]}', '{"decoding": 3}']
    ):
        folder = eval_folder(tmp_path / f"ev{number}", None, REFS)
        (folder / "metrics.json").write_text(damage)
        result = compare(str(a), str(folder), code=2)
        assert f"{folder / 'metrics.json'} is damaged" in result.output, result.output


@pytest.mark.slow
def test_a_damaged_eval_cache_of_a_run_is_one_line(tmp_path: Path, rnn_checkpoint: Path) -> None:
    from attnseq.config.conversion import config_from_dict
    from attnseq.evaluation.checkpoint_eval import default_root, result_folder

    ref, a, _ = systems(tmp_path)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = run / "checkpoints" / "best.pt"
    checkpoint.write_bytes(rnn_checkpoint.read_bytes())
    decoding = config_from_dict(load_checkpoint(checkpoint)["config"]).decoding
    cached = result_folder(default_root(checkpoint), checkpoint, None, "test", decoding)
    cached.mkdir(parents=True)
    for damage in ("[]", "{", '{"checkpoint": 5}'):
        (cached / "metrics.json").write_text(damage)
        result = compare(str(a), str(run), "--ref", str(ref), code=2)
        assert f"{cached / 'metrics.json'} is damaged" in result.output, result.output


# ---------------------------------------------------------------------- which systems
def test_one_system_by_two_paths_is_refused(tmp_path: Path) -> None:
    ref, a, b = systems(tmp_path)
    os.link(a, tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(a)
    (tmp_path / "cmp").mkdir()
    dotted = tmp_path / "cmp" / ".." / "a.txt"
    for other in (tmp_path / "hard.txt", tmp_path / "soft.txt", dotted):
        result = compare(str(a), str(other), "--ref", str(ref), code=2)
        assert f"{other} is {a}: a system is given twice" in result.output, result.output
    record = json.loads(
        compare(
            str(a),
            str(b),
            "--ref",
            str(ref),
            "--baseline",
            str(tmp_path / "cmp/../b.txt"),
            "--format",
            "json",
            *FAST,
        ).stdout
    )
    assert record["baseline"] == str(b) and list(record["systems"]) == [str(b), str(a)]


def test_bucket_edges_are_whole_increasing_lengths(tmp_path: Path) -> None:
    ref, a, b = systems(tmp_path)
    for edges, message in (
        ("-5,3", "--buckets: lengths are >= 0"),
        ("3,3", "--buckets must be increasing"),
        ("1.5", "--buckets must be whole numbers"),
    ):
        result = compare(str(a), str(b), "--ref", str(ref), "--buckets", edges, code=2)
        assert message in result.output, result.output
    for edges in ("0,10", [0, float("nan")], [0, 1.5], [0, True], 5):
        with pytest.raises(TypeError, match="buckets must be a list of whole numbers"):
            attnseq.compare([a, b], references=ref, buckets=edges)
    with pytest.raises(UserError, match=r"buckets: lengths are >= 0, got \[-5, 3\]"):
        attnseq.compare([a, b], references=ref, buckets=[-5, 3])


def test_counts_are_bounded_and_their_memory_estimated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attnseq.config.resources as resources

    ref, a, b = systems(tmp_path)
    files = [str(a), str(b), "--ref", str(ref)]
    result = compare(*files, "--resamples", "1000000000", code=2)
    assert "--resamples must be at most 1000000, got 1000000000" in result.output
    result = compare(*files, "--trials", "100000000", code=2)
    assert "--trials must be at most 1000000, got 100000000" in result.output
    with pytest.raises(UserError, match="^trials must be at most 1000000, got 1180591620"):
        attnseq.compare([a, b], references=ref, trials=2**70)
    with pytest.raises(TypeError, match="trials must be an int, got float"):
        attnseq.compare([a, b], references=ref, trials=1e4)
    monkeypatch.setattr(resources, "available_ram", lambda: 50 * 1024**2)
    result = compare(*files, "--resamples", "1000000", code=2)
    assert "1000000 resamples of 40 sentences needs at least" in result.output
    assert "more than the 50.0 MiB of available RAM here" in result.output


# ------------------------------------------------------------------ what it says it did
def test_the_output_names_the_test_set_the_decoding_and_the_signatures(tmp_path: Path) -> None:
    ref, a, b = systems(tmp_path)
    text = compare(str(a), str(b), "--ref", str(ref), *FAST).stdout
    assert f"test set: 40 sentences, references {ref}" in text
    assert f"{a}: a hypothesis file (its decoding unknown)" in text
    assert "BLEU: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in text
    assert "chrF: nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" in text
    record = json.loads(
        compare(str(a), str(b), "--ref", str(ref), "--format", "json", *FAST).stdout
    )
    assert record["test_set"] == {"sentences": 40, "references": str(ref), "split": None}
    assert record["decoding"][str(a)] == {
        "kind": "hypothesis file",
        "name": None,
        "eval_folder": None,
        "reused": None,
    }
    assert record["signatures"]["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert set(record["signatures"]) == {"bleu", "chrf", "ter"}


def test_one_run_per_system_says_that_the_test_is_over_sentences(tmp_path: Path) -> None:
    ref, a, b = systems(tmp_path)
    text = compare(str(a), str(b), "--ref", str(ref), *FAST).stdout
    line = next(line for line in text.splitlines() if line.startswith("one run per system"))
    assert "resample the test sentences, not the training" in line
    assert "seeds" in line and "sweep folder" in line
    record = json.loads(
        compare(str(a), str(b), "--ref", str(ref), "--format", "json", *FAST).stdout
    )
    assert record["scope"] == line
