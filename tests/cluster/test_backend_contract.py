"""One set of checks of the ``Backend`` contract (``hybrid_qpr.backends.base``), run against
every backend: the embedded index and both real cluster nodes (see conftest.py for how the
nodes are found; the cluster runs never skip when ``CI`` is set).

Each check uses only what the contract declares, the way ``search.py``, the CLI, the
workbench and evaluation do, and expects the same answer from every backend. The searcher's
path for a backend without ``bm25_and_knn`` (``Capabilities.batched_bm25_and_knn`` off) runs
here on each real backend, with its capability turned off.
"""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest

from hybrid_qpr.backends.base import (Backend, Capabilities, batches_lists, reader_of, reads_snapshots, runs_in_engine,
                                      takes_knn_settings)
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document, QueryVector

BACKENDS = ("local", pytest.param("opensearch", marks=pytest.mark.cluster),
            pytest.param("elasticsearch", marks=pytest.mark.cluster))
QUERY = "how do i change my email address?"

# Input lines every backend skips, with the reason it gives (line numbers as an ingest of a file passes them).
BAD_LINES = [(3, Document("", "a question without an id?")),
             (5, Document(" q-padded", "a question whose id has a leading space?")),
             (8, Document("q-empty", "   "))]
BAD_REASONS = {3: "empty id", 5: "leading or trailing whitespace", 8: "empty text"}


@pytest.fixture(params=BACKENDS)
def empty_backend(request, tmp_path, committed_encoder):
    """A backend of each kind on a fresh index that holds no documents yet (a cluster index is
    created by the first ingest, as ``hybrid-qpr ingest`` does; dropped afterwards)."""
    if request.param == "local":
        from hybrid_qpr.backends.local import LocalIndex

        backend = LocalIndex.create(tmp_path / "idx", committed_encoder)
        yield backend
        backend.close()
        return
    import importlib

    engine = importlib.import_module(f"hybrid_qpr.backends.{request.param}")
    cls = engine.OpenSearchBackend if request.param == "opensearch" else engine.ElasticsearchBackend
    backend = cls(engine.connect(request.getfixturevalue(f"{request.param}_url")),
                  f"hqpr-contract-{uuid.uuid4().hex[:10]}")
    yield backend
    backend.drop()
    backend.close()


@pytest.fixture()
def filled(empty_backend, question_bank, committed_encoder):
    """The backend holding ``question_bank``, ingested as numbered lines with ``BAD_LINES`` among them."""
    lines = [(i + 10, doc) for i, doc in enumerate(question_bank)]
    report = empty_backend.ingest(BAD_LINES + lines, committed_encoder, batch_size=64, show_progress=False)
    return empty_backend, report


def test_ingest_reports_skipped_lines_the_same_way_on_every_backend(filled, question_bank, committed_encoder):
    backend, report = filled
    assert (report.indexed, report.updated, report.failed) == (len(question_bank), 0, [])
    assert [bad.line for bad in report.skipped] == [3, 5, 8] and all(bad.path is None for bad in report.skipped)
    for bad in report.skipped:
        assert BAD_REASONS[bad.line] in bad.reason, bad
    assert [backend.document_problem(doc) for _, doc in BAD_LINES] == [bad.reason for bad in report.skipped]
    assert backend.document_problem(question_bank[0]) is None
    assert all(isinstance(note, str) and note for note in report.notes)
    # a plain Document is numbered by its position in the input, from 1
    again = backend.ingest([question_bank[0], BAD_LINES[2][1]], committed_encoder, show_progress=False)
    assert (again.indexed, again.updated) == (0, 1) and [(bad.line, bad.reason) for bad in again.skipped] == [(2, report.skipped[2].reason)]


