"""Build answer-selection / answer-retrieval datasets: question -> answer sentence.

Two sources:

* **answer-selection files** (WikiQA, TrecQA; ``hybrid_qpr.data.answers``): each question has
  labelled candidate sentences. The eval task ranks a question's *own* candidates, so every
  corpus document and query carries ``group`` (the qid), and evaluation filters each query on
  its group (``hybrid-qpr evaluate --task answer-selection``; MAP and MRR as in ASBERT).
* **SQuAD 1.1** (``hybrid_qpr.data.squad``): paragraphs split into sentences, the gold sentence
  holds the answer span. Articles are split train/val/test with a seed; the corpus is every
  sentence of the val and test articles and each query ranks all of them (ReQA style;
  ``--task answer-retrieval``: MRR, R@1, R@5 as in Cross-VAE). Documents carry ``article``.

Layout written (atomically, built beside ``out`` and swapped in)::

    out/train.jsonl val.jsonl test.jsonl   one question per line: {"id", "question", "group",
                                           "positives": [sentence, ...], "negatives": [sentence, ...]}
    out/manifest.json                      task, sources, options, counts, file hashes
    out/beir/corpus.jsonl queries.jsonl qrels/<split>.tsv   (val and test questions only)

``positives`` are the correct sentences; ``negatives`` the question's labelled wrong candidates
(answer selection) or the other sentences of its paragraph (SQuAD): the hard negatives of
the triplet loss. A question with no correct sentence stays in its split file (it has
negatives) but cannot be judged, so it is left out of the BEIR queries.

* **a BEIR directory with every candidate judged** (SemEval-2016 Task 3 subtask B, community QA;
  ``build_from_beir``): each judged query of ``qrels/<split>.tsv`` becomes a question whose
  candidates graded > 0 are its correct texts and those graded 0 its labelled wrong ones, so the
  cross-encoder trains and selects on the forum's own judgments. The val/test part of ``beir/`` is
  the input's rows, metadata kept (``group``, ``ir_rank``), with every judgment, grade 0 included:
  ``--task community-qa`` counts a question without a relevant candidate as 0, as the task does.

Which split a file becomes: one file alone is split by question (answer selection) or by
article (SQuAD) with ``seed`` and ``fractions``; ``split_name`` makes the whole file one split
(e.g. a dev file as ``val``); extra files can be given as further splits.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hybrid_qpr.artifacts import atomic_directory, iter_jsonl, write_json, write_jsonl
from hybrid_qpr.data.beir import write_beir_files
from hybrid_qpr.data.dataset import SKIP_HINT, file_sha256, source_record, splits_fingerprint
from hybrid_qpr.data.splits import DEFAULT_FRACTIONS, SPLITS, Split, assign_indices, parse_fractions
from hybrid_qpr.errors import ArtifactError, BadLines, ConfigError, InputError, OnBadLine, SkippedLine

log = logging.getLogger(__name__)

FORMAT = "hybrid-qpr-answers"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
Task = Literal["answer-selection", "answer-retrieval", "community-qa"]
SQUAD_FRACTIONS = (0.7, 0.15, 0.15)


@dataclass
class AnswerRecord:
    """One question of a split file, with the sentences a trainer needs."""

    id: str
    question: str
    group: str
    positives: list[str]
    negatives: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "group": self.group, "positives": self.positives,
                "negatives": self.negatives}


@dataclass
class EvalItems:
    """What one split contributes to the BEIR files."""

    corpus: list[dict] = field(default_factory=list)
    queries: list[dict] = field(default_factory=list)
    qrels: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass
class AnswerDatasetReport:
    out: str
    task: Task
    sources: list[dict[str, Any]]
    options: dict[str, Any]
    counts: dict[str, dict[str, int]]
    skipped: list[SkippedLine] = field(default_factory=list)
    beir: dict[str, int] = field(default_factory=dict)
    files: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0
    modified: list[str] = field(default_factory=list)  # split files changed since the build (stats only)

    def manifest(self) -> dict[str, Any]:
        from hybrid_qpr import __version__

        body = {k: v for k, v in self.__dict__.items() if k not in ("out", "modified")}
        body["skipped"] = [s.to_dict() for s in self.skipped]
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "created_by": f"hybrid-qpr {__version__}",
                "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **body}


# ---------------------------------------------------------------- answer selection (WikiQA, TrecQA)
def _selection_split(questions) -> tuple[list[AnswerRecord], EvalItems]:
    records, items = [], EvalItems()
    for q in questions:
        records.append(AnswerRecord(q.qid, q.text, q.qid, q.positives, q.negatives))
        if not q.positives:
            continue
        items.queries.append({"_id": q.qid, "text": q.text, "group": q.qid})
        for k, cand in enumerate(q.candidates, start=1):
            doc_id = f"{q.qid}-{k}"
            items.corpus.append({"_id": doc_id, "title": "", "text": cand.text, "group": q.qid})
            if cand.label > 0:
                items.qrels.append((q.qid, doc_id, 1))
    return records, items


def build_answer_selection(path: str | Path, out: str | Path, *, split_name: Split | None = None,
                           extra: Mapping[str, str | Path] | None = None, seed: int = 13,
                           fractions: Sequence[float] = DEFAULT_FRACTIONS,
                           on_bad_line: OnBadLine = "error") -> AnswerDatasetReport:
    """WikiQA/TrecQA-layout file(s) -> answer-selection dataset directory (module docstring).

    ``extra`` maps further split names to files (``{"val": "wikiqa-dev.tsv"}``); then ``path``
    is the ``split_name`` split (default ``train``)."""
    from hybrid_qpr.data.answers import read_answer_questions

    started = time.perf_counter()
    fractions = parse_fractions(fractions)
    bad_lines = BadLines(on_bad_line, hint=SKIP_HINT)
    by_split: dict[str, list] = {s: [] for s in SPLITS}
    sources = []
    for split, file in _assign_files(path, split_name, extra):
        questions = read_answer_questions(file, bad_lines)
        sources.append({**source_record(file, "answer-selection"), "split": split or "seeded", "questions": len(questions)})
        if split is None:
            for name, indices in assign_indices(len(questions), fractions, seed).items():
                by_split[name].extend(questions[i] for i in indices)
        else:
            by_split[split].extend(questions)
    _unique([q.qid for s in SPLITS for q in by_split[s]], "question id (qid)")
    built = {s: _selection_split(by_split[s]) for s in SPLITS}
    options = {"seed": seed, "fractions": list(fractions), "split_name": split_name, "on_bad_line": on_bad_line}
    return _write(out, "answer-selection", built, sources, options, bad_lines.skipped, started)


# ---------------------------------------------------------------- answer retrieval (SQuAD)
def _retrieval_split(articles, article_ids: list[int]) -> tuple[list[AnswerRecord], EvalItems]:
    records, items = [], EvalItems()
    for a, article in zip(article_ids, articles):
        for p, para in enumerate(article.paragraphs):
            texts = para.sentence_texts()
            ids = [f"a{a}p{p}s{s}" for s in range(len(texts))]
            for doc_id, text in zip(ids, texts):
                items.corpus.append({"_id": doc_id, "title": "", "text": text, "article": article.title,
                                     "paragraph": f"a{a}p{p}"})
            for q in para.questions:
                gold = set(q.gold)
                records.append(AnswerRecord(q.qid, q.text, article.title, [texts[i] for i in q.gold],
                                            [t for i, t in enumerate(texts) if i not in gold]))
                items.queries.append({"_id": q.qid, "text": q.text, "article": article.title})
                items.qrels.extend((q.qid, ids[i], 1) for i in q.gold)
    return records, items


def build_answer_retrieval(path: str | Path, out: str | Path, *, split_name: Split | None = None,
                           extra: Mapping[str, str | Path] | None = None, seed: int = 13,
                           fractions: Sequence[float] = SQUAD_FRACTIONS,
                           on_bad_line: OnBadLine = "error") -> AnswerDatasetReport:
    """SQuAD 1.1 file(s) -> answer-retrieval dataset directory (module docstring). Articles,
    not questions, are split, so no held-out sentence was seen in training."""
    from hybrid_qpr.data.squad import read_squad

    started = time.perf_counter()
    fractions = parse_fractions(fractions)
    bad_lines = BadLines(on_bad_line, hint=SKIP_HINT)
    by_split: dict[str, list[tuple[int, Any]]] = {s: [] for s in SPLITS}
    sources = []
    offset = 0
    for split, file in _assign_files(path, split_name, extra):
        articles = read_squad(file, bad_lines)
        sources.append({**source_record(file, "squad"), "split": split or "seeded", "articles": len(articles)})
        numbered = list(enumerate(articles, start=offset))  # article numbers stay unique across files
        offset += len(articles)
        if split is None:
            for name, indices in assign_indices(len(articles), fractions, seed).items():
                by_split[name].extend(numbered[i] for i in indices)
        else:
            by_split[split].extend(numbered)
    _unique([q.qid for s in SPLITS for _, art in by_split[s] for p in art.paragraphs for q in p.questions], "question id")
    built = {s: _retrieval_split([art for _, art in by_split[s]], [a for a, _ in by_split[s]]) for s in SPLITS}
    options = {"seed": seed, "fractions": list(fractions), "split_name": split_name, "on_bad_line": on_bad_line,
               "articles": {s: [art.title for _, art in by_split[s]] for s in SPLITS}}
    return _write(out, "answer-retrieval", built, sources, options, bad_lines.skipped, started)


# ---------------------------------------------------------------- labelled candidates in BEIR (SemEval)
def _beir_split(beir_dir: Path, split: str, queries: dict[str, tuple[str, dict]],
                corpus: dict[str, tuple[str, dict]]) -> tuple[list[AnswerRecord], EvalItems]:
    """One split's questions (from ``qrels/<split>.tsv``) and, for an eval split, its BEIR rows."""
    from hybrid_qpr.data.beir import load_qrels

    path = beir_dir / "qrels" / f"{split}.tsv"
    records, items = [], EvalItems()
    listed: set[str] = set()  # a document judged for two queries is one corpus row
    for qid, grades in load_qrels(path).items():
        if qid not in queries:
            raise InputError(path, None, f"query {qid!r} is judged but not in {beir_dir / 'queries.jsonl'}")
        missing = [doc for doc in grades if doc not in corpus]
        if missing:
            raise InputError(path, None, f"query {qid!r}: {len(missing)} judged documents are not in "
                             f"{beir_dir / 'corpus.jsonl'}, e.g. {missing[0]!r}")
        text, query = queries[qid]
        group = str(query.get("group", qid))
        records.append(AnswerRecord(qid, text, group, [corpus[d][0] for d, g in grades.items() if g > 0],
                                    [corpus[d][0] for d, g in grades.items() if g <= 0]))
        items.queries.append({**query, "group": group})
        items.corpus.extend({**corpus[doc][1], "group": corpus[doc][1].get("group", group)}
                            for doc in grades if doc not in listed)
        listed.update(grades)
        items.qrels.extend((qid, doc, grade) for doc, grade in grades.items())
    return records, items


