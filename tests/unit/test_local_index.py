"""The embedded index (hybrid_qpr.backends.local) with a real encoder (the committed model,
or $HYBRID_QPR_TEST_MODEL) on questions the tests write."""

from __future__ import annotations

import json
import logging
import shutil
import threading

import numpy as np
import pytest

from hybrid_qpr.backends.base import Backend
from hybrid_qpr.types import Document, QueryVector
from hybrid_qpr.backends.local import LocalIndex, faiss_factory
from hybrid_qpr.distance import similarity
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.errors import ArtifactError, InputError, ModelMismatchError, SkippedLine


@pytest.fixture()
def index(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    return idx


def test_ingest_builds_all_parts_and_manifest(index, committed_encoder, question_bank):
    assert isinstance(index, Backend)
    assert index.count() == len(question_bank)
    manifest = json.loads((index.path / "manifest.json").read_text())
    assert manifest["model"]["fingerprint"] == committed_encoder.fingerprint
    assert manifest["model"]["dim"] == committed_encoder.dim and manifest["count"] == len(question_bank)
    assert manifest["faiss"]["factory"] == "Flat" and manifest["bm25"]["impl"] == "builtin"
    assert {"faiss-cpu", "numpy"} <= set(manifest["versions"])
    [segment] = manifest["segments"]  # one ingest = one segment holding every part
    for name in ("docs.sqlite", "vectors.npy", "vectors.faiss", "bm25.vocab.json", "bm25.tf.npy"):
        assert (index.path / "segments" / segment["name"] / name).exists()
    doc = index.documents(["q005"])["q005"]
    assert doc.text == question_bank[5].text and doc.metadata == question_bank[5].metadata


def test_reingest_updates_never_duplicates(index, committed_encoder, question_bank):
    changed = Document("q001", "a completely new text about bicycles?", {"topic": "bikes"})
    report = index.ingest(question_bank[:10] + [changed, Document("new1", "brand new question?")], committed_encoder,
                          show_progress=False)
    assert (report.indexed, report.updated) == (1, 11)
    assert index.count() == len(question_bank) + 1
    assert index.documents(["q001"])["q001"].metadata == {"topic": "bikes"}
    # the vector was re-encoded: the new text is its own nearest neighbour
    vec = committed_encoder.encode([changed.text])[0]
    assert index.knn(vec, 1)[0].id == "q001"
    reopened = LocalIndex.open(index.path)
    assert reopened.count() == len(question_bank) + 1


def test_bad_document_skipped_with_line_and_failed_ingest_leaves_index_intact(index, committed_encoder):
    report = index.ingest([(4, Document("x", "  ")), (5, Document("", "text"))], committed_encoder, show_progress=False)
    assert report.skipped == [SkippedLine(None, 4, "empty text"), SkippedLine(None, 5, "empty id")]
    assert index.count() == 200

    def broken():
        yield Document("z1", "first fine question?")
        raise InputError("input.jsonl", 2, "not valid JSON")

    with pytest.raises(InputError, match="input.jsonl:2"):
        index.ingest(broken(), committed_encoder, show_progress=False)
    assert LocalIndex.open(index.path).count() == 200
    assert not list(index.path.parent.glob(".idx.*"))  # no temporary directory left behind


def test_model_mismatch_is_refused_with_the_fix(index, committed_encoder, tmp_path):
    other_dir = tmp_path / "other-model"
    shutil.copytree(committed_encoder.model_dir, other_dir)
    with open(other_dir / "tokenizer.json", "a", encoding="utf-8") as fh:
        fh.write("\n")  # same vocabulary, different bytes: another fingerprint
    other = Encoder.load(other_dir)
    with pytest.raises(ModelMismatchError, match=r"fingerprint .*Fix: pass --model"):
        index.ingest([Document("a", "b?")], other, show_progress=False)
    with pytest.raises(ModelMismatchError):
        LocalIndex.create(index.path, other)
    assert index.count() == 200


def test_filters_apply_before_truncation(index, committed_encoder):
    vec = committed_encoder.encode(["how do i change my password?"])[0]
    hits = index.knn(vec, 15, filters={"topic": "avatar"})  # only 10 documents have this topic
    assert len(hits) == 10 and all(h.id >= "q190" for h in hits)
    hits = index.knn(vec, 30, filters={"lang": "de"})
    assert len(hits) == 30 and all(int(h.id[1:]) % 2 == 1 for h in hits)
    bm = index.bm25("change my password", 5, filters={"lang": "de", "topic": ["password", "username"]})
    assert len(bm) == 5 and all(int(h.id[1:]) % 2 == 1 and int(h.id[1:]) < 50 for h in bm)
    assert index.bm25("change", 5, filters={"n": 3}) == [h for h in index.bm25("change", 200) if h.id == "q003"]
    assert index.knn(vec, 5, filters={"topic": "no such topic"}) == []


def test_knn_scores_match_exact_similarity(index, committed_encoder, question_bank):
    vec = committed_encoder.encode(["where do i find my invoice?"])
    hits = index.knn(vec[0], 5)
    exact = similarity(vec, committed_encoder.encode([d.text for d in question_bank]), committed_encoder.distance)[0]
    top = np.argsort(-exact)[:5]
    assert [h.id for h in hits] == [question_bank[i].id for i in top]
    assert [h.score for h in hits] == pytest.approx(exact[top].tolist(), rel=1e-4, abs=1e-4)
    scores = index.vector_scores(vec[0], ["q000", hits[0].id, "missing"])
    assert set(scores) == {"q000", hits[0].id} and scores[hits[0].id] == pytest.approx(hits[0].score, abs=1e-4)


def test_delete_by_id(index):
    assert index.delete(["q000", "q001", "not-there"]) == 2
    assert index.count() == 198 and index.documents(["q000"]) == {}
    assert "q000" not in {h.id for h in index.bm25("change my password", 200)}
    assert LocalIndex.open(index.path).count() == 198


def test_faiss_factories_and_hnsw_ivf_builds(tmp_path, committed_encoder, question_bank):
    assert faiss_factory(1000) == faiss_factory(19_999) == "Flat"  # the recall-based default: exact when small
    assert faiss_factory(20_000) == faiss_factory(130_000) == "HNSW32"
    assert faiss_factory(130_000, "ivf") == "IVF1442,Flat"
    assert faiss_factory(130_000, "hnsw") == "HNSW32"
    assert faiss_factory(10, "ivf") == "Flat"
    hnsw = LocalIndex.create(tmp_path / "hnsw", committed_encoder, faiss="hnsw")
    hnsw.ingest(question_bank, committed_encoder, show_progress=False)
    ivf = LocalIndex.create(tmp_path / "ivf", committed_encoder, faiss="ivf")
    ivf.ingest(question_bank, committed_encoder, show_progress=False)
    assert ivf.manifest["faiss"]["factory"] == "IVF57,Flat" and hnsw.manifest["faiss"]["factory"] == "HNSW32"
    vec = committed_encoder.encode([question_bank[42].text])[0]
    assert hnsw.knn(vec, 1)[0].id == ivf.knn(vec, 1)[0].id == "q042"


def test_rank_bm25_is_selectable(tmp_path, committed_encoder, question_bank):
    pytest.importorskip("rank_bm25")  # the bench extra
    idx = LocalIndex.create(tmp_path / "rb", committed_encoder, bm25="rank-bm25")
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    assert not (idx.path / "bm25").exists()
    assert idx.bm25("when does my invoice expire", 1)[0].id == LocalIndex.open(idx.path, bm25="builtin").bm25(
        "when does my invoice expire", 1)[0].id


def test_open_errors(tmp_path):
    with pytest.raises(ArtifactError, match="not a hybrid-qpr index"):
        LocalIndex.open(tmp_path)
    (tmp_path / "manifest.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        LocalIndex.open(tmp_path)


def test_a_bad_stored_ef_search_is_named_on_open_and_by_check(tmp_path, committed_encoder, question_bank):
    from hybrid_qpr.backends.local.check import check_index
    from hybrid_qpr.errors import IndexDamagedError

    idx = LocalIndex.create(tmp_path / "h", committed_encoder, faiss="hnsw")
    idx.ingest(question_bank[:40], committed_encoder, show_progress=False)
    manifest = json.loads((idx.path / "manifest.json").read_text())
    manifest["segments"][0]["ef_search"] = "sixteen"
    (idx.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexDamagedError, match="segment entry 0 has ef_search='sixteen'"):
        LocalIndex.open(idx.path)
    assert any("ef_search='sixteen'" in p.what for p in check_index(idx.path).problems)


def test_knn_search_settings_are_stored_and_can_be_overridden(tmp_path, committed_encoder, question_bank):
    from hybrid_qpr.backends.local import EF_SEARCH, SearchSettings

    idx = LocalIndex.create(tmp_path / "h", committed_encoder, faiss="hnsw", search=SearchSettings(ef_search=40))
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    assert idx.manifest["faiss"]["ef_search"] == 40
    reopened = LocalIndex.open(idx.path)
    vec = committed_encoder.encode([question_bank[7].text])[0]
    reopened.knn(vec, 5)
    assert reopened.segments[0].faiss.hnsw.efSearch == 40
    reopened.set_search_settings(ef_search=200)
    assert reopened.segments[0].faiss.hnsw.efSearch == 200 and reopened.search_settings.nprobe == 10
    assert reopened.knn(vec, 1)[0].id == "q007"
    old = dict(idx.manifest["faiss"])
    del old["ef_search"]  # no stored efSearch: each segment's calibrated one, EF_SEARCH for older segments
    assert SearchSettings.from_manifest(old).ef_search is None
    assert SearchSettings.from_manifest(old).ef_for(None) == EF_SEARCH
    assert SearchSettings.from_manifest(old).ef_for(24) == 24 and SearchSettings(ef_search=40).ef_for(24) == 40
    with pytest.raises(ConfigError, match="ef_search=0"):
        SearchSettings(ef_search=0)


def test_hnsw_segments_search_with_their_calibrated_ef(tmp_path, committed_encoder, question_bank):
    """Without a stored efSearch, each HNSW segment is searched with the value measured when
    its graph was built (recorded in its manifest entry); an explicit one still wins."""
    from hybrid_qpr.backends.local import EF_LADDER

    idx = LocalIndex.create(tmp_path / "h", committed_encoder, faiss="hnsw")
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    assert idx.manifest["faiss"]["ef_search"] is None
    entry = idx.manifest["segments"][0]
    assert entry["ef_search"] in EF_LADDER
    reopened = LocalIndex.open(idx.path)
    vec = committed_encoder.encode([question_bank[7].text])[0]
    assert reopened.knn(vec, 1)[0].id == "q007"
    assert reopened.segments[0].faiss.hnsw.efSearch == entry["ef_search"] == reopened.segments[0].ef_search
    reopened.set_search_settings(ef_search=150)  # below the 200 vectors: efSearch is bounded by them
    assert reopened.segments[0].faiss.hnsw.efSearch == 150 == reopened.segments[0].ef_search


def _hard_graph(metric: str):
    """Random vectors without cluster structure in a small, sparsely built graph: hard to search."""
    import faiss

    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(6000, 24)).astype(np.float32)
    if metric == "IP":
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    graph = faiss.index_factory(24, "HNSW8", faiss.METRIC_L2 if metric == "L2" else faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = 16
    graph.add(vectors)
    return graph, vectors, "sqeuclidean" if metric == "L2" else "cosine"


@pytest.mark.parametrize("criterion", ["first", "recall"])
@pytest.mark.parametrize("metric", ["L2", "IP"])
def test_calibrate_ef_picks_the_smallest_ladder_step_that_meets_both_targets(metric, criterion):
    """The chosen efSearch returns the sampled vectors themselves first for the target share and
    finds the target recall@10 of their neighbours (both checked here by hand against exact
    search); the step below it misses the target that binds."""
    import faiss

    from hybrid_qpr.backends.local.vectors import EF_LADDER, calibrate_ef

    graph, vectors, distance = _hard_graph(metric)
    rows = np.sort(np.random.default_rng(13).choice(len(vectors), 300, replace=False))
    exact = faiss.knn(vectors[rows], vectors, 11, graph.metric_type)[1]
    own = lambda hits, r: set([int(h) for h in hits if h != r][:10])  # noqa: E731

    def measured(ef_search: int) -> dict[str, float]:
        graph.hnsw.efSearch = ef_search
        found = graph.search(vectors[rows], 11)[1]
        return {"first": float(np.mean(found[:, 0] == rows)),  # random vectors: no duplicates, no ties
                "recall": sum(len(own(f, r) & own(e, r)) for f, e, r in zip(found, exact, rows)) / (10 * len(rows))}

    target = (measured(EF_LADDER[0])[criterion] + measured(EF_LADDER[-1])[criterion]) / 2
    targets = {"target_first": 0.0, "target_recall": 0.0, f"target_{criterion}": target}
    ef = calibrate_ef(graph, vectors, distance, sample=300, **targets)
    assert ef in EF_LADDER and ef > EF_LADDER[0]  # the smallest step misses the target, the largest reaches it
    assert measured(ef)[criterion] >= target
    assert measured(EF_LADDER[EF_LADDER.index(ef) - 1])[criterion] < target


@pytest.mark.parametrize("metric_name", ["METRIC_L2", "METRIC_INNER_PRODUCT"])
def test_the_exact_pass_of_a_calibration_on_two_threads_gives_the_scores_of_one(monkeypatch, metric_name):
    """The calibration's exact neighbours run their parts of probes on worker threads: the same
    parts, each on one OpenMP thread, so every score and row is the one a single thread finds."""
    import faiss

    from hybrid_qpr.backends.local import vectors as vectors_module

    monkeypatch.setattr(vectors_module, "EXACT_PART_VALUES", 40 * 3000)  # 40 probes a part: 8 parts
    rng = np.random.default_rng(5)
    stored = rng.normal(size=(3000, 16)).astype(np.float32)
    probes = np.ascontiguousarray(stored[rng.choice(3000, 300, replace=False)])
    metric = getattr(faiss, metric_name)
    one = vectors_module.exact_neighbours(probes, stored, metric, workers=1)
    two = vectors_module.exact_neighbours(probes, stored, metric, workers=2)
    assert np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1])
    whole = faiss.knn(probes, stored, 11, metric)  # and the parts are the whole
    assert np.array_equal(whole[1], two[1]) and np.allclose(whole[0], two[0], rtol=1e-5, atol=1e-4)


