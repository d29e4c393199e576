"""``hybrid-qpr query``'s table fits the console: ids whole, the text wrapped at words, optional
columns left out by priority (and named), scores with enough digits to tell them apart."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from rich.console import Console

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.cli.main import cli
from hybrid_qpr.cli.query import results_table, score_decimals
from hybrid_qpr.search import HybridSearcher


def test_score_decimals_tell_close_scores_apart():
    rrf = [1 / 61, 1 / 62 + 1 / 70, 1 / 63, 1 / 64 + 1 / 90]
    decimals = score_decimals(rrf)
    assert len({f"{v:.{decimals}f}" for v in rrf}) == len(rrf) and decimals >= 5
    assert score_decimals([12.3456, 3.2]) == 2  # four significant digits of the largest
    assert score_decimals([0.5, 0.5000001]) == 7  # more digits while two still print alike
    assert score_decimals([None, None]) == 4


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, committed_encoder, question_bank):
    index = LocalIndex.create(tmp_path_factory.mktemp("table") / "idx", committed_encoder)
    index.ingest(question_bank, committed_encoder, show_progress=False)
    return HybridSearcher(index, committed_encoder)


def _render(table, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(table)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_the_table_fits_the_width_and_never_breaks_an_id(searcher, width):
    results = searcher.search("how do i change my password", mode="hybrid", top_k=10)
    lines = _render(results_table("how do i change my password", "hybrid", results, width=width), width)
    assert max(len(line.rstrip()) for line in lines) <= width
    for r in results:  # each id whole, on one line
        assert any(f" {r.id} " in line for line in lines), r.id
    header = next(line for line in lines if " rank " in line and " id " in line)
    assert " text " in header and " score " in header
    missing = [name for name in ("BM25", "BM25 rank", "kNN", "kNN rank") if f" {name} " not in header]
    caption = [line for line in lines if line.startswith(f"left out to fit {width} columns: ")]
    assert bool(missing) == bool(caption)  # a column left out is named
    assert all(name in caption[0] for name in missing)
    if width <= 60:
        assert missing
    if width >= 200:
        assert not missing


def test_untuned_rrf_scores_print_apart_on_the_command_line(searcher):
    question = "how do i change my password"
    done = CliRunner().invoke(cli, ["query", question, "--index", str(searcher.backend.path), "--fusion", "rrf"],
                              env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    rows = [line.split("│") for line in lines if line.startswith("│") and line.split("│")[1].strip()]
    shown = [row[4].strip() for row in rows]
    scores = [r.score for r in searcher.search(question, mode="hybrid", top_k=10, fusion="rrf")]
    assert len(shown) == 10 and len(set(shown)) == len(set(scores))