def build_from_beir(beir_dir: str | Path, out: str | Path) -> AnswerDatasetReport:
    """A BEIR directory whose qrels list every candidate of a query, graded (``qrels/train.tsv``,
    ``val.tsv``, ``test.tsv``: each present one becomes that split) -> an answer dataset
    directory (module docstring): ``reranker train`` learns from its train split and selects on
    its val split (``--dev``, MAP of each question's own candidates)."""
    from hybrid_qpr.data.beir import iter_beir_records

    started = time.perf_counter()
    beir_dir = Path(beir_dir)
    for needed in ("corpus.jsonl", "queries.jsonl"):
        if not (beir_dir / needed).is_file():
            raise InputError(beir_dir / needed, None, "missing; expected a BEIR directory (corpus.jsonl, queries.jsonl, "
                             "qrels/<split>.tsv)")
    present = [s for s in SPLITS if (beir_dir / "qrels" / f"{s}.tsv").is_file()]
    if not present:
        raise InputError(beir_dir / "qrels", None, f"no {', '.join(f'{s}.tsv' for s in SPLITS)}; each present one "
                         "becomes that split")
    corpus = {ident: (text, record) for _, ident, text, record in iter_beir_records(beir_dir / "corpus.jsonl", True)}
    queries = {ident: (text, record) for _, ident, text, record in iter_beir_records(beir_dir / "queries.jsonl", False)}
    built = {s: _beir_split(beir_dir, s, queries, corpus) if s in present else ([], EvalItems()) for s in SPLITS}
    _unique([r.id for s in SPLITS for r in built[s][0]], "query id")
    sources = [{**source_record(beir_dir / "qrels" / f"{s}.tsv", "beir-qrels"), "split": s,
                "questions": len(built[s][0])} for s in present]
    sources += [{**source_record(beir_dir / name, "beir"), "split": "texts of every split"}
                for name in ("corpus.jsonl", "queries.jsonl")]
    return _write(out, "community-qa", built, sources, {"beir": str(beir_dir.resolve())}, [], started)


