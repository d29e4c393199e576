"""The segmented local index: corpus-wide BM25 (exactly the scores of one index), tombstones,
merges by size tier and optimize, the filter rules. Real encoder, questions the tests write."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.bm25 import BM25_B, BM25_K1
from hybrid_qpr.backends.local.merge import plan_merge
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.types import Document, QueryVector

QUERIES = ["how do i change my password", "where do i find my invoice invoice", "who can see my avatar",
           "delete my bank account", "what is the way to reset my security question", "zzz unknown words"]


def _final_state(bank: list[Document]) -> list[Document]:
    """What the multi-step history in ``segmented`` leaves: q000-q019 deleted, q020-q039 re-texted."""
    out = []
    for d in bank[20:]:
        text = d.text.replace("my", "our") if int(d.id[1:]) < 40 else d.text
        out.append(Document(d.id, text, d.metadata))
    return out


@pytest.fixture(scope="module")
def segmented(tmp_path_factory, committed_encoder, question_bank):
    """Four ingests (four segments), a delete and an update, never merged."""
    idx = LocalIndex.create(tmp_path_factory.mktemp("seg") / "idx", committed_encoder)
    for start in range(0, 200, 50):
        idx.ingest(question_bank[start:start + 50], committed_encoder, show_progress=False)
    assert idx.delete([d.id for d in question_bank[:20]]) == 20
    changed = [d for d in _final_state(question_bank) if int(d.id[1:]) < 40]
    report = idx.ingest(changed, committed_encoder, show_progress=False)
    assert (report.indexed, report.updated) == (0, 20)
    return idx


@pytest.fixture(scope="module")
def single(tmp_path_factory, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path_factory.mktemp("one") / "idx", committed_encoder)
    idx.ingest(_final_state(question_bank), committed_encoder, show_progress=False)
    return idx


def test_bm25_scores_equal_those_of_one_index(segmented, single):
    assert len(segmented.segments) == 5 and len(single.segments) == 1
    assert segmented.count() == single.count() == 180
    for query in QUERIES:
        many, one = segmented.bm25(query, 500), single.bm25(query, 500)
        assert [(h.id, h.score) for h in many] == [(h.id, h.score) for h in one], query  # exact, not approx
    assert segmented.bm25("zzz unknown words", 10) == []


def test_compiled_bm25_top_list_equals_scoring_every_document(segmented):
    """The list comes from the compiled scorer (``blockmax.top_rows``); it must give the rows
    and bit-identical scores of ``score_segments`` over every document, and the same list
    when numba is missing (the NumPy path). tests/unit/test_bm25_pruning.py checks the scorer on
    random corpora."""
    from hybrid_qpr.backends.local import blockmax
    from hybrid_qpr.backends.local.ranking import SegmentCandidates, entry_hits, ranked_entries

    def reference(query: str, depth: int):
        found = []
        with segmented.reader() as reader:
            for seg, scores in zip(reader.segments, reader._bm25_scores(reader.analyzer.analyze(query))):
                rows = np.flatnonzero(scores > 0)
                found.append(SegmentCandidates.best(seg, scores[rows], rows, depth))
        return entry_hits(ranked_entries(found, depth), {})

    # loaded: from now on this process's queries run on it, however small the index
    assert blockmax.has_compiled_scorer(), "numba is a core dependency"
    for query in QUERIES + ["my my my password password ?"]:
        for depth in (1, 3, 10, 500):
            assert segmented.bm25(query, depth) == reference(query, depth), (query, depth)
    filters = [{"lang": "en"}, {"n": [25, 30, 77, 150]}, {"lang": "de", "topic": ["password", "invoice"]}]
    compiled = [(q, f, segmented.bm25(q, 5, f)) for q in QUERIES for f in filters]
    assert sum(len(hits) for _, _, hits in compiled) > 20
    kernel = blockmax._KERNEL[:]
    try:
        blockmax._KERNEL[:] = [None]
        assert segmented.bm25(QUERIES[0], 10) == reference(QUERIES[0], 10)
        for query, f, hits in compiled:  # filtered lists: the NumPy path gives the same
            assert segmented.bm25(query, 5, f) == hits, (query, f)
    finally:
        blockmax._KERNEL[:] = kernel


def exhaustive_top_rows(parts, tokens, stats, weights, depth, dense, monkeypatch):
    """``blockmax.top_rows`` on its full-pass path (``bm25.exhaustive_top``): no query is pruned."""
    from hybrid_qpr.backends.local import blockmax

    monkeypatch.setattr(blockmax, "PRUNE_MAX_TOKENS", 0)
    blocks = [blockmax.block_maxima(postings, w) for (postings, _), w in zip(parts, weights)]
    return blockmax.top_rows(parts, tokens, stats, weights, depth, dense, blocks)


@pytest.mark.parametrize("seed", [3, 4])
def test_compiled_scorer_and_dense_columns_keep_the_exact_list(seed, monkeypatch):
    """The compiled full pass keeps, in one pass in row order, each score that reaches the
    depth-th best seen so far; common tokens are added as dense columns. Over a Zipf
    vocabulary with deletions, both layouts give the NumPy path's rows and scores."""
    from hybrid_qpr.backends.local import bm25 as bm25_lib

    assert bm25_lib._top_kernel() is not None
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(300)]
    zipf = 1.0 / np.arange(1, 301)
    docs = [list(rng.choice(vocab, size=rng.integers(3, 15), p=zipf / zipf.sum())) for _ in range(3000)]
    postings = bm25_lib.build_postings(docs)
    deleted = rng.random(3000) < 0.1
    parts = [(postings, deleted)]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    dense = bm25_lib.dense_columns(parts, weights)
    assert 1 <= len(dense[0].matrix) <= bm25_lib.DENSE_MAX_COLUMNS  # the commonest tokens are dense
    for q in range(60):
        tokens = list(rng.choice(vocab[:40], size=rng.integers(1, 8))) + ["w0"]
        depth = int(rng.choice([1, 5, 50, 400]))
        scores = bm25_lib.score_segments(parts, tokens, stats, weights)[0]
        live = np.flatnonzero((scores > 0) & ~deleted)
        cut = np.sort(scores[live])[::-1][min(depth, len(live)) - 1]
        expected = live[scores[live] >= cut]
        for layout in (None, dense):
            got_scores, got_rows = exhaustive_top_rows(parts, tokens, stats, weights, depth, layout, monkeypatch)[0]
            assert np.array_equal(got_rows, expected), (q, depth, layout is None)
            assert np.array_equal(got_scores, scores[expected]), (q, depth)  # bit-identical


