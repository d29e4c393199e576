"""Every file speaks of the project only: how it works, how to use it, what it measured. No
file tells how it was made (the sittings it was written in, tracker numbers, the people or
programs that wrote it), which a user cannot act on. Technical senses stay allowed: onnxruntime's
``InferenceSession``, an HTTP session, a pytest fixture scoped to the test run,
``opensearchpy.helpers``, a helper thread.

This file holds itself to the same rule: its patterns are assembled from word lists and its
examples from parts (``_words``), so no line of it reads as the prose it looks for."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

UNIT = "session"  # the word that, with a count or a pointer before it, tells of the work's history
COUNTS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
          r"\d+(st|nd|rd|th)")
POINTERS = ("this", "that", "previous", "next", "earlier", "later", "last", "each", "every", "work", "same",
            "one", "a")
WORKERS = ("jobs?", "work", "benchmarks?", "trainings?", "nodes?", UNIT)

# Words used in a technical sense; removed from a line before the narrative patterns look at it.
TECHNICAL = re.compile(
    rf"\w*{UNIT.title()}\w*"                          # InferenceSession, SessionOptions, requests.Session
    rf"|\w+_{UNIT}\w*|{UNIT}_\w+"                      # onnx_session, _new_session, session_config
    rf"|\b{UNIT}\.[\w.]+|\.{UNIT}\b"                   # session.run, session.intra_op..., self.session
    rf"|/api/{UNIT}\b|\b{UNIT},\s+search"              # the workbench's token route (listed among routes)
    rf"|\b{UNIT}\s*=|scope=[\"']{UNIT}[\"']|{UNIT}-scoped"  # a variable; pytest fixtures
    rf"|(?i:\b(onnxruntime|ONNX|ort|inference|HTTP|TLS|client|batch|single-threaded|CPU)\s+{UNIT}\b)")
NARRATIVE = [
    # the word alone is also the workbench's token route and an HTTP connection's; the narrative
    # use has a count, an order or a pointer before it, or is plural
    (re.compile(rf"\b({'|'.join(COUNTS + POINTERS)})\s+{UNIT}s?\b|\b{UNIT}s\b|\b{UNIT}\s+\d+", re.I), "the work's history"),
    (re.compile(r"\bissues?\s*#?\d+", re.I), "an issue number"),
    (re.compile(r"\bissue\d+", re.I), "an issue number"),
    (re.compile(rf"\bhelper(s|'s|s')?\s+({'|'.join(WORKERS)})\b", re.I), "work credited to a helper program"),
    (re.compile(r"\bother\s+helpers\b", re.I), "helpers"),
    (re.compile(r"\bthe\s+lead's\b", re.I), "the lead"),
]
# Data files whose words are not prose (a tokenizer's vocabulary lists the word among others).
SKIP = re.compile(r"(^|/)tokenizer\.json$|\.(onnx|npy|png|svg|gz|whl|tar)$")


def _tracked_text_files():
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in names.decode().split("\0"):
        path = REPO / name
        if name and not SKIP.search(name) and path.is_file():
            try:
                yield name, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


def narrative_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, the line) for each line that tells how the project was made."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        plain = TECHNICAL.sub(" ", line)
        for pattern, what in NARRATIVE:
            if pattern.search(plain):
                found.append((number, what, line.strip()[:160]))
                break
    return found


def _words(*parts: str) -> str:
    """An example line put together at run time, so that this file's own text stays clean."""
    return " ".join(parts)


def test_the_patterns_tell_narrative_from_technical_words():
    for line in (_words("measured in the ninth", UNIT), _words("as this", UNIT, "found"),
                 _words("earlier", UNIT + "s", "trained it"), _words("the target of", "issue", "24", "was met"),
                 "results under benchmarks/results/" + "issue" + "13/", _words("shared with other", "helpers'", "jobs"),
                 _words("measured by a", "helper's", "benchmark"), _words("as", "the", "lead's", "note says")):
        assert narrative_lines(line), line
    for line in (f"{UNIT} = ort.Inference{UNIT.title()}(path); {UNIT}.run(None, feeds)",
                 f'@pytest.fixture(scope="{UNIT}")', "from opensearchpy import helpers; helpers.bulk(client, actions)",
                 f"a single-threaded onnxruntime {UNIT} for one query", f"the page reads its token from GET /api/{UNIT}",
                 "a helper thread drains the queue"):
        assert not narrative_lines(line), line


def test_no_file_tells_how_the_project_was_made():
    problems = [f"{name}:{number}: {what}: {line}"
                for name, text in _tracked_text_files() for number, what, line in narrative_lines(text)]
    assert not problems, "\n".join(problems)