def test_calibrate_ef_does_not_count_swapped_duplicates_as_misses():
    """Four stored copies of every vector (numbered variants of a question encode alike): which
    copy comes first, and which copies fill the top 10, is a tie, not a loss, so an easy
    graph calibrates to the smallest step instead of running off the ladder."""
    import faiss

    from hybrid_qpr.backends.local.vectors import EF_LADDER, calibrate_ef

    base = np.random.default_rng(9).normal(size=(500, 8)).astype(np.float32)
    vectors = np.ascontiguousarray(np.concatenate([base] * 4))
    graph = faiss.index_factory(8, "HNSW32", faiss.METRIC_L2)
    graph.add(vectors)
    assert calibrate_ef(graph, vectors, "sqeuclidean", sample=200) == EF_LADDER[0]


def test_calibrate_ef_does_not_climb_the_ladder_for_a_node_no_search_reaches(caplog):
    """A node that lost every edge into it is found by no efSearch: it must not push every query
    to the ladder's last step. The chosen step is the smallest at which the other probes are
    all found first and the recall target is met, as without that node."""
    import faiss

    from hybrid_qpr.backends.local.vectors import EF_LADDER, calibrate_ef

    vectors = np.ascontiguousarray(np.random.default_rng(3).normal(size=(2000, 8)), dtype=np.float32)
    graph = faiss.index_factory(8, "HNSW32", faiss.METRIC_L2)
    graph.add(vectors)
    healthy = calibrate_ef(graph, vectors, "sqeuclidean", sample=len(vectors))  # every probe found: no lowering
    lost = next(n for n in range(1, len(vectors)) if n != graph.hnsw.entry_point)
    neighbors = faiss.vector_to_array(graph.hnsw.neighbors)
    neighbors[neighbors == lost] = lost - 1  # every edge into the node now leads to its neighbour row
    faiss.copy_array_to_vector(neighbors, graph.hnsw.neighbors)
    graph.hnsw.efSearch = EF_LADDER[-1]
    assert graph.search(vectors[lost:lost + 1], 1)[1][0, 0] != lost  # no search finds it
    with caplog.at_level(logging.INFO, logger="hybrid_qpr.backends.local.vectors"):
        assert calibrate_ef(graph, vectors, "sqeuclidean", sample=len(vectors)) == healthy < EF_LADDER[-1]
    assert f"no efSearch up to {EF_LADDER[-1]} met the targets" in caplog.text  # the log tells why


