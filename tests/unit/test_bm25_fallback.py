"""Without numba (a core dependency, but a platform may lack a wheel for it) the local index
ranks BM25 with NumPy (``bm25.score_segments``): the same lists, scores bit for bit, as the
compiled scorer gives. The NumPy run is a fresh interpreter in which ``import numba`` fails."""

from __future__ import annotations

import json
import subprocess
import sys

from hybrid_qpr.backends.local import LocalIndex, blockmax
from hybrid_qpr.search import HybridSearcher

QUERIES = ["how do i change my password", "where do i find my invoice invoice", "who can see my avatar ?",
           "delete my bank account", "what is the way to reset my security question", "zzz unknown words"]
FILTERS = [None, {"lang": "en"}, {"n": [3, 17, 40, 41, 150]}]

NUMPY_RUN = """
import json, sys
sys.modules["numba"] = None  # as if numba were not installed
from hybrid_qpr.backends.local import LocalIndex, blockmax
index = LocalIndex.open(sys.argv[1])
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.search import HybridSearcher
lists = [[[h.id, h.score] for h in index.bm25(q, d, f)] for q, d, f in json.loads(sys.argv[2])]
searcher = HybridSearcher(index, Encoder.load(index.model_dir))
pages = [[r.to_dict() for r in searcher.search(q, mode="hybrid", top_k=8)] for q in json.loads(sys.argv[3])]
print(json.dumps({"compiled": blockmax.has_compiled_scorer(), "lists": lists, "pages": pages}))
"""


def test_numpy_fallback_gives_the_compiled_lists(tmp_path, committed_encoder, question_bank):
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    for start in range(0, 200, 60):  # several segments, one with tombstones
        index.ingest(question_bank[start:start + 60], committed_encoder, show_progress=False)
    assert index.delete([d.id for d in question_bank[::7]]) > 0
    assert blockmax.has_compiled_scorer()
    cases = [(q, depth, f) for q in QUERIES for depth in (1, 5, 100) for f in FILTERS]
    compiled = [[[h.id, h.score] for h in index.bm25(q, d, f)] for q, d, f in cases]
    assert sum(map(len, compiled)) > 100
    searcher = HybridSearcher(index, committed_encoder)
    pages = [[r.to_dict() for r in searcher.search(q, mode="hybrid", top_k=8)] for q in QUERIES]
    done = subprocess.run([sys.executable, "-c", NUMPY_RUN, str(tmp_path / "idx"), json.dumps(cases), json.dumps(QUERIES)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    fallback = json.loads(done.stdout)
    assert fallback["compiled"] is False
    assert fallback["lists"] == compiled  # ids, order and scores (float32 values, exactly)
    assert fallback["pages"] == json.loads(json.dumps(pages))  # hybrid pages: the BM25 list on the worker alike
