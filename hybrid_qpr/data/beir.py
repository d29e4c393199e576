"""Retrieval eval sets in the BEIR layout (Thakur et al., NeurIPS 2021 datasets track).

``beir/corpus.jsonl`` holds every question of every split (``{"_id", "title", "text"}``),
``beir/queries.jsonl`` every val and test question (``{"_id", "text"}``), and
``beir/qrels/{val,test}.tsv`` (``query-id  corpus-id  score``, with a header) judge, for
each query, the other questions of its cluster as relevant (score 1). A query's own id
is in the corpus: evaluation must drop it from the results
(``hybrid_qpr.evaluation.metrics.drop_self``), as BEIR does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, get_args

from hybrid_qpr.artifacts import atomic_write, iter_jsonl, iter_rows, open_text, skip_undecodable, write_jsonl
from hybrid_qpr.data.clusters import Cluster
from hybrid_qpr.errors import BadLines, ConfigError, InputError

EvalSplit = Literal["val", "test"]
EVAL_SPLITS: tuple[str, ...] = get_args(EvalSplit)
QRELS_HEADER = ("query-id", "corpus-id", "score")


def normalize_query(text: str) -> str:
    """A query as judgments store and match it: whitespace runs collapsed, ends stripped."""
    return " ".join(text.split())


def query_id(text: str) -> str:
    """A stable id for a judged query text (never equal to a document id of a normal corpus, so the
    evaluator's 'drop the query's own id' rule never removes a judged document)."""
    return "wb-" + hashlib.sha1(normalize_query(text).encode("utf-8")).hexdigest()[:16]


def write_beir(beir_dir: str | Path, splits: Mapping[str, Sequence[Cluster]]) -> dict[str, int]:
    """Write corpus, queries and qrels for ``splits`` (keys ``train``, ``val``, ``test``);
    each file atomically. Returns counts. Ids must be unique across all splits."""
    beir_dir = Path(beir_dir)
    seen: set[str] = set()
    for clusters in splits.values():
        for cluster in clusters:
            for q in cluster.questions:
                if q.id in seen:
                    raise ConfigError(f"question id {q.id!r} occurs twice (cluster {cluster.id}); corpus ids must be unique")
                seen.add(q.id)
    eval_splits = [s for s in ("val", "test") if s in splits]
    corpus = ({"_id": q.id, "title": "", "text": q.text} for clusters in splits.values() for c in clusters for q in c.questions)
    queries = ({"_id": q.id, "text": q.text} for s in eval_splits for c in splits[s] for q in c.questions)
    qrels = {split: ((query.id, doc.id, 1) for cluster in splits[split] for query in cluster.questions
                     for doc in cluster.questions if doc.id != query.id) for split in eval_splits}
    return write_beir_files(beir_dir, corpus, queries, qrels)


def write_beir_files(beir_dir: str | Path, corpus: Iterable[dict], queries: Iterable[dict],
                     qrels: Mapping[str, Iterable[tuple[str, str, int]]]) -> dict[str, int]:
    """Write ``corpus.jsonl`` (records with ``_id``, ``title``, ``text`` and any metadata),
    ``queries.jsonl`` (``_id``, ``text``, any metadata) and ``qrels/<split>.tsv`` for each
    split of ``qrels`` (``(query id, corpus id, grade)`` rows), each file atomically.
    Returns counts: corpus, queries and ``qrels_<split>``."""
    beir_dir = Path(beir_dir)
    counts = {"corpus": write_jsonl(beir_dir / "corpus.jsonl", corpus),
              "queries": write_jsonl(beir_dir / "queries.jsonl", queries)}
    for split, rows in qrels.items():
        n = 0
        with atomic_write(beir_dir / "qrels" / f"{split}.tsv") as fh:
            fh.write("\t".join(QRELS_HEADER) + "\n")
            for query, doc, grade in rows:
                fh.write(f"{query}\t{doc}\t{grade}\n")
                n += 1
        counts[f"qrels_{split}"] = n
    return counts


def load_query_metadata(beir_dir: str | Path, field: str) -> dict[str, str]:
    """Query id -> the value of ``field`` in ``queries.jsonl`` (queries without it are absent).
    Used for per-query filters, e.g. ranking only a question's own candidates (``group``)."""
    path = Path(beir_dir) / "queries.jsonl"
    out: dict[str, str] = {}
    for line, obj in iter_jsonl(path):
        if field not in obj:
            continue
        value = obj[field]
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise InputError(path, line, f"field {field!r} must be a string or an integer, found {type(value).__name__}")
        out[str(obj.get("_id"))] = str(value)
    return out