def test_chosen_ef_lowers_a_target_no_step_of_the_ladder_meets_to_the_best_reached():
    from hybrid_qpr.backends.local.vectors import chosen_ef

    ladder = [(16, 0.990, 0.990), (32, 0.998, 0.996), (64, 0.9995, 0.998), (128, 0.9995, 0.999)]
    assert chosen_ef(ladder, 1.0, 0.997) == (64, 0.9995, 0.998)  # one probe lost at every step
    assert chosen_ef(ladder, 0.998, 0.995) == (32, 0.998, 0.996)  # both met: the first step that does
    assert chosen_ef(ladder, 1.0, 0.9995) == (128, 0.9995, 0.999)  # neither met anywhere: the best of both
    assert chosen_ef([(16, 1.0, 0.99), (32, 0.999, 0.995)], 1.0, 0.997) == (32, 0.999, 0.995)  # bests apart
    # the 5M Quora copies graph: first reaches its best at 256, recall only creeps on after it
    five_million = [(192, 0.9990, 0.9930), (256, 0.9995, 0.9950), (384, 0.9995, 0.9953), (512, 0.9995, 0.9953)]
    assert chosen_ef(five_million, 1.0, 0.997) == (256, 0.9995, 0.9950)
    assert chosen_ef(five_million, 0.999, 0.993) == (192, 0.9990, 0.9930)  # met targets keep their exact rule