# ---------------------------------------------------------------- shared
def _assign_files(path, split_name, extra) -> list[tuple[str | None, str | Path]]:
    """(split or None = seeded split, file) for the main file and the extra ones."""
    extra = dict(extra or {})
    for name in extra:
        if name not in SPLITS:
            raise ConfigError(f"split {name!r}: allowed split names are {', '.join(SPLITS)}")
    if split_name is not None and split_name not in SPLITS:
        raise ConfigError(f"split_name={split_name!r}: allowed values are {', '.join(SPLITS)}")
    main = split_name or ("train" if extra else None)
    if main is not None and main in extra:
        raise ConfigError(f"two files were given for the {main} split; give each split at most one file")
    return [(main, path), *((name, file) for name, file in extra.items())]


def _unique(ids: list[str], what: str) -> None:
    seen: set[str] = set()
    for ident in ids:
        if ident in seen:
            raise ConfigError(f"{what} {ident!r} occurs in two questions (or in two input files); ids must be unique")
        seen.add(ident)


def _split_counts(records: Sequence[AnswerRecord]) -> dict[str, int]:
    return {"questions": len(records), "with_answer": sum(1 for r in records if r.positives),
            "positives": sum(len(r.positives) for r in records), "negatives": sum(len(r.negatives) for r in records)}


