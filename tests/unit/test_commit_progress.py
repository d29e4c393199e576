"""Every step of a local commit shows its progress in documents, with the time left: the
encoding, the BM25 postings, the vector base's HNSW graph, its locality order and the efSearch
calibration; a library call without progress prints nothing. A bank of copies of one question
(an FAQ log) builds its graph and locality order like any other."""

from __future__ import annotations

import re

import numpy as np

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.locality import locality_order
from hybrid_qpr import progress
from hybrid_qpr.progress import PLAIN_SECONDS_VARIABLE
from hybrid_qpr.types import Document


def test_an_ingest_shows_every_step_of_its_commit_in_documents(tmp_path, committed_encoder, question_bank,
                                                                monkeypatch, capsys):
    monkeypatch.setenv(PLAIN_SECONDS_VARIABLE, "0")  # a line per item: every step shows
    monkeypatch.setattr(progress, "STEPS_FROM", 100)  # the steps of this small commit too
    docs = question_bank  # 200
    index = LocalIndex.create(tmp_path / "idx", committed_encoder, flat_threshold=100)  # a vector base at 200
    index.ingest(docs, committed_encoder, batch_size=64)
    err = capsys.readouterr().err.splitlines()

    def lines(step: str) -> list[str]:
        return [line for line in err if line.startswith(step)]

    encoding = lines("encoding documents: ")
    assert encoding[0].startswith("encoding documents: 64/200 (32%)") and "s left" in encoding[0]
    assert encoding[-1].startswith("encoding documents: 200/200 (100%)") and encoding[-1].endswith("done")
    assert lines("BM25 postings: documents: ")[-1].startswith("BM25 postings: documents: 200/200 (100%)")
    graph = lines("HNSW graph: documents added: ")
    assert graph and graph[-1].startswith("HNSW graph: documents added: 200/200 (100%)")
    assert lines("HNSW graph: 200 documents put in locality order: 1/1 (100%)")
    exact = lines("efSearch calibration: exact neighbours of probes among 200 documents: ")
    assert exact and exact[-1].startswith("efSearch calibration: exact neighbours of probes among 200 documents: "
                                          "200/200 (100%)")
    ladder = lines("efSearch calibration: 200 probes searched at each efSearch of 16-512")
    assert ladder and re.search(r": \d+/11 \(\d+%\)", ladder[0])
    # a caller that asks for no progress sees none, the commit's steps included
    index.ingest([Document(f"new-{i}", d.text + " again", {}) for i, d in enumerate(docs)], committed_encoder,
                 show_progress=False)
    assert capsys.readouterr().err == ""


def test_copies_of_one_question_build_a_graph_and_a_locality_order(tmp_path, committed_encoder):
    many = [Document(f"copy-{i}", "how do i reset my password", {}) for i in range(400)]
    many += [Document(f"other-{i}", f"where is parcel number {i}", {}) for i in range(100)]
    index = LocalIndex.create(tmp_path / "idx", committed_encoder, flat_threshold=100)
    index.ingest(many, committed_encoder, show_progress=False)
    hits = index.knn(committed_encoder.encode("how do i reset my password")[0], 5)
    assert len(hits) == 5 and all(h.id.startswith("copy-") for h in hits)
    vectors = np.random.default_rng(0).normal(size=(1000, 16)).astype(np.float32)
    vectors[:300] = vectors[0]  # 300 copies of one vector: no k-means split can part them
    order = locality_order(vectors)
    assert sorted(order.tolist()) == list(range(1000))


def test_a_small_commit_shows_only_its_encoding(tmp_path, committed_encoder, question_bank, monkeypatch, capsys):
    monkeypatch.setenv(PLAIN_SECONDS_VARIABLE, "0")
    index = LocalIndex.create(tmp_path / "idx", committed_encoder, flat_threshold=100)
    index.ingest(question_bank, committed_encoder, batch_size=64)  # 200 documents: below progress.STEPS_FROM
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("encoding documents: ") for line in err)
