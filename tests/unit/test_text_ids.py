"""One id rule end to end: a pairs file without qids, ingested as it is, gets the ids of the
BEIR qrels ``dataset build`` writes from the same file, so evaluation scores real matches."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.data.clusters import text_id as clusters_text_id
from hybrid_qpr.data.documents import iter_documents, text_id as documents_text_id
from hybrid_qpr.text import text_id

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_one_rule_everywhere():
    assert clusters_text_id is text_id and documents_text_id is text_id
    # Case, spacing and punctuation other than "?" do not make another question.
    assert text_id("How do I reset my Netflix password?") == text_id("how do i  reset my netflix password ?")
    assert text_id("reset password?") != text_id("reset password")


def _pairs_without_qids(path: Path) -> Path:
    """Chain each sample group's questions into duplicate pairs; every other pair repeats
    its first question in upper case, which both readers must treat as the same question."""
    groups: dict[str, list[str]] = {}
    for line in (EXAMPLES / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        groups.setdefault(record["group"], []).append(record["text"])
    rows = ["question1\tquestion2\tis_duplicate"]
    for texts in groups.values():
        for i, (a, b) in enumerate(zip(texts, texts[1:])):
            rows.append(f"{a.upper() if i % 2 else a}\t{b}\t1")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_pairs_file_ingested_without_qids_matches_dataset_build_qrels(tmp_path):
    pairs = _pairs_without_qids(tmp_path / "pairs.tsv")
    runner = CliRunner()
    built = runner.invoke(cli, ["dataset", "build", str(pairs), "--out", str(tmp_path / "ds")], catch_exceptions=False)
    assert built.exit_code == 0, built.output
    ingested = runner.invoke(cli, ["ingest", str(pairs), "--index", str(tmp_path / "idx")], catch_exceptions=False)
    assert ingested.exit_code == 0, ingested.output

    doc_ids = {doc.id for _, doc in iter_documents(pairs)}
    distinct_questions = {text_id(t) for line in pairs.read_text(encoding="utf-8").splitlines()[1:] for t in line.split("\t")[:2]}
    assert doc_ids == distinct_questions  # the upper-case repeats did not become documents of their own
    corpus, queries, qrels = load_beir(tmp_path / "ds" / "beir", "test")
    assert qrels and set(corpus) <= doc_ids
    index = LocalIndex.open(tmp_path / "idx")
    assert index.count() == len(doc_ids)
    judged = {doc for rel in qrels.values() for doc in rel} | set(queries)
    assert set(index.documents(sorted(judged))) == judged  # every judged id is an indexed document

    report = runner.invoke(cli, ["evaluate", "--beir", str(tmp_path / "ds" / "beir"), "--split", "test", "--index",
                                 str(tmp_path / "idx"), "--out", str(tmp_path / "report"), "--modes", "bm25,knn",
                                     "--no-plot"],
                           catch_exceptions=False)
    assert report.exit_code == 0, report.output
    results = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    for mode in ("bm25", "knn"):  # with ids that did not match, every query would score 0
        assert results["results"][mode]["metrics"]["MRR@20"] > 0.3