def test_first_kept_counts_a_vector_exactly_as_near_as_the_exact_first():
    """A stored duplicate of the exact first hit is as good as it; a farther vector is a loss."""
    from hybrid_qpr.backends.local.vectors import first_kept

    vectors = np.array([[0, 0], [1, 0], [1, 0], [3, 0]], dtype=np.float32)
    queries = np.array([[1.1, 0], [1.1, 0], [1.1, 0], [0.1, 0]], dtype=np.float32)
    exact = np.array([1, 1, 1, 0])
    assert first_kept(queries, vectors, np.array([1, 2, 3, 0]), exact, "sqeuclidean") == 0.75
    assert first_kept(queries, vectors, np.array([1, 2, -1, 0]), exact, "sqeuclidean") == 0.75
    assert first_kept(queries, vectors, exact, exact, "cosine") == 1.0


def test_bm25_and_knn_together_equal_the_two_lists(index, committed_encoder):
    for query in ("how do i change my password", "delete my account"):
        vec = committed_encoder.encode([query])[0]
        lists = index.bm25_and_knn(query, QueryVector.of(vec), 20)
        assert [found.hits() for found in lists] == [index.bm25(query, 20), index.knn(vec, 20)]
        filters = {"topic": "password"}
        lists = index.bm25_and_knn(query, QueryVector.of(vec), 5, filters)
        assert [found.hits() for found in lists] == [index.bm25(query, 5, filters), index.knn(vec, 5, filters)]


