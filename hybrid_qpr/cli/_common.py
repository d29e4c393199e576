"""Helpers shared by the CLI modules: turning library errors into clean messages."""

from __future__ import annotations

import functools

import click

from hybrid_qpr.errors import HybridQPRError


def friendly_errors(func):
    """Turn ``HybridQPRError`` into ``click.ClickException`` (one line, exit code 1)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except HybridQPRError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper
