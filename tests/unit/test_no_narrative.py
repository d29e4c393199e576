"""Every file speaks of the project only: how it works, how to use it, what it measured. No
file tells how it was made (work sessions, issue numbers, the people or programs that wrote it),
which a user cannot act on. Technical senses stay allowed: onnxruntime's ``InferenceSession``,
an HTTP session, a pytest ``scope="session"`` fixture, ``opensearchpy.helpers``, a helper thread."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Words used in a technical sense; removed from a line before the narrative patterns look at it.
TECHNICAL = re.compile(
    r"\w*Session\w*"                          # InferenceSession, SessionOptions, requests.Session
    r"|\w+_session\w*|session_\w+"            # onnx_session, _new_session, session_config
    r"|\bsession\.[\w.]+|\.session\b"         # session.run, session.intra_op..., self.session
    r"|/api/session\b|\bsession,\s+search"   # the workbench's token route (listed among routes)
    r"|\bsession\s*=|scope=[\"']session[\"']|session-scoped"  # a variable; pytest fixtures
    r"|(?i:\b(onnxruntime|ONNX|ort|inference|HTTP|TLS|client|batch|single-threaded|CPU)\s+session\b)")
NARRATIVE = [
    # "session" alone is also the workbench's token route (/api/session) and an HTTP session: the
    # narrative use comes with a count, an order or a pointer ("the ninth session", "this session")
    (re.compile(r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(st|nd|rd|th)|"
                r"this|that|previous|next|earlier|later|last|each|every|work|same|one|a)\s+sessions?\b"
                r"|\bsessions\b|\bsession\s+\d+", re.I), "a work session"),
    (re.compile(r"\bissues?\s*#?\d+", re.I), "an issue number"),
    (re.compile(r"\bissue\d+", re.I), "an issue number"),
    (re.compile(r"\bhelpers?'?\s+(session|jobs?|work|benchmarks?|trainings?|nodes?)\b", re.I), "a helper's work"),
    (re.compile(r"\bother helpers\b|\bhelper sessions?\b", re.I), "helpers"),
    (re.compile(r"\bthe lead's\b", re.I), "the lead"),
]
# Data files whose words are not prose (a tokenizer's vocabulary lists "session" as a word), and
# this file, whose patterns and examples name what they look for.
SKIP = re.compile(r"(^|/)tokenizer\.json$|\.(onnx|npy|png|svg|gz|whl|tar)$|^tests/unit/test_no_narrative\.py$")


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


def test_the_patterns_tell_narrative_from_technical_words():
    assert narrative_lines("measured in the ninth session")
    assert narrative_lines("as this session found")
    assert narrative_lines("earlier sessions trained it")
    assert narrative_lines("the target of issue 24 was met")
    assert narrative_lines("results under benchmarks/results/issue13/")
    assert narrative_lines("shared with other helpers' jobs")
    assert not narrative_lines('session = ort.InferenceSession(path); session.run(None, feeds)')
    assert not narrative_lines('@pytest.fixture(scope="session")')
    assert not narrative_lines("from opensearchpy import helpers; helpers.bulk(client, actions)")
    assert not narrative_lines("a single-threaded onnxruntime session for one query")
    assert not narrative_lines("the page reads its token from GET /api/session")


def test_no_file_tells_how_the_project_was_made():
    problems = [f"{name}:{number}: {what}: {line}"
                for name, text in _tracked_text_files() for number, what, line in narrative_lines(text)]
    assert not problems, "\n".join(problems)