def _write(out, task: Task, built: dict[str, tuple[list[AnswerRecord], EvalItems]], sources, options,
           skipped: list[SkippedLine], started: float) -> AnswerDatasetReport:
    eval_splits = [s for s in ("val", "test") if built[s][1].queries]
    counts = {s: {**_split_counts(built[s][0]), "corpus": len(built[s][1].corpus) if s in eval_splits else 0,
                  "queries": len(built[s][1].queries) if s in eval_splits else 0} for s in SPLITS}
    report = AnswerDatasetReport(str(out), task, sources, options, counts, skipped)
    if skipped:
        log.warning("skipped %d bad record(s); they are listed in %s", len(skipped), MANIFEST)
    with atomic_directory(out, MANIFEST) as tmp:
        for split in SPLITS:
            write_jsonl(tmp / f"{split}.jsonl", (r.to_dict() for r in built[split][0]))
            report.files[f"{split}.jsonl"] = {"sha256": file_sha256(tmp / f"{split}.jsonl"), "questions": len(built[split][0])}
        report.beir = write_beir_files(
            tmp / "beir", (d for s in eval_splits for d in built[s][1].corpus),
            (q for s in eval_splits for q in built[s][1].queries), {s: built[s][1].qrels for s in eval_splits})
        report.seconds = round(time.perf_counter() - started, 3)
        write_json(tmp / MANIFEST, report.manifest())
    log.info("wrote %s (%s) in %.1fs", out, task, report.seconds)
    return report


def read_answer_records(dataset_dir: str | Path, split: Split) -> list[AnswerRecord]:
    """The questions of one split file written by ``build_answer_selection``/``build_answer_retrieval``."""
    path = Path(dataset_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise ArtifactError(f"{path}: not found; is {dataset_dir} a directory written by "
                            "'hybrid-qpr dataset from-answers' or 'from-squad'?")
    records = []
    for line, obj in iter_jsonl(path):
        try:
            record = AnswerRecord(str(obj["id"]), obj["question"], str(obj.get("group", "")), list(obj["positives"]),
                                  list(obj.get("negatives", [])))
        except (KeyError, TypeError) as exc:
            raise InputError(path, line, f'expected {{"id", "question", "positives": [...], "negatives": [...]}} ({exc})') from None
        if not isinstance(record.question, str) or not all(isinstance(t, str) for t in record.positives + record.negatives):
            raise InputError(path, line, "question, positives and negatives must be strings")
        records.append(record)
    return records


def answer_dataset_stats(dataset_dir: str | Path) -> AnswerDatasetReport:
    """Read an answer dataset back (``hybrid-qpr dataset stats``): the manifest, with each
    split's question counts recomputed from its file (so edits after the build show up) and
    the split files whose sha256 no longer matches the manifest listed in ``modified``."""
    from hybrid_qpr.artifacts import read_manifest

    dataset_dir = Path(dataset_dir)
    path = dataset_dir / MANIFEST
    manifest = read_manifest(path, FORMAT, FORMAT_VERSION, what="hybrid-qpr answer dataset manifest",
                             missing=f"{path}: not found; is {dataset_dir} a directory written by "
                                     "'hybrid-qpr dataset from-answers' or 'from-squad'?",
                             fix="build the dataset again")
    report = AnswerDatasetReport(str(dataset_dir), manifest.get("task", "answer-selection"), manifest.get("sources", []),
                                 manifest.get("options", {}), manifest.get("counts", {}),
                                 [SkippedLine.from_record(s) for s in manifest.get("skipped", [])],
                                 manifest.get("beir", {}), manifest.get("files", {}), manifest.get("seconds", 0.0))
    for split in SPLITS:
        report.counts[split] = {**report.counts.get(split, {"corpus": 0, "queries": 0}),
                                **_split_counts(read_answer_records(dataset_dir, split))}
        name = f"{split}.jsonl"
        if report.files.get(name, {}).get("sha256") != file_sha256(dataset_dir / name):
            report.modified.append(name)
    if report.modified:
        log.warning("%s: %s changed since the build", dataset_dir, ", ".join(report.modified))
    return report


def answer_dataset_fingerprint(dataset_dir: str | Path) -> str:
    """16 hex of sha256 over the three split files: names the training data in a model config."""
    return splits_fingerprint(file_sha256(Path(dataset_dir) / f"{split}.jsonl") for split in SPLITS)