def test_bm25_list_is_scored_on_the_worker_while_the_query_is_encoded(index, committed_encoder, monkeypatch):
    """A hybrid query's encoding overlaps the BM25 list: ``bm25_and_knn`` takes the query's
    ``QueryVector`` and computes it on the calling thread while the worker scores BM25 (the encoding here
    waits until the worker has scored it); lists and search results are unchanged."""
    from hybrid_qpr.backends.local import blockmax
    from hybrid_qpr.search import HybridSearcher

    assert blockmax.has_compiled_scorer()  # loaded: this process's queries run on it (small index or not)
    scored_on, scored = [], threading.Event()
    score = blockmax.top_rows

    def recorded(*args, **kwargs):
        found = score(*args, **kwargs)
        if any(f is not None for f in found):
            scored_on.append(threading.current_thread().name)
            scored.set()
        return found

    monkeypatch.setattr(blockmax, "top_rows", recorded)
    searcher = HybridSearcher(index, committed_encoder)
    for query in ("how do i change my password", "delete my account"):
        vec = committed_encoder.encode([query])[0]
        threads, scored_on[:] = [], []
        scored.clear()

        def vector_of():
            threads.append(threading.current_thread().name)
            assert scored.wait(10), "the worker did not score BM25 while the query was encoded"
            return vec

        assert index.bm25_and_knn(query, QueryVector(vector_of), 20) == index.bm25_and_knn(query, QueryVector.of(vec), 20)
        assert threads == [threading.current_thread().name] and scored_on[0].startswith("hybrid-qpr-query")
        assert searcher.search(query, mode="hybrid") == searcher.search(query, mode="hybrid", vector=vec)
    lists = index.bm25_and_knn("delete my account", QueryVector(vector_of), 5, {"topic": "password"})
    assert [found.hits() for found in lists] == \
        [index.bm25("delete my account", 5, {"topic": "password"}), index.knn(vec, 5, {"topic": "password"})]


