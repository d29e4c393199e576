"""2 MB pages under a loaded HNSW graph (hybrid_qpr.backends.local.hugepages)."""

import sys
import threading
from pathlib import Path

import faiss
import numpy as np

from hybrid_qpr.backends.local import hugepages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _graph(n=20_000, dim=64):
    vectors = np.random.default_rng(7).standard_normal((n, dim)).astype(np.float32)
    graph = faiss.IndexHNSWFlat(dim, 8)
    graph.add(vectors)
    return graph, vectors


def test_the_arrays_are_the_graph_links_and_the_stored_vectors():
    graph, vectors = _graph()
    (links, links_bytes), (codes, codes_bytes) = hugepages.hnsw_arrays(graph)
    assert links == int(graph.hnsw.neighbors.data()) and links_bytes == graph.hnsw.neighbors.size() * 4
    assert codes == int(faiss.downcast_index(graph.storage).get_xb()) and codes_bytes == vectors.nbytes
    assert hugepages.hnsw_arrays(faiss.IndexFlatL2(64)) == []  # a flat scan reads in order
    assert hugepages.hnsw_arrays(faiss.IndexHNSWFlat(64, 8)) == []  # nothing added yet


def test_only_whole_2mb_pages_inside_an_array_are_asked_for():
    huge = hugepages.HUGE_PAGE
    assert hugepages._whole_pages(huge + 1, 3 * huge) == (2 * huge, 2 * huge)
    assert hugepages._whole_pages(huge, 3 * huge) == (huge, 3 * huge)
    assert hugepages._whole_pages(huge + 1, huge) == (2 * huge, 0)  # no whole page: nothing


def test_the_graph_searches_the_same_after_its_pages_are_collapsed():
    graph, vectors = _graph()
    before = graph.search(vectors[:50], 10)
    asked = hugepages.back_with_huge_pages(graph)
    if not sys.platform.startswith("linux"):
        assert asked is False
    elif THP.exists() and "[never]" not in THP.read_text():
        assert asked is True  # a 5 MB array holds whole 2 MB pages
    hugepages.settle(timeout=60)
    after = graph.search(vectors[:50], 10)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[0], after[0])
    assert not any(thread.is_alive() for thread in hugepages._PENDING)


def test_a_graph_too_small_for_one_page_is_left_alone():
    graph, _ = _graph(n=500)
    assert hugepages.back_with_huge_pages(graph) is False


def test_the_collapse_goes_in_steps_an_exiting_process_can_wait_for():
    calls = []

    class Libc:
        def madvise(self, start, length, advice):
            calls.append((start, length, advice))
            return 0

    step = hugepages.COLLAPSE_STEP
    spans = [(10 * step, 2 * step + hugepages.HUGE_PAGE), (100 * step, step)]
    thread = threading.Thread(target=hugepages._collapse, args=(Libc(), spans, None))  # it lowers its thread's priority
    thread.start()
    thread.join()
    assert calls == [(10 * step, step, hugepages.MADV_COLLAPSE), (11 * step, step, hugepages.MADV_COLLAPSE),
                     (12 * step, hugepages.HUGE_PAGE, hugepages.MADV_COLLAPSE), (100 * step, step, hugepages.MADV_COLLAPSE)]
