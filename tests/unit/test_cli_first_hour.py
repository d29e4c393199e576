"""What a new user reads first: help texts that say what they mean, a table that can show a
metadata field and never shows '-' for a list the cluster did not return, and a tune report
that says its lines are the top five and how a tie is settled."""

from __future__ import annotations

import io
import re

import pytest
from click.testing import CliRunner
from rich.console import Console

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.cli.main import cli
from hybrid_qpr.cli.query import SHOWN_CHARS, results_table
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document


def _help(*command: str) -> str:
    done = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    return done.output


def test_help_texts_name_real_bounds_models_and_files():
    assert "None]" not in _help("query") and "[0<=x<=1]" in _help("query")  # an unbounded range says nothing
    listing = _help()
    distill = next(line for line in listing.splitlines() if line.strip().startswith("distill"))
    assert "token table" in distill and "fast CNN" not in distill
    assert "token table like the bundled fast" in re.sub(r"\s+", " ", _help("distill"))
    for command in (("dataset", "build"), ("dataset",), ("dataset", "from-squad")):
        assert "../shared" not in _help(*command)
    assert "dataset build pairs.tsv --out" in _help("dataset", "build")  # no path a wheel user lacks
    assert "--show FIELD" in _help("query")


def _render(table, width: int = 160) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(table)
    return out.getvalue()


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, committed_encoder):
    long_answer = "Open the settings page and choose a new password " * 20
    docs = [Document(f"pw-{i}", f"how do i reset my password {i}", {"answer": long_answer, "title": f"Password {i}",
                                                                       "tags": ["account", "login"]})
            for i in range(30)]
    index = LocalIndex.create(tmp_path_factory.mktemp("show") / "idx", committed_encoder)
    index.ingest(docs, committed_encoder, show_progress=False)
    return HybridSearcher(index, committed_encoder)


def test_show_adds_a_column_per_field_cut_to_a_readable_length(searcher):
    results = searcher.search("reset my password", mode="hybrid", top_k=3)
    text = _render(results_table("reset my password", "hybrid", results, show=("title", "answer", "tags"), width=160))
    header = next(line for line in text.splitlines() if " rank " in line)
    assert all(f" {name} " in header for name in ("title", "answer", "tags", "BM25", "kNN"))
    assert "Password 1" in text or "Password 2" in text
    assert '["account",' in text and '"login"]' in text  # a list as JSON
    cells = "".join(line.split("│")[5] for line in text.splitlines() if line.count("│") > 6)  # the answer column
    assert cells.count("…") == 3  # each hit's answer cut (it holds 1,000 characters)
    assert len(re.sub(r"\s+", " ", cells).strip()) <= 3 * (SHOWN_CHARS + 1)


def test_a_fusion_inside_the_cluster_leaves_out_the_columns_it_cannot_fill(searcher):
    results = [r._replace(bm25=None, knn=None) for r in searcher.search("reset my password", mode="hybrid", top_k=3)]
    text = _render(results_table("reset my password", "hybrid", results, server_side=True))
    header = next(line for line in text.splitlines() if " rank " in line)
    assert " BM25 " not in header and " kNN " not in header and " - " not in text
    assert "fused inside the cluster (--server-side): it returns no BM25 or kNN score or rank per hit" in \
        re.sub(r"\s+", " ", text)


def test_tune_says_its_lines_are_the_top_five_and_how_ties_are_settled(tmp_path):
    runner = CliRunner()
    for args in (["dataset", "build", "examples/support/pairs.tsv", "--out", str(tmp_path / "data")],
                 ["ingest", str(tmp_path / "data" / "beir" / "corpus.jsonl"), "--index", str(tmp_path / "idx")]):
        done = runner.invoke(cli, args)
        assert done.exit_code == 0, done.output
    done = runner.invoke(cli, ["tune", "--beir", str(tmp_path / "data" / "beir"), "--split", "val", "--index",
                               str(tmp_path / "idx"), "--dry-run"])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("the top 5 of "))
    assert "ties in grid order: fusion as listed in --fusions, then the smaller alpha" in lines[top]
    assert all(line.startswith("  ") for line in lines[top + 1:top + 6])
    best = next(line for line in lines if line.startswith("best: "))
    scores = [float(line.split()[-1]) for line in lines[top + 1:top + 6]]
    if scores[0] == scores[1]:  # the bundled sample ties: the report says so
        assert re.search(r"\(tied with \d+ other settings: the first in grid order is the best\)", best)
