"""The embedded backend: a local index directory of immutable segments, searched without a server.

``index.py`` holds ``LocalIndex`` (open, create, publish each commit, hand out readers);
``reading.py`` its ``IndexReader`` (one query's view of one commit: ``snapshot.py``);
``writing.py`` its ``IndexWriter`` (the lock and every commit: ingest, delete, merges,
optimize); ``segment.py`` one segment's files; ``writer.py`` what an ingest writes and what a
merge reads back;
``ranking.py`` the exact merge of per-segment lists (``SegmentCandidates``); ``matching.py`` the rows
a metadata filter matches; ``commit.py`` the manifest commit (and
its checksum), the writer lock and the cleanup of dead writers' leftovers; ``merge.py`` the
size-tiered merge policy; ``bm25.py`` BM25 with
corpus-wide statistics over per-segment postings; ``blockmax.py`` its compiled top-k (block-max
MaxScore, exact); ``vectors.py`` the FAISS part; ``vectorbase.py`` the one HNSW graph that the
large segments of an ``auto`` index share, ``locality.py`` the order its nodes are stored in;
``check.py`` the full verification behind ``hybrid-qpr index check``.
"""

from hybrid_qpr.backends.local.commit import FORMAT, FORMAT_VERSION, LOCK_FILE, MANIFEST
from hybrid_qpr.backends.local.index import BM25_IMPLS, SEGMENT_DOCS, Bm25Impl, LocalIndex
from hybrid_qpr.backends.local.vectors import (EF_LADDER, EF_SEARCH, FAISS_KINDS, FLAT_THRESHOLD, NPROBE, FaissKind, SearchSettings,
                                               build_faiss, faiss_factory)

__all__ = ["BM25_IMPLS", "EF_SEARCH", "FAISS_KINDS", "FLAT_THRESHOLD", "FORMAT", "FORMAT_VERSION", "LOCK_FILE", "MANIFEST",
           "EF_LADDER", "NPROBE", "SEGMENT_DOCS", "Bm25Impl", "FaissKind", "LocalIndex", "SearchSettings", "build_faiss",
           "faiss_factory"]