def test_an_index_that_records_the_old_scorer_name_still_opens(index):
    """Indexes written before the scorer had its own name record impl "bm25s" (a package
    they never used); they open with the built-in scorer and rank the same."""
    from hybrid_qpr.backends.local.commit import write_manifest

    manifest_path = index.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    before = [h.id for h in index.bm25("when does my invoice expire", 5)]
    manifest["bm25"]["impl"] = "bm25s"
    write_manifest(index.path, manifest)  # as such an index was committed: with a checksum that matches
    reopened = LocalIndex.open(index.path)
    assert reopened.bm25_impl == "builtin"
    assert [h.id for h in reopened.bm25("when does my invoice expire", 5)] == before


def test_documents_of_listed_hits_are_read_by_row_and_stay_in_the_readers_commit(index, committed_encoder,
                                                                                  question_bank):
    """A reader's ``documents`` reads the hits of its own lists by segment row: the same
    documents as a lookup by id (a fresh reader, which remembers no rows). After a delete or a
    re-ingest of a listed id, that reader still shows its commit and a new one what the index
    now holds."""
    query = "how do i change my password"
    with index.reader() as reader:
        ids = [h.id for h in reader.bm25(query, 5)] + [h.id for h in reader.knn(committed_encoder.encode([query])[0], 5)]
        assert all(doc_id in reader._located() for doc_id in ids)
        fresh, generation = LocalIndex.open(index.path), index.manifest["generation"]
        before = reader.documents(ids)
        assert before == fresh.documents(ids) and set(before) == set(ids)
        index.delete([ids[0]])
        changed = Document(ids[1], "a new text for a listed question", {"topic": "changed"})
        index.ingest([changed], committed_encoder, show_progress=False)
        assert reader.documents(ids) == before and reader.generation == generation < index.manifest["generation"]
    now = index.documents(ids)
    assert ids[0] not in now and now[ids[1]] == changed
    assert now == LocalIndex.open(index.path).documents(ids)


def test_remembered_idfs_follow_each_commit(index, committed_encoder, question_bank, tmp_path):
    """A commit that changes a token's document frequency changes its idf: the BM25 list of an
    index that has answered the query before equals that of a fresh reader."""
    query = "how do i change my password"
    before = index.bm25(query, 10)
    more = [Document(f"extra{i}", f"change my password please {i}") for i in range(30)]
    index.ingest(more, committed_encoder, show_progress=False)
    after = index.bm25(query, 10)
    assert after == LocalIndex.open(index.path).bm25(query, 10) and after != before
