"""Paraphrase clusters: from duplicate pairs by transitive closure, or from QA logs by
distant supervision with the SDML paper's coherence filter.

A cluster is a set of questions with the same meaning. Training needs clusters (a batch
must not hold two pairs of one cluster, or they become false negatives) and evaluation
needs them (a query's relevant documents are the other questions of its cluster).
In data/ and training "cluster" always means this (the SDML paper's term), never a search
cluster (docs/ARCHITECTURE.md, "Words we use").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from hybrid_qpr.data.pairs import QuestionPair
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.text import normalize_text, text_id, tokenize

log = logging.getLogger(__name__)

KeyMode = Literal["auto", "qid", "text"]
KEY_MODES: tuple[str, ...] = get_args(KeyMode)


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    text: str


@dataclass(frozen=True)
class Cluster:
    id: str
    questions: list[Question]

    def to_dict(self) -> dict:
        return {"id": self.id, "questions": [{"id": q.id, "text": q.text} for q in self.questions]}


class _UnionFind:
    """Disjoint sets over dense integer nodes, with path halving and union by size."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.size: list[int] = []

    def add(self) -> int:
        self.parent.append(len(self.parent))
        self.size.append(1)
        return len(self.parent) - 1

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]


@dataclass
class ClusteringReport:
    """What clustering did, for the summary table and the dataset manifest."""

    key: Literal["qid", "text"]
    pairs_read: int = 0
    duplicate_pairs: int = 0
    non_duplicate_pairs: int = 0
    self_pairs: int = 0  # both sides are the same question
    questions: int = 0
    qid_text_conflicts: int = 0  # one qid seen with two different texts (first text kept)
    clusters: int = 0
    singletons_dropped: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def clusters_from_pairs(pairs: Iterable[QuestionPair], key: KeyMode = "auto") -> tuple[list[Cluster], ClusteringReport]:
    """Group the questions of duplicate pairs into clusters by transitive closure.

    a~b and b~c put a, b, c in one cluster (union-find). Questions are identified by their
    qids (``key="qid"``), or by :func:`hybrid_qpr.text.text_id` when the file has no qids
    (``key="text"``); ``"auto"`` uses qids when every duplicate pair has them. Pairs with
    ``is_duplicate = False`` are counted and ignored. Clusters come out in order of first
    appearance with ids ``c0, c1, ...``; questions within a cluster in order of first
    appearance. A cluster of one question (only self-pairs) is dropped and counted.
    """
    if key not in ("auto", "qid", "text"):
        raise ConfigError(f"key={key!r}: must be 'auto', 'qid' or 'text'")
    duplicates: list[QuestionPair] = []
    non_duplicates = 0
    for pair in pairs:
        if pair.is_duplicate:
            duplicates.append(pair)
        else:
            non_duplicates += 1
    if key == "auto":
        key = "qid" if duplicates and all(p.qid1 is not None for p in duplicates) else "text"
    if key == "qid":
        missing = next((p for p in duplicates if p.qid1 is None), None)
        if missing is not None:
            raise ConfigError(f"key='qid' but the pair on line {missing.line} has no qids; use key='text'")
    report = ClusteringReport(key=key, pairs_read=len(duplicates) + non_duplicates,
                              duplicate_pairs=len(duplicates), non_duplicate_pairs=non_duplicates)

    uf = _UnionFind()
    node_of: dict[str, int] = {}
    questions: list[Question] = []

    def node(qid: str | None, text: str) -> int:
        ident = qid if key == "qid" and qid is not None else text_id(text)
        found = node_of.get(ident)
        if found is not None:
            if key == "qid" and questions[found].text != text:
                report.qid_text_conflicts += 1
            return found
        n = uf.add()
        node_of[ident] = n
        questions.append(Question(ident, text))
        return n

    for pair in duplicates:
        a = node(pair.qid1, pair.question1)
        b = node(pair.qid2, pair.question2)
        if a == b:
            report.self_pairs += 1
        uf.union(a, b)
    report.questions = len(questions)
    if report.qid_text_conflicts:
        log.warning("%d qid(s) appear with more than one text; the first text seen is kept", report.qid_text_conflicts)

    members: dict[int, list[Question]] = {}
    for n, question in enumerate(questions):
        members.setdefault(uf.find(n), []).append(question)
    clusters: list[Cluster] = []
    for group in members.values():  # dicts keep insertion order: first appearance
        if len(group) < 2:
            report.singletons_dropped += 1
            continue
        clusters.append(Cluster(f"c{len(clusters)}", group))
    report.clusters = len(clusters)
    return clusters, report