def load_qrels(path: str | Path, bad_lines: BadLines | None = None) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV (header optional): ``query-id  corpus-id  score``. A malformed
    row goes to ``bad_lines`` (``None``: strict, it raises ``InputError`` naming the line)."""
    bad_lines = bad_lines or BadLines()
    qrels: dict[str, dict[str, int]] = {}
    with open_text(path) as fh:
        for line, row in iter_rows(path, skip_undecodable(fh, bad_lines, header=False)):
            if line == 1 and [c.strip().lower() for c in row] == list(QRELS_HEADER):
                continue
            if len(row) != 3:
                bad_lines.skip(path, line, f"found {len(row)} columns, expected 3 ({', '.join(QRELS_HEADER)})")
                continue
            query, doc, score = (c.strip() for c in row)
            try:
                grade = int(score)
            except ValueError:
                bad_lines.skip(path, line, f"score must be an integer, found {score!r}")
                continue
            qrels.setdefault(query, {})[doc] = grade
    return qrels


def iter_beir_records(path: str | Path, with_title: bool) -> Iterator[tuple[int, str, str, dict]]:
    """``(line, id, text, record)`` for each row of a BEIR ``corpus.jsonl`` or ``queries.jsonl``:
    a non-empty ``title`` is prefixed to the text when ``with_title``; ``record`` keeps every field
    (metadata such as ``group`` or ``ir_rank``). A row without ``_id`` and ``text`` is an ``InputError``."""
    for line, obj in iter_jsonl(path):
        ident, text = obj.get("_id"), obj.get("text")
        if not isinstance(ident, (str, int)) or not isinstance(text, str):
            raise InputError(path, line, 'expected {"_id": str, "text": str}')
        title = obj.get("title") if with_title else None
        yield line, str(ident), f"{title} {text}" if isinstance(title, str) and title else text, obj


def _load_texts(path: Path, with_title: bool) -> dict[str, str]:
    return {ident: text for _, ident, text, _ in iter_beir_records(path, with_title)}


def load_beir(beir_dir: str | Path, split: EvalSplit | Literal["train"]
              ) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """``(corpus, queries, qrels)`` of one split: corpus id -> text (a non-empty BEIR title is
    prefixed to the text), the queries judged in ``qrels/<split>.tsv``, and the qrels. Works on
    any BEIR-layout directory, not only ours. The commands evaluate on val or test; ``train``
    (a BEIR set that ships one, such as SemEval's) is for development benchmarks."""
    if split not in (*EVAL_SPLITS, "train"):
        raise ConfigError(f"split={split!r}: BEIR splits here are 'train', 'val' or 'test'")
    beir_dir = Path(beir_dir)
    for needed in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (beir_dir / needed).is_file():
            raise InputError(beir_dir / needed, None, "missing; expected a BEIR directory (corpus.jsonl, "
                             "queries.jsonl, qrels/<split>.tsv) such as <dataset>/beir from 'hybrid-qpr dataset build'")
    qrels = load_qrels(beir_dir / "qrels" / f"{split}.tsv")
    corpus = _load_texts(beir_dir / "corpus.jsonl", with_title=True)
    all_queries = _load_texts(beir_dir / "queries.jsonl", with_title=False)
    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise InputError(beir_dir / "queries.jsonl", None, f"{len(missing)} judged queries are missing, e.g. {missing[0]!r}")
    queries = {q: all_queries[q] for q in qrels}
    return corpus, queries, qrels
