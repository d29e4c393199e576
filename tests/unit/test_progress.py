"""Progress off a terminal: plain periodic lines on stderr, nothing for a step shorter than the interval."""

from __future__ import annotations

from hybrid_qpr.progress import PLAIN_SECONDS_VARIABLE, plain_line, track


def test_off_a_terminal_each_interval_prints_a_plain_line(monkeypatch, capsys):
    monkeypatch.setenv(PLAIN_SECONDS_VARIABLE, "0")
    assert list(track(range(3), total=3, description="encoding", status=lambda: "loss 0.5")) == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("encoding: 1/3 (33%)") and lines[0].endswith("loss 0.5")
    assert lines[-1].startswith("encoding: 3/3 (100%)") and lines[-1].endswith("done")


def test_a_short_step_stays_quiet(monkeypatch, capsys):
    monkeypatch.delenv(PLAIN_SECONDS_VARIABLE, raising=False)  # the default interval: 30 s
    assert list(track(range(5), total=5)) == list(range(5))
    assert capsys.readouterr().err == ""


def test_plain_line_says_count_share_rate_and_time_left():
    assert plain_line("tune", 50, 200, 10.0) == "tune: 50/200 (25%), 10 s, 5.0/s, about 30 s left"
    assert plain_line("train", 7, None, 0.0) == "train: 7, 0 s"