def coherence(texts: list[str]) -> float:
    """Lexical coherence of a cluster (SDML paper, Bonadiman et al. 2019, eqs. 5-6).

    ``S = union over questions q of T_q`` (the cluster's token set, T_q the token set of q)
    and ``c = (1/|C|) * sum_q |T_q ∩ S| / |S|``: the mean overlap of each question's
    tokens with the cluster's, i.e. the mean Jaccard similarity of T_q and S (T_q is a
    subset of S). 1 when all questions use the same words; close to 0 for a log cluster
    whose questions share nothing (noise from an over-generic answer). Tokens come from
    the project tokenizer. A cluster without any token has coherence 0.
    """
    if not texts:
        raise ConfigError("coherence of an empty cluster is undefined")
    token_sets = [set(tokenize(t)) for t in texts]
    union: set[str] = set().union(*token_sets)
    if not union:
        return 0.0
    return sum(len(ts & union) for ts in token_sets) / (len(token_sets) * len(union))


@dataclass(frozen=True, slots=True)
class QALogRecord:
    """One row of a QA log: a question and the id of the answer it received."""

    line: int
    question: str
    answer_id: str


@dataclass
class QALogReport:
    """Counts of distant supervision, for the summary table and the manifest."""

    records: int = 0
    answers: int = 0
    questions: int = 0  # distinct questions (by normalized text) per answer, summed
    too_small: int = 0  # answers with fewer than 2 distinct questions
    kept: int = 0
    dropped_incoherent: int = 0
    min_coherence: float = 0.1

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def clusters_from_qa_log(records: Iterable[QALogRecord], min_coherence: float = 0.1) -> tuple[list[Cluster], QALogReport]:
    """Distant supervision: the questions that received the same answer form a cluster
    (SDML paper, section 3), then clusters with :func:`coherence` below ``min_coherence``
    (paper default 0.1) are dropped as noise.

    Within one answer, questions with the same normalized text are merged (first text
    kept). Answers with fewer than two distinct questions cannot give a pair and are
    counted as ``too_small``. Question ids come from :func:`hybrid_qpr.text.text_id`; a
    question that received several answers lands in several clusters, so its id is made
    unique per cluster (``<cluster>:<tid>``). Clusters are ordered by first appearance.
    """
    if not 0.0 <= min_coherence <= 1.0:
        raise ConfigError(f"min_coherence={min_coherence}: must be between 0 and 1 (the SDML paper uses 0.1)")
    report = QALogReport(min_coherence=min_coherence)
    by_answer: dict[str, dict[str, str]] = {}
    for record in records:
        report.records += 1
        texts = by_answer.setdefault(record.answer_id, {})
        texts.setdefault(normalize_text(record.question), record.question)
    report.answers = len(by_answer)
    clusters: list[Cluster] = []
    seen_ids: dict[str, int] = {}
    for answer_id, texts in by_answer.items():
        report.questions += len(texts)
        if len(texts) < 2:
            report.too_small += 1
            continue
        c = coherence(list(texts.values()))
        if c < min_coherence:
            report.dropped_incoherent += 1
            continue
        cluster_id = f"c{len(clusters)}"
        members = []
        for text in texts.values():
            qid = text_id(text)
            seen_ids[qid] = seen_ids.get(qid, 0) + 1
            members.append(Question(qid if seen_ids[qid] == 1 else f"{cluster_id}:{qid}", text))
        clusters.append(Cluster(cluster_id, members))
        log.debug("answer %s -> cluster %s (coherence %.3f)", answer_id, cluster_id, c)
    report.kept = len(clusters)
    return clusters, report