@pytest.mark.parametrize("dense", [False, True])
def test_compiled_scorer_keeps_every_tie_with_the_last(dense, monkeypatch):
    """The 20 documents holding the rare token score best, the 980 others tie with each other:
    at depth 40 the 40th best is one of the tied ones, so all 1,000 come back; at depth 20
    only the 20. With ``common`` a dense column, the rare token is added first and the tied
    documents, which hold only the dense token, are found by adding the whole query again."""
    from hybrid_qpr.backends.local import bm25 as bm25_lib

    assert bm25_lib._top_kernel() is not None
    docs = [["common", "rare"] if row % 50 == 0 else ["common", "other"] for row in range(1000)]
    parts = [(bm25_lib.build_postings(docs), None)]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    layout = bm25_lib.dense_columns(parts, weights) if dense else None
    assert layout is None or layout[0].slot[parts[0][0].column("common")] >= 0
    scores, rows = exhaustive_top_rows(parts, ["common", "rare"], stats, weights, 40, layout, monkeypatch)[0]
    assert np.array_equal(rows, np.arange(1000))
    assert np.array_equal(scores, bm25_lib.score_segments(parts, ["common", "rare"], stats, weights)[0])
    assert np.array_equal(exhaustive_top_rows(parts, ["common", "rare"], stats, weights, 20, layout, monkeypatch)[0][1],
                          np.arange(0, 1000, 50))


