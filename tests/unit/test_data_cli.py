"""``hybrid-qpr dataset build|from-qa-log|stats`` end to end on small files."""

from __future__ import annotations

import gzip
import json

from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.data.splits import load_split


def pairs_file(tmp_path, bad: bool = False):
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(30):  # 30 chains a-b-c: 30 clusters of 3
        lines.append(f"{2 * i}\t{i}a\t{i}b\thow do i fix thing {i} ?\thow can thing {i} be fixed ?\t1")
        lines.append(f"{2 * i + 1}\t{i}b\t{i}c\thow can thing {i} be fixed ?\tthing {i} repair steps ?\t1")
    lines.append("60\t99a\t99b\tnot the same\tat all\t0")
    if bad:
        lines.insert(5, "oops\tonly two")
    path = tmp_path / "pairs.tsv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return path


def test_build_then_stats(tmp_path):
    out = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["dataset", "build", str(pairs_file(tmp_path, bad=True)), "--out", str(out),
                                      "--on-bad-line", "skip", "--seed", "3"])
    assert result.exit_code == 0, result.output
    pairs = str(pairs_file(tmp_path, bad=True))
    assert "bad lines skipped" in result.output and f"{pairs}:6: found 2 columns" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["reading"] == {"rows": 61, "bad_lines": 1, "skipped": [
        {"path": pairs, "line": 6, "reason": manifest["reading"]["skipped"][0]["reason"]}]}
    assert manifest["grouping"]["clusters"] == 30 and manifest["grouping"]["non_duplicate_pairs"] == 1
    assert manifest["split"]["clusters"] == {"train": 24, "val": 3, "test": 3}
    assert len(load_split(out, "test")) == 3
    corpus, queries, qrels = load_beir(out / "beir", "test")
    assert len(corpus) == 90 and len(queries) == 9 and all(len(r) == 2 for r in qrels.values())
    stats = CliRunner().invoke(cli, ["dataset", "stats", str(out), "--json"])
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.output)["summary"]["train"]["questions"] == 72
    with open(out / "val.jsonl", "a") as fh:  # an edit after the build is reported
        fh.write('{"id": "extra", "questions": [{"id": "e1", "text": "x"}, {"id": "e2", "text": "y"}]}\n')
    edited = CliRunner().invoke(cli, ["dataset", "stats", str(out)])
    assert edited.exit_code == 0 and "changed since the build: val.jsonl" in edited.output
    # rebuilding over an earlier build replaces it; a foreign non-empty directory is refused
    again = CliRunner().invoke(cli, ["dataset", "build", str(pairs_file(tmp_path)), "--out", str(out), "--seed", "3"])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "manifest.json").read_text())["fingerprint"] == manifest["fingerprint"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    refused = CliRunner().invoke(cli, ["dataset", "build", str(pairs_file(tmp_path)), "--out", str(foreign)])
    assert refused.exit_code == 1 and "refusing to overwrite" in refused.output
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_bad_line_error_exit(tmp_path):
    path = pairs_file(tmp_path, bad=True)
    result = CliRunner().invoke(cli, ["dataset", "build", str(path), "--out", str(tmp_path / "ds")])
    assert result.exit_code == 1
    assert f"{path}:6: found 2 columns, expected 6" in result.output
    assert not (tmp_path / "ds").exists()  # nothing half-written


def test_from_qa_log(tmp_path):
    rows = []
    for i in range(20):
        rows += [{"question": f"how do i reset password {i} ?", "answer_id": f"a{i}"},
                 {"question": f"reset password {i}", "answer_id": f"a{i}"}]
    rows += [{"question": w, "answer_id": "noise"} for w in "one two three four five six seven eight nine ten eleven".split()]
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "qa"
    result = CliRunner().invoke(cli, ["dataset", "from-qa-log", str(log), "--out", str(out), "--min-coherence", "0.1"])
    assert result.exit_code == 0, result.output
    grouping = json.loads((out / "manifest.json").read_text())["grouping"]
    assert (grouping["kept"], grouping["dropped_incoherent"]) == (20, 1)
    assert "clusters dropped (incoherent)" in result.output


def test_help_teaches():
    result = CliRunner().invoke(cli, ["dataset", "build", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "default: 13" in result.output
