"""A one-off query pays only for what it uses: on a small index it never imports numba (NumPy
scores BM25 until the compiled scorer pays for its load: ``blockmax.compiled_scorer_pays``),
nor the cluster backends, and the encoder makes no batch session; a process that goes on to
score enough switches to the compiled scorer with the same lists; a run that must compile a
kernel says so on stderr."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.bm25 import announce_compiling

ONE_OFF = """
import json, sys
from hybrid_qpr.cli.main import cli
try:
    cli(["query", "how do i change my password", "--index", sys.argv[1], "--json"])
except SystemExit as stop:
    assert not stop.code, stop.code
print(json.dumps({name: name in sys.modules for name in ("numba", "hybrid_qpr.backends.cluster.backend")}))
"""

SWITCH = """
import json, sys
from hybrid_qpr.backends.local import LocalIndex, blockmax
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.search import HybridSearcher
index = LocalIndex.open(sys.argv[1])
blockmax.COMPILED_AFTER_DOCS = 6 * index.count() + 1  # two BM25 lists a round: the fourth round switches
searcher = HybridSearcher(index, Encoder.load(index.model_dir))
seen = []
for query in json.loads(sys.argv[2]):
    seen.append({"bm25": [[h.id, h.score] for h in index.bm25(query, 20)],
                 "hybrid": [r.to_dict() for r in searcher.search(query, mode="hybrid", top_k=8)],
                 "numba": "numba" in sys.modules})
print(json.dumps(seen))
"""


def test_a_one_off_query_on_a_small_index_imports_neither_numba_nor_the_cluster_backends(
        tmp_path, committed_encoder, question_bank):
    LocalIndex.create(tmp_path / "idx", committed_encoder).ingest(question_bank[:120], committed_encoder,
                                                                 show_progress=False)
    done = subprocess.run([sys.executable, "-c", ONE_OFF, str(tmp_path / "idx")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    *answer, imported = done.stdout.splitlines()
    assert json.loads("\n".join(answer))["hits"][0]["text"]
    assert json.loads(imported) == {"numba": False, "hybrid_qpr.backends.cluster.backend": False}


def test_a_process_switches_to_the_compiled_scorer_once_it_pays_and_ranks_the_same(
        tmp_path, committed_encoder, question_bank):
    LocalIndex.create(tmp_path / "idx", committed_encoder).ingest(question_bank[:150], committed_encoder,
                                                                 show_progress=False)
    queries = ["how do i change my password", "delete my account", "where is my invoice ?"] * 2
    done = subprocess.run([sys.executable, "-c", SWITCH, str(tmp_path / "idx"), json.dumps(queries)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert [s["numba"] for s in seen] == [False, False, False, True, True, True]
    for numpy_run, compiled_run in zip(seen[:3], seen[3:]):  # the same query before and after the switch
        assert numpy_run["bm25"] and compiled_run["bm25"] == numpy_run["bm25"]
        assert compiled_run["hybrid"] == numpy_run["hybrid"]


def test_the_batch_session_is_made_only_when_a_batch_is_encoded(committed_encoder):
    from hybrid_qpr.encoders import Encoder

    encoder = Encoder.load(committed_encoder.model_dir)
    one = encoder.encode("how do i change my password")
    assert len(encoder.session._sessions) == 1  # the one-row session, made at load
    batch = encoder.encode(["how do i change my password", "delete my account"])
    assert len(encoder.session._sessions) == 2
    assert np.allclose(batch[0], one[0], atol=1e-5)


def test_a_run_that_compiles_a_kernel_says_so_and_a_cached_one_does_not(tmp_path, capsys):
    import numba

    source = tmp_path / "tiny_kernel.py"
    source.write_text("def _add_one(x):\n    return x + 1\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("tiny_kernel", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compiled = numba.njit(cache=True)(module._add_one)
    announce_compiling(compiled, module._add_one)
    said = capsys.readouterr().err
    assert said.startswith("compiling the BM25 scorer (add_one) with numba: once") and str(tmp_path) in said
    assert compiled(1) == 2  # compiled now, and kept in the cache beside the source
    announce_compiling(numba.njit(cache=True)(module._add_one), module._add_one)
    assert capsys.readouterr().err == ""
