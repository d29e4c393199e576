"""efSearch and efConstruction of one HNSW graph against exact search, on Quora test.

Encodes a BEIR corpus once with ``--model`` (one thread; cached at VECTORS, with VECTORS.json
holding ids and distance), builds an HNSW{M} graph per ``--efc`` (one thread) and, per
``--ef``, measures on the test queries (each a stored question): MRR@20 with the own id
dropped against exact search's, the share whose own text (or a vector exactly as near)
comes first, and p50 ms of one search; and on ``--probes`` seeded stored vectors the probe
signals (own first, recall@10 own row left out, noisy copies, and with ``--heldout`` the
same vectors searched in a second graph built without them). Results in docs/search.md.

    python benchmarks/bench_hnsw_calibration.py WORKDIR/cnn.npy --model onnx/distilled-cnn-quora \
        --dataset data/quora --efc 40 80 --probes 4000 --heldout --out benchmarks/results/hnsw-calibration-cnn-124k.json
"""
import argparse
import json
import os
import sys
import time

import faiss
import numpy as np

from hybrid_qpr.backends.local.vectors import metric_type

if len(sys.argv) > 1 and not os.path.exists(sys.argv[1]) and "--model" in sys.argv:
    from hybrid_qpr.distance import prepare_vectors
    from hybrid_qpr.encoders import Encoder

    out_path, model = sys.argv[1], sys.argv[sys.argv.index("--model") + 1]
    dataset = sys.argv[sys.argv.index("--dataset") + 1]
    docs = [json.loads(line) for line in open(f"{dataset}/beir/corpus.jsonl", encoding="utf-8")]
    enc = Encoder.load(model, threads=1)
    start = time.perf_counter()
    vectors = prepare_vectors(enc.encode([d["text"] for d in docs], batch_size=256), enc.distance)
    print(json.dumps({"encoded_per_s": len(docs) / (time.perf_counter() - start)}), flush=True)
    np.save(out_path, vectors)
    json.dump({"distance": enc.distance, "ids": [d["_id"] for d in docs]}, open(out_path + ".json", "w"))


ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("vectors"); ap.add_argument("--dataset", required=True); ap.add_argument("--model")
ap.add_argument("--m", type=int, default=32); ap.add_argument("--efc", type=int, nargs="+", default=[40])
ap.add_argument("--ef", type=int, nargs="+", default=[16, 24, 32, 48, 64, 96, 128, 192, 256])
ap.add_argument("--probes", type=int, default=4000); ap.add_argument("--heldout", action="store_true")
ap.add_argument("--noise", type=float, nargs="+", default=[0.5, 1.0])
ap.add_argument("--out", required=True)
a = ap.parse_args()
faiss.omp_set_num_threads(1)
X = np.load(a.vectors); meta = json.load(open(a.vectors + ".json")); ids = meta["ids"]
metric = metric_type(meta["distance"])
row = {d: i for i, d in enumerate(ids)}
qrels = {}
for line in open(f"{a.dataset}/beir/qrels/test.tsv"):
    p = line.split("\t")
    if p[0] == "query-id": continue
    qrels.setdefault(p[0], set()).add(row[p[1]])
qids = sorted(qrels); qrows = np.array([row[q] for q in qids]); rel = [qrels[q] for q in qids]
Q = np.ascontiguousarray(X[qrows])
better = (lambda a_, b_: a_ <= b_ + 1e-5) if metric == faiss.METRIC_L2 else (lambda a_, b_: a_ >= b_ - 1e-5)

def mrr(I, own):
    tot = 0.0
    for hits, o, r in zip(I, own, rel):
        hits = [h for h in hits if h != o and h >= 0][:20]
        for k, h in enumerate(hits):
            if h in r: tot += 1 / (k + 1); break
    return tot / len(I)

def dist64(q, r):
    q = q.astype(np.float64); x = X[r].astype(np.float64)
    return float(((x - q) ** 2).sum()) if metric == faiss.METRIC_L2 else -float(x @ q)

def first_ok(queries, I, best):  # the exact best (by id, or a vector exactly as near) came first
    return float(np.mean([i[0] == b or dist64(q, i[0]) <= dist64(q, b) + 1e-9 for q, i, b in zip(queries, I, best)]))

def p50_ms(index, qs, k=21):
    t = []
    for q in qs[:500]:
        s = time.perf_counter(); index.search(q[None], k); t.append(time.perf_counter() - s)
    return 1000 * float(np.median(t))

