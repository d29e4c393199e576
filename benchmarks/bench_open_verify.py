"""What the local index's CRC32 checks cost: at segment open (docs.sqlite and the BM25 files)
and on first use (vectors.npy on the first rerank or filtered kNN, vectors.faiss on the first
kNN), on one segment of ``--docs`` synthetic documents (docs/reliability.md).

The index is built through the library with a synthetic encoder (seeded random unit vectors
of ``--dim`` dims; no model is needed to measure file checks) and synthetic questions of 6-14
words drawn from a 5,000-word vocabulary, in one segment with an exact ``Flat`` FAISS part (an
HNSW graph over a million vectors takes far longer to build and its check costs the same per
byte). The files were just written or read, so the page cache is warm: the numbers are CRC32
and open costs, not disk reads.

    nice -n 10 python benchmarks/bench_open_verify.py --dir /tmp/open-verify --docs 1000000 \
        --json benchmarks/results/open-verify-1m.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from hybrid_qpr.backends.local import LocalIndex, SearchSettings
from hybrid_qpr.backends.local.segment import OPEN_VERIFIED, Segment, checksum, expected_files


class RandomVectors:
    """A stand-in encoder: seeded random unit vectors (the checks never look at their values)."""

    kind = "synthetic"
    distance = "cosine"

    def __init__(self, dim: int, model_dir: Path):
        self.dim, self.model_dir, self.fingerprint = dim, model_dir, f"random-{dim}"
        self._rng = np.random.default_rng(7)

    def encode(self, texts, batch_size: int = 256, show_progress: bool = False, side: str = "query") -> np.ndarray:
        vectors = self._rng.standard_normal((len(texts), self.dim), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def documents(n: int):
    from hybrid_qpr.types import Document

    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(5000)]
    for i in range(n):
        picked = rng.integers(0, len(words), rng.integers(6, 15))
        yield Document(f"d{i}", " ".join(words[j] for j in picked) + "?")


def timed(func, repeats: int = 3) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        func()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    index_dir = args.dir / f"idx-{args.docs}"
    encoder = RandomVectors(args.dim, args.dir)
    if not (index_dir / "manifest.json").is_file():
        started = time.perf_counter()
        index = LocalIndex.create(index_dir, encoder, faiss="flat")
        index.ingest(documents(args.docs), encoder, show_progress=False, segment_docs=args.docs, batch_size=65536)
        print(f"built {args.docs:,} documents in {time.perf_counter() - started:.0f} s", flush=True)
    index = LocalIndex.open(index_dir)
    entry = index.manifest["segments"][0]
    seg_dir = index_dir / "segments" / entry["name"]
    files = {}
    for file, record in sorted(expected_files(entry).items()):
        seconds = timed(lambda: checksum(seg_dir / file))
        files[file] = {"bytes": record["bytes"], "crc32_s": round(seconds, 4),
                       "when": "open" if file in OPEN_VERIFIED else "first use"}
        print(f"{file:18s} {record['bytes'] / 2**20:9.1f} MB  CRC32 {seconds * 1000:8.1f} ms  ({files[file]['when']})")
    search = SearchSettings.from_manifest(index.manifest["faiss"])
    verified = timed(lambda: Segment(index_dir, entry, index.dim, search).close())
    unverified = timed(lambda: Segment(index_dir, entry, index.dim, search, verify=False).close())
    print(f"segment open: {verified * 1000:.0f} ms with the open-time checks, {unverified * 1000:.0f} ms without")
    query = encoder.encode(["q"])[0]

    def first_use(what):
        fresh = LocalIndex.open(index_dir)
        started = time.perf_counter()
        if what == "rerank":
            fresh.vector_scores(query, ["d1", "d2"])
        else:
            fresh.knn(query, 10)
        spent = time.perf_counter() - started
        fresh.close()
        return spent

    rerank = statistics.median(first_use("rerank") for _ in range(3))
    knn = statistics.median(first_use("knn") for _ in range(3))
    print(f"first rerank on a fresh open (vectors.npy checked): {rerank * 1000:.0f} ms; first kNN (vectors.faiss "
          f"checked and loaded, one exact search): {knn * 1000:.0f} ms")
    result = {"docs": args.docs, "dim": args.dim, "files": files, "segment_open_s": round(verified, 4),
              "segment_open_unverified_s": round(unverified, 4), "first_rerank_s": round(rerank, 4),
              "first_knn_s": round(knn, 4)}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
