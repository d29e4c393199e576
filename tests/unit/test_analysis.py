"""BM25's language analysis (hybrid_qpr.text.analysis) and the local index's use of it:
recorded per index, legacy indexes kept as they were, one command to move one."""

from __future__ import annotations

import json
import threading

import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.check import check_index
from hybrid_qpr.backends.local.commit import write_manifest
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.testing.cli import one_error_line, run
from hybrid_qpr.testing.corpora import mixed_script_texts
from hybrid_qpr.text import tokenize
from hybrid_qpr.text.analysis import ANALYZERS, LANGUAGES, Analyzer, ascii_fold, get_analyzer, words


def test_english_chain_stems_drops_stop_words_and_folds_accents():
    english = get_analyzer(None)
    assert english.name == "english"
    assert english.analyze("How do I learn Python programming?") == ["how", "do", "i", "learn", "python", "program"]
    assert english.analyze("What is the best way to lose weight quickly?") == ["what", "best", "way", "lose", "weight",
                                                                               "quick"]
    # NFKC (full width, ligatures, a decomposed accent), then folding after the stemmer
    assert english.analyze("ＰＹＴＨＯＮ ﬁnancial e\u0301cole café") == ["python", "financi", "ecol", "cafe"]
    assert english.analyze("Ørsted Łódź straße Æsir") == ["orst", "lodz", "strass", "aesir"]
    assert english.analyze("") == [] and english.analyze(" \t?!…") == []


def test_other_scripts_keep_their_letters_and_words_stay_whole():
    english = get_analyzer("english")
    # Python's re splits these at the vowel signs; the Unicode word class keeps each word whole
    assert words("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert english.analyze("Ёлка йогурт οδός") == ["ёлка", "йогурт", "οδός"]  # not Latin: not folded
    assert ascii_fold("naïve") == "naive" and ascii_fold("й") == "й"
    assert get_analyzer("russian").analyze("Как выучить русский язык?") == ["как", "выуч", "русск", "язык"]
    assert get_analyzer("french").analyze("Les étudiantes françaises") == ["le", "etudi", "franc"]
    # a run longer than Lucene's whitespace tokenizer keeps is dropped, the rest kept
    assert english.analyze("x" * 300 + " tail") == ["tail"]
    for text in mixed_script_texts():
        assert all(t and " " not in t for t in english.analyze(text))


def test_legacy_is_the_old_tokenizer_and_records_round_trip():
    legacy = get_analyzer("legacy")
    assert legacy.legacy and legacy.analyze("How do I?") == tokenize("How do I?") == ["how", "do", "i", "?"]
    assert Analyzer.from_record(None, "index x") == legacy  # nothing recorded: built before analyzers
    for name in ("english", "german", "legacy"):
        assert Analyzer.from_record(json.loads(json.dumps(get_analyzer(name).record())), "index x") == get_analyzer(name)
    assert set(LANGUAGES) < set(ANALYZERS) and "porter" not in LANGUAGES
    with pytest.raises(ConfigError, match="analyzer 'klingon': choose a language among arabic"):
        get_analyzer("klingon")
    with pytest.raises(ConfigError, match="index x: written with version 9 of the english analyzer"):
        Analyzer.from_record({"name": "english", "version": 9}, "index x")
    with pytest.raises(ConfigError, match="index x: the BM25 analyzer record 'english' is not an object"):
        Analyzer.from_record("english", "index x")


def test_threads_share_no_stemmer():
    english, out, texts = get_analyzer("english"), {}, mixed_script_texts() * 20
    expected = [english.analyze(t) for t in texts]

    def work(n: int) -> None:
        out[n] = [english.analyze(t) for t in texts]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(found == expected for found in out.values())


def test_a_new_index_records_its_language_and_searches_stems(tmp_path, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path / "idx", committed_encoder, analyzer="english")
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    assert json.loads((idx.path / "manifest.json").read_text())["bm25"]["analyzer"]["name"] == "english"
    # "passwords" and "changing" meet "password" and "change" through the stemmer
    assert idx.bm25("changing passwords", 3)[0].id == idx.bm25("change password", 3)[0].id
    assert idx.analyzer_note() is None and not check_index(idx.path).notes
    with pytest.raises(ConfigError, match="analyses BM25 text with the english analyzer, not french. Fix: leave out "
                                          "--language, or move the index to french first: hybrid-qpr index optimize"):
        LocalIndex.create(idx.path, committed_encoder, analyzer="french")


def _legacy_index(tmp_path, encoder, docs) -> LocalIndex:
    """An index as a version before analyzers wrote it: legacy postings, no analyzer recorded."""
    idx = LocalIndex.create(tmp_path / "old", encoder, analyzer="legacy")
    idx.ingest(docs, encoder, show_progress=False)
    idx.close()
    manifest = {k: v for k, v in idx.manifest.items() if k != "manifest_crc32"}
    write_manifest(idx.path, {**manifest, "bm25": {"impl": "builtin", "k1": 1.5, "b": 0.75,
                                                   "tokenizer": "hybrid_qpr.text.tokenize"}})
    return LocalIndex.open(idx.path)


def test_a_legacy_index_keeps_working_and_one_command_moves_it(tmp_path, committed_encoder, question_bank):
    old = _legacy_index(tmp_path, committed_encoder, question_bank)
    assert old.analyzer.legacy
    before = old.bm25("how do i change my password?", 10)
    assert before and old.bm25("passwords", 5) == []  # no stemming: the plural meets nothing
    command = f"hybrid-qpr index optimize {old.path} --language english"
    assert command in old.analyzer_note() and any(command in n for n in check_index(old.path).notes)
    result = run("index", "check", str(old.path))
    assert result.exit_code == 0 and command in result.output
    corpus = tmp_path / "more.jsonl"
    corpus.write_text(json.dumps({"id": "extra", "text": "where are my saved passwords kept?"}) + "\n")
    added = run("ingest", str(corpus), "--index", str(old.path))  # keeps the legacy analyzer, says how to move
    assert added.exit_code == 0 and command in added.output, added.output
    assert LocalIndex.open(old.path).analyzer.legacy
    vectors_before = old.knn(committed_encoder.encode(["reset my password"])[0], 5)
    moved = run("index", "optimize", str(old.path), "--language", "english")
    assert moved.exit_code == 0 and "BM25 analyzer english" in moved.output, moved.output
    new = LocalIndex.open(old.path)
    assert new.analyzer == get_analyzer("english") and new.count() == len(question_bank) + 1
    assert new.bm25("passwords", 5) and not check_index(new.path).notes
    assert new.knn(committed_encoder.encode(["reset my password"])[0], 5) == vectors_before  # nothing re-encoded


def test_ingest_with_another_language_than_the_index_is_refused(tmp_path, committed_encoder, question_bank):
    corpus = tmp_path / "q.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in question_bank[:20]))
    assert run("ingest", str(corpus), "--index", str(tmp_path / "idx"), "--language", "german").exit_code == 0
    assert LocalIndex.open(tmp_path / "idx").analyzer.name == "german"
    line = one_error_line(run("ingest", str(corpus), "--index", str(tmp_path / "idx"), "--language", "english"))
    assert "analyses BM25 text with the german analyzer, not english" in line