def test_what_the_contract_declares_is_there_and_answers(filled, question_bank, committed_encoder):
    backend, _ = filled
    assert isinstance(backend, Backend)  # every declared member (runtime_checkable)
    assert isinstance(backend.capabilities, Capabilities)
    assert backend.exists() and backend.count() == len(question_bank)
    assert backend.distance == committed_encoder.distance
    assert backend.model_fingerprint == committed_encoder.fingerprint
    assert backend.model_dir is not None
    backend.check_encoder(committed_encoder)
    docs = backend.documents(["q000", "q123", "missing"])
    assert set(docs) == {"q000", "q123"} and docs["q123"] == question_bank[123]

    bm25 = backend.bm25(QUERY, 5)
    vector = committed_encoder.encode([QUERY])[0]
    knn = backend.knn(vector, 5)
    assert len(bm25) == len(knn) == 5 and bm25[0].id == knn[0].id == "q010"
    assert [h.score for h in bm25] == sorted((h.score for h in bm25), reverse=True)
    assert [h.score for h in knn] == sorted((h.score for h in knn), reverse=True)
    filtered = backend.bm25(QUERY, 50, {"topic": "email address"})
    assert len(filtered) == 10 and all(h.id in {d.id for d in question_bank[10:20]} for h in filtered)
    scores = backend.vector_scores(vector, [h.id for h in knn] + ["missing"])
    assert set(scores) == {h.id for h in knn}
    assert np.allclose([scores[h.id] for h in knn], [h.score for h in knn], atol=1e-4)


def test_fusion_defaults_round_trip_and_delete_counts_what_existed(filled, question_bank):
    backend, _ = filled
    assert backend.fusion_defaults == {}
    backend.set_fusion_defaults({"fusion": "minmax", "alpha": 0.3, "depth": 40})
    assert backend.fusion_defaults == {"fusion": "minmax", "alpha": 0.3, "depth": 40}
    ids = [d.id for d in question_bank]
    assert backend.delete(ids[:5] + ["missing"], wait=False) == 5
    assert backend.count() == len(ids) - 5 and backend.documents(ids[:5]) == {}
    assert backend.delete(ids[5:]) == len(ids) - 5
    assert backend.count() == 0 and "holds no documents" in backend.empty_reason()


def test_capabilities_say_which_optional_protocol_a_backend_offers(filled, committed_encoder):
    backend, _ = filled
    caps = backend.capabilities
    assert batches_lists(backend) == caps.batched_bm25_and_knn
    assert takes_knn_settings(backend) == caps.knn_search_settings
    assert reads_snapshots(backend) == caps.snapshot_reads
    with reader_of(backend) as reader:  # the backend's reader (one commit), else the backend itself
        assert (reader is backend) != caps.snapshot_reads
        assert [h.id for h in reader.bm25(QUERY, 5)] == [h.id for h in backend.bm25(QUERY, 5)]
    for mode, offered in (("hybrid", caps.server_side_hybrid), ("rescore", caps.server_side_rescore)):
        assert runs_in_engine(backend, mode) == offered
        searcher = HybridSearcher(backend, committed_encoder)
        if offered:
            assert searcher.search(QUERY, mode=mode, top_k=3, fusion="rrf", alpha=0.5, server_side=True)[0].id == "q010"
        else:
            with pytest.raises(ConfigError, match="server_side=True"):
                searcher.search(QUERY, mode=mode, server_side=True)


def test_a_backend_without_batched_lists_is_searched_list_by_list(filled, committed_encoder):
    """``search.py``'s path for backends without ``bm25_and_knn``: the same backend, its
    batching capability turned off, gives the same candidates and hybrid results through
    separate ``bm25`` and ``knn`` calls (and never reaches ``bm25_and_knn``)."""
    backend, _ = filled
    searcher = HybridSearcher(backend, committed_encoder)
    vector = committed_encoder.encode([QUERY])[0]
    filters = {"lang": "en"}
    batched = searcher.candidates(QUERY, QueryVector.of(vector), 20, filters)
    batched_results = searcher.search(QUERY, top_k=10, fusion="rrf", alpha=0.5)

    def unreachable(*args, **kwargs):
        raise AssertionError("bm25_and_knn called although the capability is off")

    backend.capabilities = dataclasses.replace(backend.capabilities, batched_bm25_and_knn=False)
    backend.bm25_and_knn = unreachable
    try:
        assert not batches_lists(backend)
        separate = searcher.candidates(QUERY, QueryVector.of(vector), 20, filters)
        _assert_same_hits(separate.bm25.hits(), batched.bm25.hits())
        _assert_same_hits(separate.knn.hits(), batched.knn.hits())
        _assert_same_hits(separate.bm25.hits(), backend.bm25(QUERY, 20, filters))
        _assert_same_hits(separate.knn.hits(), backend.knn(vector, 20, filters))
        # hybrid search through the fallback: the query's encoding asked for by the kNN call
        results = searcher.search(QUERY, top_k=10, fusion="rrf", alpha=0.5)
        assert [(r.id, r.text, r.bm25 and r.bm25.rank, r.knn and r.knn.rank) for r in results] == \
            [(r.id, r.text, r.bm25 and r.bm25.rank, r.knn and r.knn.rank) for r in batched_results]
        assert [r.score for r in results] == pytest.approx([r.score for r in batched_results], rel=1e-6)
    finally:
        del backend.bm25_and_knn
        del backend.capabilities  # the class's capabilities again
    assert batches_lists(backend)