def test_bm25_matches_the_bm25s_library(single, question_bank):
    bm25s = pytest.importorskip("bm25s")
    docs = _final_state(question_bank)
    ref = bm25s.BM25(k1=BM25_K1, b=BM25_B)
    analyze = single.analyzer.analyze  # the index's: English by default
    ref.index([analyze(d.text) for d in docs], show_progress=False)
    for query in QUERIES[:5]:
        tokens = [t for t in analyze(query) if t in ref.vocab_dict]
        expected = ref.get_scores(tokens)
        got = {h.id: h.score for h in single.bm25(query, 500)}
        assert {d.id: s for d, s in zip(docs, expected.tolist()) if s > 0} == pytest.approx(got, rel=1e-5)


def test_knn_and_documents_agree_across_segments(segmented, single, committed_encoder):
    for query in QUERIES[:4]:
        vec = committed_encoder.encode([query])[0]
        many, one = segmented.knn(vec, 30), single.knn(vec, 30)
        assert [h.id for h in many] == [h.id for h in one]
        assert [h.score for h in many] == pytest.approx([h.score for h in one], abs=1e-4)
    assert segmented.documents(["q000", "q025", "q100"]) == single.documents(["q000", "q025", "q100"])
    assert segmented.documents(["q025"])["q025"].text == "is it possible to delete our credit card?"


def test_several_hnsw_segments_asked_for_their_share_lose_nothing(tmp_path, committed_encoder):
    """With several segments each FAISS index is first asked for its share of the depth; a
    segment whose whole share lands in the merged list is searched again in full. Here one
    small segment holds the 20 best documents while its share is 12: the list must still be
    the exact top 20 (HNSW over a few hundred vectors at this efSearch is exact)."""
    from hybrid_qpr.distance import similarity

    idx = LocalIndex.create(tmp_path / "idx", committed_encoder, faiss="hnsw")
    near = [Document(f"p{i:02d}", f"how do i change my password {i}") for i in range(30)]
    far = [Document(f"{kind[0]}{i:03d}", f"{kind} recipe {i} with {kind} and sugar") for kind in ("cake", "bread")
           for i in range(300)]
    for part in (near, far[:300], far[300:]):
        idx.ingest(part, committed_encoder, show_progress=False)
    assert len(idx.segments) == 3 and all(s.entry["factory"].startswith("HNSW") for s in idx.segments)
    vec = committed_encoder.encode(["how do i change my password"])[0]
    docs = near + far
    exact = similarity(vec[None, :], committed_encoder.encode([d.text for d in docs]), idx.distance)[0]
    best = sorted(zip(exact.tolist(), [d.id for d in docs]), key=lambda sd: (-sd[0], sd[1]))[:20]
    assert all(doc_id.startswith("p") for _, doc_id in best)  # the small segment holds the whole top 20
    for hits in (idx.knn(vec, 20), idx.bm25_and_knn("how do i change my password", QueryVector.of(vec), 20)[1].hits()):
        assert [h.id for h in hits] == [doc_id for _, doc_id in best]
        assert [h.score for h in hits] == pytest.approx([score for score, _ in best], abs=1e-3)