t = time.perf_counter()
De, Ie = faiss.knn(Q, X, 21, metric)
exact_mrr = mrr(Ie, qrows)
print(json.dumps({"n": len(X), "queries": len(Q), "exact_mrr20": exact_mrr, "exact_s": time.perf_counter() - t}), flush=True)
# real paraphrase distance: query to its best relevant duplicate, against query to its nearest other
rng = np.random.default_rng(13)
probe_rows = np.sort(rng.choice(len(X), a.probes, replace=False))
P = np.ascontiguousarray(X[probe_rows])
Dp, Ip = faiss.knn(P, X, 2, metric)
nn_other = np.where(Ip[:, 0] == probe_rows, Dp[:, 1], Dp[:, 0])
dup = []
for i, r in zip(qrows[:2000], rel[:2000]):
    dv = X[list(r)] - X[i]; dup.append(float((dv * dv).sum(1).min()))
gap = lambda d: np.sqrt(np.maximum(d, 0)) if metric == faiss.METRIC_L2 else np.sqrt(np.maximum(2 - 2 * d, 0))
scale = float(np.median(gap(nn_other)))
print(json.dumps({"median_l2_to_nearest_other": scale, "median_l2_query_to_duplicate": float(np.median(np.sqrt(dup)))}), flush=True)
noisy = {}
for f in a.noise:
    z = rng.standard_normal(P.shape).astype(np.float32)
    z *= (f * scale / np.linalg.norm(z, axis=1, keepdims=True))
    N = P + z
    if metric == faiss.METRIC_INNER_PRODUCT: N /= np.linalg.norm(N, axis=1, keepdims=True)
    N = np.ascontiguousarray(N, dtype=np.float32)
    noisy[f] = (N, faiss.knn(N, X, 10, metric))
Dps, Ips = faiss.knn(P, X, 11, metric)
heldout = None
if a.heldout:
    keep = np.setdiff1d(np.arange(len(X)), probe_rows); Xk = np.ascontiguousarray(X[keep])
    heldout = faiss.knn(P, Xk, 10, metric)
rows = []; hk = None
for efc in a.efc:
    idx = faiss.index_factory(X.shape[1], f"HNSW{a.m}", metric); idx.hnsw.efConstruction = efc
    t = time.perf_counter(); c = time.process_time(); idx.add(X); build = time.perf_counter() - t; build_cpu = time.process_time() - c
    hk = hk if efc != a.efc[0] else None
    if heldout is not None and efc == a.efc[0]:
        hk = faiss.index_factory(X.shape[1], f"HNSW{a.m}", metric); hk.hnsw.efConstruction = efc; hk.add(Xk)
    for ef in a.ef:
        idx.hnsw.efSearch = ef
        D, I = idx.search(Q, 21)
        r = {"m": a.m, "efc": efc, "build_s": round(build, 1), "build_cpu_s": round(build_cpu, 1), "ef": ef,
             "mrr20": mrr(I, qrows), "mrr_gap": exact_mrr - mrr(I, qrows),
             "test_identical_first": first_ok(Q, I, qrows),
             "test_best_other_first": float(np.mean([[h for h in i if h != o][:1] == [h for h in e if h != o][:1] for i, e, o in zip(I, Ie, qrows)])),
             "test_recall10": float(np.mean([len(set(i[:11]) & set(e[:11])) / 11 for i, e in zip(I, Ie)])),
             "p50_ms": p50_ms(idx, Q)}
        D2, I2 = idx.search(P, 11)
        r["probe_self_first"] = first_ok(P, I2, probe_rows)
        r["probe_leftout_first"] = float(np.mean([[h for h in i if h != o][:1] == [h for h in e if h != o][:1] for i, e, o in zip(I2, Ips, probe_rows)]))
        r["probe_leftout_recall10"] = float(np.mean([len(set(h for h in i if h != o) & set(h for h in e if h != o)) / 10 for i, e, o in zip(I2, Ips, probe_rows)]))
        for f, (N, (Dn, In)) in noisy.items():
            D3, I3 = idx.search(N, 10)
            r[f"probe_noise{f}_first"] = first_ok(N, I3, In[:, 0])
        if hk is not None and efc == a.efc[0]:
            hk.hnsw.efSearch = ef
            _, I4 = hk.search(P, 10)
            r["probe_heldout_first"] = first_ok(P, keep[I4], keep[heldout[1][:, 0]])
        rows.append(r); print(json.dumps(r), flush=True)
json.dump({"exact_mrr20": exact_mrr, "rows": rows}, open(a.out, "w"), indent=1)
