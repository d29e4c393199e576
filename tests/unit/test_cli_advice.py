"""The advice a command gives for a wrong first step works when followed: a directory that is no
index, a CSV saved as .jsonl, an ingest stopped with Ctrl-C."""

from __future__ import annotations

import json
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


# The real command in a child process that, at one moment of the ingest, says where it is on stderr
# and waits there for the test's Ctrl-C: "import" (loading the command), or "module:Owner.name" (on
# entry to that function; " after": once it returned).
PAUSING_CHILD = """
import importlib, signal, sys, time

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even when the test runs in the background

def hold(where):
    print("at", where, file=sys.stderr, flush=True)
    while True:
        # SIGINT raises KeyboardInterrupt here, at this moment of the ingest. A short sleep, not
        # signal.pause(): a signal that lands just before pause() would leave it waiting forever.
        time.sleep(0.05)

where = sys.argv[1]
if where == "import":
    class HoldImport:
        def find_spec(self, name, path=None, target=None):
            if name == "hybrid_qpr.cli.ingest":
                hold(where)
            return None
    sys.meta_path.insert(0, HoldImport())
elif where:
    target, _, when = where.partition(" ")
    module, _, path = target.partition(":")
    owner = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    real = getattr(owner, name)
    def held(*args, **kwargs):
        if when != "after":
            hold(where)
        result = real(*args, **kwargs)
        if when == "after":
            hold(where)
        return result
    setattr(owner, name, held)
from hybrid_qpr.cli.main import cli
cli(sys.argv[2:], prog_name="hybrid-qpr")
"""
RERUN_IS_SAFE = "re-run the same command to finish; ids are updated in place, never duplicated"


@pytest.fixture()
def children():
    """The child processes a test starts, killed at its end if a failed test left them waiting."""
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.communicate()


def _child_ingest(children, cwd, where: str, *args: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", PAUSING_CHILD, where, "ingest", *args, "--index", "idx"], cwd=cwd,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children.append(child)
    return child


def _interrupted(ingest: subprocess.Popen) -> str:
    """Ctrl-C to ``ingest``; its stderr after that, checked to be one line and exit status 130."""
    ingest.send_signal(signal.SIGINT)
    _, err = ingest.communicate(timeout=120)
    assert ingest.returncode == 130, err
    assert "Traceback" not in err and "Aborted" not in err, err
    [line] = err.strip().splitlines()
    return line


def _unreferenced(index_dir) -> list[str]:
    """Files and directories under ``segments/`` that the committed manifest does not name."""
    manifest = json.loads((index_dir / "manifest.json").read_text(encoding="utf-8"))
    named = {e["name"] for e in manifest["segments"]} | {p.split("/")[1] for p in manifest["retained"]}
    return sorted(p.name for p in (index_dir / "segments").iterdir() if p.name not in named)


def test_ctrl_c_during_an_ingest_says_what_was_committed_and_that_a_rerun_is_safe(tmp_path, children):
    (tmp_path / "questions.jsonl").write_text(QUESTIONS, encoding="utf-8")
    assert _run("ingest", "questions.jsonl", "--index", "idx", cwd=tmp_path).exit_code == 0
    ingest = _child_ingest(children, tmp_path, "", "-")
    ingest.stdin.write('{"id": "new-1", "text": "can i pay by card?"}\n')  # stdin stays open: the ingest waits
    ingest.stdin.flush()
    lock, deadline = tmp_path / "idx" / "write.lock", time.monotonic() + 120
    # the lock names its holder once taken: from then on the ingest is under way, reading stdin
    while lock.read_text(encoding="utf-8").strip() != str(ingest.pid):
        assert ingest.poll() is None and time.monotonic() < deadline, ingest.communicate()
        time.sleep(0.05)
    assert _interrupted(ingest) == ("interrupted: nothing of this ingest was committed (a local ingest commits at "
                                    "its end); index idx holds its previous 2 documents; re-run the same command to "
                                    "finish; ids are updated in place, never duplicated")
    again = _run("ingest", "questions.jsonl", "--index", "idx", cwd=tmp_path)
    assert again.exit_code == 0 and "indexed 0, updated 2" in again.output


NOTHING_COMMITTED = ("interrupted: nothing of this ingest was committed (a local ingest commits at its end); index idx "
                     f"holds its previous 2 documents; {RERUN_IS_SAFE}")
COMMITTED = ("interrupted after this ingest was committed (index idx holds 3 documents); re-running it updates the "
             "same ids, never duplicates them")


@pytest.mark.parametrize("where, said, rerun", [
    ("import", "interrupted while 'hybrid-qpr ingest' was starting; nothing was done", "indexed 1, updated 2"),
    ("hybrid_qpr.data.documents:require_documents", NOTHING_COMMITTED, "indexed 1, updated 2"),
    ("hybrid_qpr.cli._backend:load_encoder", NOTHING_COMMITTED, "indexed 1, updated 2"),
    ("hybrid_qpr.backends.local.writer:prepare_vectors", NOTHING_COMMITTED, "indexed 1, updated 2"),
    ("hybrid_qpr.backends.local.writing:IndexWriter.write_new_segment after", NOTHING_COMMITTED, "indexed 1, updated 2"),
    ("hybrid_qpr.backends.local.writing:write_manifest after", COMMITTED, "indexed 0, updated 3"),
    ("hybrid_qpr.backends.base:adopt_model_fusion_defaults", COMMITTED, "indexed 0, updated 3"),
], ids=["loading the command", "reading the input", "opening the model", "encoding", "writing a segment", "committing",
        "after the commit"])
def test_ctrl_c_at_any_moment_of_an_ingest_says_what_the_index_holds_and_exits_130(tmp_path, children, where, said,
                                                                                  rerun):
    (tmp_path / "questions.jsonl").write_text(QUESTIONS, encoding="utf-8")
    assert _run("ingest", "questions.jsonl", "--index", "idx", cwd=tmp_path).exit_code == 0
    more = tmp_path / "more.jsonl"
    more.write_text(QUESTIONS + '{"id": "new-1", "text": "can i pay by card?"}\n', encoding="utf-8")
    ingest = _child_ingest(children, tmp_path, where, more.name)
    assert ingest.stderr.readline() == f"at {where}\n", ingest.communicate()
    assert _interrupted(ingest) == said
    assert _unreferenced(tmp_path / "idx") == []  # nothing half written, nothing of an abandoned ingest
    again = _run("ingest", more.name, "--index", "idx", cwd=tmp_path)
    assert again.exit_code == 0 and rerun in again.output, again.output


def test_ctrl_c_before_a_new_index_was_created_leaves_none_and_a_rerun_creates_it(tmp_path, children):
    (tmp_path / "questions.jsonl").write_text(QUESTIONS, encoding="utf-8")
    ingest = _child_ingest(children, tmp_path, "hybrid_qpr.cli._backend:load_encoder", "questions.jsonl")
    assert ingest.stderr.readline() == "at hybrid_qpr.cli._backend:load_encoder\n", ingest.communicate()
    assert _interrupted(ingest) == f"interrupted before index idx was created; nothing was written; {RERUN_IS_SAFE}"
    assert not (tmp_path / "idx").exists()
    again = _run("ingest", "questions.jsonl", "--index", "idx", cwd=tmp_path)
    assert again.exit_code == 0 and "indexed 2, updated 0" in again.output, again.output
