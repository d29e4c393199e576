"""The advice a command gives for a wrong first step works when followed: a directory that is no
index, a CSV saved as .jsonl, an ingest stopped with Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.local.commit import WriteLock
from hybrid_qpr.cli.main import cli

QUESTIONS = '{"id": "pw-1", "text": "how do i reset my password?"}\n{"id": "ship-1", "text": "where is my parcel?"}\n'


def _run(*args, cwd):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(old)


def _follow(advice: str, cwd, **names) -> None:
    """Run the 'hybrid-qpr ...' command quoted in ``advice`` (its FILE and NEW_DIR filled in)."""
    command = re.search(r"'hybrid-qpr ([^']+)'", advice).group(1).split()
    done = _run(*[names.get(word, word) for word in command], cwd=cwd)
    assert done.exit_code == 0, f"the advice {command} failed: {done.output}"


@pytest.mark.parametrize("kind", ["missing", "empty", "other files"])
def test_query_on_a_directory_that_is_no_index_gives_advice_that_works(tmp_path, kind):
    (tmp_path / "questions.jsonl").write_text(QUESTIONS, encoding="utf-8")
    if kind != "missing":
        (tmp_path / "dir").mkdir()
    if kind == "other files":
        (tmp_path / "dir" / "notes.txt").write_text("mine", encoding="utf-8")
    done = _run("query", "password", "--index", "dir", cwd=tmp_path)
    assert done.exit_code == 1 and "Traceback" not in done.output
    [line] = done.output.strip().splitlines()
    assert "not a hybrid-qpr index" in line
    _follow(line, tmp_path, FILE="questions.jsonl", NEW_DIR="new-index")
    target = "new-index" if kind == "other files" else "dir"
    assert _run("query", "password", "--index", target, cwd=tmp_path).exit_code == 0
    if kind == "other files":
        assert (tmp_path / "dir" / "notes.txt").read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("separator, kind", [(",", "CSV"), ("\t", "TSV")])
def test_a_table_saved_as_jsonl_is_named_with_the_format_to_use(tmp_path, separator, kind):
    rows = ["id", "text", "topic"], ["pw-1", "how do i reset my password", "account"]
    (tmp_path / "data.jsonl").write_text("".join(separator.join(r) + "\n" for r in rows), encoding="utf-8")
    for strict in ([], ["--strict"]):
        done = _run("ingest", "data.jsonl", "--index", "idx", *strict, cwd=tmp_path)
        assert done.exit_code == 1
        assert done.output.strip() == (f"Error: data.jsonl:1: this is a {kind} header ({separator.join(rows[0])!r}), "
                                       "not JSONL; read the file as a table with --format table")
    assert not (tmp_path / "idx").exists()  # refused before an index was made
    assert _run("ingest", "data.jsonl", "--index", "idx", "--format", "table", cwd=tmp_path).exit_code == 0


def test_ctrl_c_during_an_ingest_says_what_was_committed_and_that_a_rerun_is_safe(tmp_path):
    (tmp_path / "questions.jsonl").write_text(QUESTIONS, encoding="utf-8")
    assert _run("ingest", "questions.jsonl", "--index", "idx", cwd=tmp_path).exit_code == 0
    code = "from hybrid_qpr.cli.main import cli; cli(['ingest', '-', '--index', 'idx'], prog_name='hybrid-qpr')"
    ingest = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    ingest.stdin.write('{"id": "new-1", "text": "can i pay by card?"}\n')  # stdin stays open: the ingest waits
    ingest.stdin.flush()
    deadline = time.monotonic() + 120
    lock = WriteLock(tmp_path / "idx")  # the first ingest left the lock file: wait until the lock is held
    while lock.writer_at_work() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # inside the ingest, reading stdin
    ingest.send_signal(signal.SIGINT)
    _, err = ingest.communicate(timeout=120)
    assert ingest.returncode == 130
    assert "Traceback" not in err and "Aborted" not in err
    assert err.strip() == ("interrupted: nothing of this ingest was committed (a local ingest commits at its end); "
                           "index idx holds its previous 2 documents; re-run the same command to finish; ids are "
                           "updated in place, never duplicated")
    again = _run("ingest", "questions.jsonl", "--index", "idx", cwd=tmp_path)
    assert again.exit_code == 0 and "indexed 0, updated 2" in again.output
