"""benchmarks/choose_fusion_default.py run as a maintainer runs it, on the two bundled banks:
every domain's grid recorded, the rule (of the points at least each domain's better single mode,
the largest mean margin), ``--again`` choosing the same from the record, and ``--write`` giving a
model directory defaults that ``ingest`` adopts and names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hybrid_qpr.fusion import check_fusion_defaults
from hybrid_qpr.testing.cli import run
from hybrid_qpr.testing.corpora import model_without_fusion_defaults

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "choose_fusion_default.py"


def _choose(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_the_default_is_chosen_on_every_domain_at_once_and_written_to_the_model(tmp_path, committed_encoder):
    model = model_without_fusion_defaults(committed_encoder.model_dir, tmp_path / "model")
    out = tmp_path / "choice.json"
    done = _choose("--model", str(model), "--queries", "40", "--out", str(out),
                   "--domain", f"support:paraphrase:{REPO / 'examples' / 'support' / 'beir'}",
                   "--domain", f"bank:paraphrase:{REPO / 'examples' / 'beir'}", cwd=tmp_path)
    record = json.loads(out.read_text())
    assert set(record["domains"]) == {"support", "bank"}
    for name, domain in record["domains"].items():
        assert domain["metric"] == "MRR@20" and 0 < domain["queries"] <= 40
        assert len(domain["grid"]) == 5 * 21  # five methods, alpha 0, 0.05, ..., 1
    chosen, points = record["chosen"], record["points"]
    holding = [p for p in points if p["smallest"] >= -1e-12]
    assert holding  # kNN is the better half on both banks, so RRF alpha 1 (kNN alone) holds at least
    assert chosen["smallest"] >= -1e-12 and chosen["mean"] == max(p["mean"] for p in holding)
    for name, domain in record["domains"].items():  # a margin is the point's metric over the better single mode
        value = next(g["MRR@20"] for g in domain["grid"] if (g["fusion"], g["alpha"]) == (chosen["fusion"], chosen["alpha"]))
        assert abs(chosen["margins"][name] - (value - max(domain["bm25"], domain["knn"]))) < 1e-12
    assert f"**chosen {chosen['fusion']} {chosen['alpha']:g}**" in done.stdout

    again = _choose("--model", str(model), "--again", str(out), "--write", cwd=tmp_path)
    assert f"{chosen['fusion']} alpha {chosen['alpha']}" in again.stdout.splitlines()[-1]
    carried = check_fusion_defaults(json.loads((model / "config.json").read_text())["fusion_defaults"], "config.json")
    assert (carried["fusion"], carried["alpha"]) == (chosen["fusion"], chosen["alpha"])
    assert carried["chosen_on"]["holds_on_every_domain"] is True
    ingested = run("ingest", str(REPO / "examples" / "beir" / "corpus.jsonl"), "--index", str(tmp_path / "idx"),
                   "--model", str(model))
    assert ingested.exit_code == 0, ingested.output
    assert (f"fusion defaults: {chosen['fusion']} alpha {chosen['alpha']}, chosen on 2 development domains (support, "
            "bank), at least the better of BM25 and kNN on each") in ingested.output


def test_a_domain_is_named_task_and_folder(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--domain", "quora:search:data"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "expected NAME:TASK:BEIR_DIR[@SPLIT] with TASK one of paraphrase" in done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "give --domain (one or more), or --again JSON" in done.stderr
