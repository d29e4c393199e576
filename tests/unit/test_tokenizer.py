import json
import subprocess
import sys

import numpy as np
import pytest

from hybrid_qpr.errors import ArtifactError, ConfigError
from hybrid_qpr.text.tokenizer import PAD_ID, Vocabulary, stable_hash, tokenize


def test_tokenize_lowercases_keeps_question_mark_and_unicode_words():
    assert tokenize("How do I learn Python?") == ["how", "do", "i", "learn", "python", "?"]
    assert tokenize("Ça coûte combien ? Größe") == ["ça", "coûte", "combien", "?", "größe"]
    assert tokenize("what's 2+2") == ["what", "s", "2", "2"]
    assert tokenize("") == []
    # NFKC folds the full-width form into ASCII before lowercasing.
    assert tokenize("ＰＹＴＨＯＮ") == ["python"]


def test_stable_hash_is_the_same_in_another_process():
    words = ["zebra", "ünïcode", "?"]
    here = [stable_hash(w) for w in words]
    code = "import json,sys; from hybrid_qpr.text.tokenizer import stable_hash; print(json.dumps([stable_hash(w) for w in json.loads(sys.argv[1])]))"
    out = subprocess.run([sys.executable, "-c", code, json.dumps(words)], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert json.loads(out.stdout) == here


def test_vocabulary_keeps_top_words_and_hashes_the_rest():
    vocab = Vocabulary.build(["a a a b b c", "a b d"], top_words=2, hash_bins=7)
    assert vocab.words == ["a", "b"]
    assert vocab.size == 1 + 2 + 7
    assert vocab.token_id("a") == 1 and vocab.token_id("b") == 2
    rare = vocab.token_id("c")
    assert rare == 3 + stable_hash("c") % 7
    assert 3 <= rare < vocab.size


def test_encode_batch_pads_with_zero_and_handles_empty_text():
    vocab = Vocabulary(["how", "are", "you"], hash_bins=5, max_length=3)
    ids = vocab.encode_batch(["how are you today friend", "", "you"])
    assert ids.dtype == np.int64 and ids.shape == (3, 3)  # cut to max_length
    assert ids[0].tolist() == [1, 2, 3]
    assert ids[1].tolist() == [PAD_ID] * 3
    assert ids[2].tolist() == [3, 0, 0]
    assert vocab.encode_batch([""]).shape == (1, 1)


def test_save_and_load_round_trip(tmp_path):
    vocab = Vocabulary.build(["one two three two"], top_words=10, hash_bins=11, max_length=9)
    path = tmp_path / "tokenizer.json"
    vocab.save(path)
    loaded = Vocabulary.load(path)
    assert loaded.words == vocab.words and loaded.hash_bins == 11 and loaded.max_length == 9
    assert loaded.encode("two unseen") == vocab.encode("two unseen")
    assert not list(tmp_path.glob("*.tmp"))


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(ArtifactError, match="missing"):
        Vocabulary.load(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ArtifactError, match="bad.json: vocabulary is not valid JSON"):
        Vocabulary.load(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ArtifactError, match="not a hybrid-qpr word vocabulary"):
        Vocabulary.load(other)


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="hash_bins=0"):
        Vocabulary(["a"], hash_bins=0)
    with pytest.raises(ConfigError, match="unique"):
        Vocabulary(["a", "a"])