def test_tombstones_hide_deleted_rows_without_rewriting(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    [segment] = idx.manifest["segments"]
    written = {p.name: p.stat().st_mtime_ns for p in (idx.path / "segments" / segment["name"]).iterdir()}
    assert idx.delete(["q010", "q011", "q010", "nope"]) == 2
    after = {p.name: p.stat().st_mtime_ns for p in (idx.path / "segments" / segment["name"]).iterdir()}
    assert {k: v for k, v in after.items() if k in written} == written  # nothing rewritten, one tombstone file (and its copy) added
    generation = idx.manifest["generation"]
    assert set(after) - set(written) == {f"deleted.{generation}.npy", f"deleted.{generation}.copy.npy"}  # and its copy
    assert idx.count() == 198 and idx.manifest["segments"][0]["deleted"] == 2
    vec = committed_encoder.encode([question_bank[10].text])[0]
    assert "q010" not in {h.id for h in idx.knn(vec, 200)} | {h.id for h in idx.bm25(question_bank[10].text, 200)}
    assert idx.documents(["q010"]) == {} and idx.vector_scores(vec, ["q010", "q012"]).keys() == {"q012"}
    assert idx.delete(["q010"]) == 0
    report = idx.ingest([question_bank[10]], committed_encoder, show_progress=False)  # back again, as new
    assert report.indexed == 1 and idx.knn(vec, 1)[0].id == "q010" and LocalIndex.open(idx.path).count() == 199


def test_unchanged_reingest_writes_nothing(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    generation = idx.manifest["generation"]
    report = idx.ingest(question_bank, committed_encoder, show_progress=False)
    assert (report.indexed, report.updated) == (0, 200) and idx.manifest["generation"] == generation
    moved = Document("q001", question_bank[1].text, {"topic": "moved"})  # same text, new metadata: vector reused
    idx.ingest([moved], committed_encoder, show_progress=False)
    assert len(idx.segments) == 2 and idx.documents(["q001"])["q001"].metadata == {"topic": "moved"}
    assert np.array_equal(idx.segments[1].vectors[0], idx.segments[0].vectors[1])


def test_tiered_merge_and_optimize_keep_results(tmp_path, committed_encoder, question_bank, single):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    final = _final_state(question_bank)
    for start in range(0, 180, 18):  # ten segments of 18 documents: one tier, not over its limit
        idx.ingest(final[start:start + 18], committed_encoder, show_progress=False)
    assert len(idx.segments) == 10
    idx.ingest([Document("extra", "one more question about my avatar?")], committed_encoder, show_progress=False)
    assert len(idx.segments) == 2  # an 11th segment in the lowest tier: its ten smallest were merged
    assert sorted(s.count for s in idx.segments) == [18, 163]
    assert idx.delete(["extra"]) == 1 and len(idx.segments) == 2
    for query in QUERIES:
        assert [(h.id, h.score) for h in idx.bm25(query, 500)] == [(h.id, h.score) for h in single.bm25(query, 500)]
    idx.delete(["q100"])
    result = idx.optimize()
    assert result["segments_before"] == 2 and len(idx.segments) == 1 and "deleted" not in json.dumps(
        idx.manifest["segments"][0]).replace('"deleted": 0', "")
    assert idx.count() == 179 and idx.documents(["q100"]) == {}
    vec = committed_encoder.encode([QUERIES[0]])[0]
    assert [h.id for h in idx.knn(vec, 20)] == [h.id for h in single.knn(vec, 21) if h.id != "q100"][:20]
    leftovers = {p.name for p in (idx.path / "segments").iterdir()}
    LocalIndex.open(idx.path)
    assert {p.name for p in (idx.path / "segments").iterdir()} <= leftovers  # only current and retained remain


def test_merge_policy_tiers():
    seg = lambda name, count, deleted=0: {"name": name, "count": count, "deleted": deleted}  # noqa: E731
    assert plan_merge([seg(f"s{i}", 5) for i in range(10)]) is None
    assert plan_merge([seg(f"s{i}", 5 + i) for i in range(11)]) == [f"s{i}" for i in range(10)]
    assert plan_merge([seg("big", 1_000_000)] + [seg(f"s{i}", 50) for i in range(10)]) is None
    assert plan_merge([seg("a", 100, deleted=60), seg("b", 10)]) == ["a"]
    assert plan_merge([seg(f"s{i}", 300_000) for i in range(11)], max_docs=2_000_000) is None
    flat = lambda name, count: {**seg(name, count), "factory": "Flat"}  # noqa: E731
    hnsw = {**seg("h", 500_000), "factory": "HNSW32"}
    assert plan_merge([hnsw, flat("a", 12_000), flat("b", 7_000)], flat_limit=20_000) is None  # 19,000 scanned
    assert plan_merge([hnsw, flat("a", 12_000), flat("b", 9_000)], flat_limit=20_000) == ["b", "a"]
    assert plan_merge([hnsw, flat("a", 12_000), flat("b", 9_000)]) is None  # no limit (--faiss flat/hnsw/ivf)
    assert plan_merge([flat("a", 30_000)], flat_limit=20_000) is None  # one Flat segment (e.g. --faiss flat) stays


def test_filters_booleans_lists_and_unknown_fields(tmp_path, committed_encoder):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    docs = [Document("a", "how do i pay by card?", {"paid": True, "tags": ["billing", "card"], "n": 1, "r": 1.5}),
            Document("b", "how do i pay by bank transfer?", {"paid": False, "tags": ["billing"], "n": 2}),
            Document("c", "how do i pay with cash?", {"paid": "true", "tags": "cash", "n": 3})]
    idx.ingest(docs, committed_encoder, show_progress=False)
    ids = lambda filters: sorted(h.id for h in idx.bm25("how do i pay", 10, filters))  # noqa: E731
    assert ids({"paid": True}) == ids({"paid": "true"}) == ["a", "c"]  # JSON true and the string "true"
    assert ids({"paid": "false"}) == ["b"] and ids({"paid": 1}) == []  # true is not 1
    assert ids({"tags": "billing"}) == ["a", "b"] and ids({"tags": ["card", "cash"]}) == ["a", "c"]
    assert ids({"n": "2"}) == ids({"n": 2}) == ["b"] and ids({"r": 1.5}) == ["a"]
    assert ids({"tags": "billing", "paid": True}) == ["a"] and ids({"tags": []}) == []
    vec = committed_encoder.encode(["paying"])[0]
    assert sorted(h.id for h in idx.knn(vec, 10, {"tags": "billing"})) == ["a", "b"]
    with pytest.raises(ConfigError, match=r"filter field 'topic' is not in any document .*known fields: n, paid, r, tags"):
        idx.bm25("pay", 5, {"topic": "x"})


def test_failed_ingest_after_flushed_segments_commits_nothing(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank[:20], committed_encoder, show_progress=False)
    before = ({p.name for p in (idx.path / "segments").iterdir()}, idx.manifest["generation"])

    def failing():
        yield from question_bank[20:60]  # four 10-document segments are written before the failure
        raise ValueError("input broke")

    with pytest.raises(ValueError, match="input broke"):
        idx.ingest(failing(), committed_encoder, show_progress=False, segment_docs=10)
    assert ({p.name for p in (idx.path / "segments").iterdir()}, idx.manifest["generation"]) == before
    assert LocalIndex.open(idx.path).count() == 20


def test_index_check_reports_leftovers_and_open_removes_them(tmp_path, committed_encoder, question_bank):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank[:30], committed_encoder, show_progress=False)
    (idx.path / "segments" / ".s000009-dead.tmp").mkdir()  # what a killed writer leaves
    (idx.path / "segments" / "s000009-dead").mkdir()
    result = CliRunner().invoke(cli, ["index", "check", str(idx.path)], catch_exceptions=False)
    assert result.exit_code == 0 and "ok: " in result.output and "30 documents in 1 segment " in result.output
    assert result.output.count("left over from an interrupted writer") == 2
    LocalIndex.open(idx.path)
    assert [p.name for p in (idx.path / "segments").iterdir()] == [idx.manifest["segments"][0]["name"]]


def test_postings_built_in_chunks_equal_one_pass():
    from hybrid_qpr.backends.local.bm25 import build_postings

    docs = [["a", "b", "a"], [], ["c"], ["b", "c", "c", "d"], ["a"]]
    whole, chunked = build_postings(docs), build_postings(iter(docs), chunk=2)
    assert whole.vocab == chunked.vocab == ["a", "b", "c", "d"]
    for name in ("ptr", "rows", "tf", "doc_len"):
        assert np.array_equal(getattr(whole, name), getattr(chunked, name))
    assert whole.posting("a")[0].tolist() == [0, 4] and whole.posting("a")[1].tolist() == [2, 1]
    assert whole.doc_len.tolist() == [3, 0, 1, 4, 1] and whole.posting("zzz") is None
