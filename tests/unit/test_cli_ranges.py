"""Every numeric option of every command has a declared range, checked by click before the
command runs: out of range (and nan or inf) is exit 2 with one error line and nothing created;
in range is accepted. The command tree is walked, so a new option without a range fails here."""

from __future__ import annotations

import math
import os

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_qpr.cli._common import FiniteFloatRange
from hybrid_qpr.cli.main import cli


def commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    """``(command path, command)`` of every leaf command under ``group``."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


NUMERIC = [(path, param) for path, command in commands() for param in command.params
           if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType))]
IDS = [f"{' '.join(path)} {param.opts[-1] if param.opts else param.name}" for path, param in NUMERIC]


def test_every_numeric_option_has_a_range():
    assert len(NUMERIC) > 100  # the walk found the commands (they load lazily)
    unranged = [name for name, (_, param) in zip(IDS, NUMERIC) if not isinstance(param.type, click.types._NumberRangeBase)]
    assert not unranged, f"options without a range: {unranged}"
    nan_passes = [name for name, (_, param) in zip(IDS, NUMERIC)
                  if isinstance(param.type, click.types.FloatParamType) and not isinstance(param.type, FiniteFloatRange)]
    assert not nan_passes, f"float options that let nan through (use FiniteFloatRange): {nan_passes}"


def outside(kind: click.types._NumberRangeBase):
    """Values outside ``kind``'s range (nan and inf for floats)."""
    is_int = isinstance(kind, click.types.IntParamType)
    numbers = st.integers if is_int else (lambda **bound: st.floats(allow_nan=False, allow_infinity=False, **bound))
    options = []
    if kind.min is not None:
        low = kind.min - (0 if kind.min_open else 1) if is_int else kind.min
        options.append(numbers(max_value=low) if is_int else numbers(max_value=low, exclude_max=not kind.min_open))
    if kind.max is not None:
        high = kind.max + (0 if kind.max_open else 1) if is_int else kind.max
        options.append(numbers(min_value=high) if is_int else numbers(min_value=high, exclude_min=not kind.max_open))
    if not is_int:
        options.append(st.sampled_from([math.nan, math.inf, -math.inf]))
    return st.one_of(options)


def inside(kind: click.types._NumberRangeBase):
    if isinstance(kind, click.types.IntParamType):
        low = None if kind.min is None else kind.min + (1 if kind.min_open else 0)
        high = None if kind.max is None else kind.max - (1 if kind.max_open else 0)
        return st.integers(min_value=low, max_value=high)
    return st.floats(min_value=kind.min, max_value=kind.max, exclude_min=kind.min_open and kind.min is not None,
                     exclude_max=kind.max_open and kind.max is not None, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=IDS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_out_of_range_is_refused_in_one_line_before_anything_runs(path, param, data, tmp_path, monkeypatch):
    value = data.draw(outside(param.type), label="value")
    option = param.opts[-1]
    monkeypatch.chdir(tmp_path)  # a command that ran would create its files here
    before = set(os.listdir(tmp_path))
    text = repr(value) if isinstance(value, float) else str(value)
    result = CliRunner().invoke(cli, [*path, f"{option}={text}"], catch_exceptions=False)
    assert result.exit_code == 2, (path, option, value, result.output)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and option in errors[0] and "Traceback" not in result.output, result.output
    assert set(os.listdir(tmp_path)) == before  # nothing created (click refuses before the command runs)


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=IDS)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_in_range_is_accepted(path, param, data):
    value = data.draw(inside(param.type), label="value")
    text = repr(value) if isinstance(value, float) else str(value)
    assert param.type.convert(text, param, None) == value
