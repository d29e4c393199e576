"""One filter syntax, FIELD=VALUE, on the command line and in the workbench API (hybrid_qpr.filters)."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from hybrid_qpr import filters as filters_module
from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.filters import parse_filter_items
from hybrid_qpr.workbench.service import RequestError, parse_filters


def test_field_equals_value_repeats_into_a_list():
    assert parse_filter_items(["topic=a", "topic=b", "lang=en"]) == {"topic": ["a", "b"], "lang": "en"}
    assert parse_filter_items(["url=http://x/?a=b"]) == {"url": "http://x/?a=b"}  # only the first "=" splits
    assert parse_filter_items([]) is None


@pytest.mark.parametrize("item", ["topic", "=account", "topic:account"])
def test_the_command_line_refuses_anything_but_field_equals_value(item):
    with pytest.raises(ConfigError, match=r"--filter '.*': expected FIELD=VALUE, e\.g\. --filter topic=account"):
        parse_filter_items([item])


def test_the_api_takes_the_same_syntax_and_still_reads_the_old_one_with_a_note(caplog, monkeypatch):
    monkeypatch.setattr(filters_module, "_warned_old_form", False)
    assert parse_filters(["topic=account"]) == {"topic": "account"}
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="hybrid_qpr.filters"):
        assert parse_filters(["topic:account", "lang=en"]) == {"topic": "account", "lang": "en"}
    [note] = caplog.records
    assert "FIELD:VALUE is deprecated, write FIELD=VALUE (topic=account)" in note.getMessage()
    with pytest.raises(RequestError, match=r"filter 'topic': expected FIELD=VALUE, e\.g\. filter=topic=account") as err:
        parse_filters(["topic"])
    assert err.value.status == 400


def test_query_on_the_command_line_filters_with_field_equals_value(tmp_path, committed_encoder, question_bank):
    from hybrid_qpr.backends.local import LocalIndex

    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(question_bank, committed_encoder, show_progress=False)
    topic = question_bank[0].metadata["topic"]
    done = CliRunner().invoke(cli, ["query", "how", "--index", str(tmp_path / "idx"), "--mode", "bm25", "-k", "5",
                                    "--filter", f"topic={topic}", "--json"])
    assert done.exit_code == 0, done.output
    hits = json.loads(done.output)["hits"]
    assert hits and all(hit["metadata"]["topic"] == topic for hit in hits)
    wrong = CliRunner().invoke(cli, ["query", "how", "--index", str(tmp_path / "idx"), "--filter", f"topic:{topic}"])
    assert wrong.exit_code != 0 and "expected FIELD=VALUE" in wrong.output