def _assert_same_hits(got, expected) -> None:
    """The same ids in the same order, scores equal up to float rounding: a cluster's kNN score
    of one document moved in its seventh digit between two identical calls (OpenSearch 3.6,
    with a filter; its segments may merge in between and score on another code path)."""
    assert [h.id for h in got] == [h.id for h in expected]
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-5)


def test_the_commands_treat_every_backend_alike(request, empty_backend, committed_encoder, tmp_path):
    """``ingest --strict`` stops at a document the backend would skip, ``query`` on an index that
    holds no documents says so with the fix, and ``delete`` takes ``--wait``: the same on every backend."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    kind = request.node.callspec.params["empty_backend"]
    if kind == "local":
        where = ["--index", str(empty_backend.path)]
    else:
        where = ["--index", empty_backend.index, f"--{kind}", request.getfixturevalue(f"{kind}_url")]
    model = ["--model", str(committed_encoder.model_dir)]
    source = tmp_path / "questions.jsonl"
    source.write_text('{"id": "a", "text": "how do i change my password?"}\n'
                      f'{{"id": "{"x" * 600}", "text": "an id too long for a cluster?"}}\n', encoding="utf-8")
    strict = CliRunner().invoke(cli, ["ingest", str(source), *where, *model, "--strict"])
    if kind == "local":  # the embedded index takes any id
        assert strict.exit_code == 0 and "indexed 2, updated 0, skipped 0" in strict.output, strict.output
    else:
        assert strict.exit_code == 1 and f"{source}:2: id is 600 bytes long" in strict.output, strict.output
        lenient = CliRunner().invoke(cli, ["ingest", str(source), *where, *model])
        assert lenient.exit_code == 0 and "skipped 1" in lenient.output and f"{source}:2: id is 600" in lenient.output
    deleted = CliRunner().invoke(cli, ["delete", "a", "x" * 600, *where, "--wait"])
    assert deleted.exit_code == 0 and "deleted" in deleted.output, deleted.output
    assert empty_backend.count() == 0
    empty = CliRunner().invoke(cli, ["query", "how do i change my password?", *where])
    assert empty.exit_code == 1 and "holds no documents" in empty.output and "hybrid-qpr ingest" in empty.output


def test_tied_scores_are_ordered_by_id_and_the_smallest_ids_make_the_cut(empty_backend, committed_encoder):
    """Copies of one text score alike. Every backend lists them in id order and cuts a BM25
    tie at the depth by keeping the smallest ids, whatever order the ingest wrote them in (a
    cluster orders ties by arrival, which several bulk requests in flight make vary); a hybrid
    page, whose lists are deeper than the tie, too. (Which copies a kNN list of 8 keeps is the
    vector search's choice: it is approximate on every backend; they are listed in id order.)"""
    copies = [Document(f"copy-{n:02d}", "how do i reset my router password?") for n in range(24)]
    other = [Document(f"other-{n}", f"what is the capital of country number {n}?") for n in range(20)]
    empty_backend.ingest(copies[::-1] + other, committed_encoder, batch_size=7, show_progress=False)
    expected = [d.id for d in copies[:8]]  # the BM25 tie is fetched again: 24 > 8 + TIE_MARGIN
    searcher = HybridSearcher(empty_backend, committed_encoder)
    for mode in ("bm25", "hybrid"):
        listed = [r.id for r in searcher.search(copies[0].text, mode=mode, top_k=8)]
        assert listed == expected, (mode, listed)
    knn = [r.id for r in searcher.search(copies[0].text, mode="knn", top_k=8)]
    assert knn == sorted(knn) and set(knn) <= {d.id for d in copies} and len(knn) == 8
