"""`attnseq translate` at a terminal answers each line as it is typed; from a pipe it reads the
whole input in chunks."""

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")


def read_line(stream, timeout: float) -> bytes:
    """One line of `stream` (a pipe), or what came before `timeout` seconds passed."""
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], deadline - time.monotonic())
        if not ready:
            break
        chunk = os.read(stream.fileno(), 1)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.slow
def test_a_terminal_gets_an_answer_per_line_before_stdin_closes(rnn_checkpoint: Path) -> None:
    leader, follower = pty.openpty()  # stdin is a terminal; stdout and stderr are pipes
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "attnseq", "translate", str(rnn_checkpoint), "--threads", "1"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    try:
        answers = []
        for text in (b"June 5, 2001\n", b"the 3rd of March 1998\n"):
            os.write(leader, text)
            answers.append(read_line(process.stdout, timeout=120))
            assert process.poll() is None  # stdin is still open: the line came first
        assert all(answer.endswith(b"\n") for answer in answers), answers
        os.write(leader, b"\x04")  # Ctrl-D: end of input
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    assert process.returncode == 0, err
    assert b"translated" not in err  # no progress bar or rate summary at a terminal
    assert b"\x1b[" not in err


@pytest.mark.slow  # a subprocess; piped translate is covered in process
def test_a_pipe_gets_the_batched_outputs_and_a_summary(rnn_checkpoint: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attnseq", "translate", str(rnn_checkpoint), "--threads", "1"],
        input="June 5, 2001\n\nthe 3rd of March 1998\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    assert result.stdout.splitlines()[1] == ""
    assert "translated 3 sentences" in result.stderr
