"""Helpers shared by the CLI modules: turning library errors into clean messages."""

from __future__ import annotations

import errno
import functools
import math

import click

from hybrid_qpr.errors import HybridQPRError, missing_dependency


class ModeChoice(click.Choice):
    """The search modes (``search.MODES``, listed in ``--help``); a mode's name before
    (``search.MODE_ALIASES``: ``rerank``) is accepted and read as the new one."""

    def __init__(self) -> None:
        from hybrid_qpr.search import MODES

        super().__init__(MODES)

    def convert(self, value, param, ctx):
        from hybrid_qpr.search import MODE_ALIASES

        return super().convert(MODE_ALIASES.get(value, value), param, ctx)


# a path the file system refuses before anything is read: said in one line naming the path
_PATH_ERRNOS = {
    errno.ENAMETOOLONG: "a name in this path is longer than the file system allows (255 bytes per name on most); "
                        "choose a shorter path",
    errno.ENOTDIR: "a part of this path is a file, not a directory",
    errno.ELOOP: "this path has a loop of symbolic links",
}


def friendly_errors(func):
    """Turn ``HybridQPRError``, and a missing optional package (torch for train, onnx for
    export...), into ``click.ClickException``: one line with the fix, exit code 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except HybridQPRError as exc:
            raise click.ClickException(str(exc)) from exc
        except OSError as exc:
            if exc.errno not in _PATH_ERRNOS:
                raise
            raise click.ClickException(f"{exc.filename}: {_PATH_ERRNOS[exc.errno]}") from exc
        except ModuleNotFoundError as exc:
            missing = missing_dependency(exc, f"'{click.get_current_context().command_path}'")
            if missing is None:
                raise
            raise click.ClickException(str(missing)) from exc

    return wrapper


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses nan and inf: nan passes every comparison, so a
    plain range lets ``--alpha nan`` through."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

    def _describe_range(self) -> str:
        # click writes a range without bounds as "[x<=None]" in --help: say nothing instead
        return "" if self.min is None and self.max is None else super()._describe_range()


# the ranges every numeric option of the CLI is declared with (tests/unit/test_cli_ranges.py
# walks the command tree and refuses an int or float option without one)
SEED = click.IntRange(0, 2**32 - 1)  # what NumPy's and torch's seeding accept
BATCH = click.IntRange(1, 100_000)  # texts or examples per batch: one batch is held in memory at once


def cnn_size_options(*, vocab: int, hash_bins: int, embedding_dim: int, channels: int, dim: int, layers: int,
                     note: str = ""):
    """Add the CNN size options (``--vocab --hash-bins --embedding-dim --channels --dim --layers``)
    with the given defaults: ``train`` defaults to the paper's sizes, ``distill`` to the committed
    CNN's. ``note`` is appended to each help text (e.g. "ignored with --init")."""
    suffix = f" ({note})" if note else ""
    options = [
        click.option("--vocab", type=click.IntRange(min=1), default=vocab, show_default=True,
                     help="Top-V words" + suffix + "."),
        click.option("--hash-bins", type=click.IntRange(min=1), default=hash_bins, show_default=True,
                     help="m hash bins for rare words" + suffix + "."),
        click.option("--embedding-dim", type=click.IntRange(min=1), default=embedding_dim, show_default=True,
                     help="Word embedding size" + suffix + "."),
        click.option("--channels", type=click.IntRange(min=1), default=channels, show_default=True,
                     help="Convolution channels" + suffix + "."),
        click.option("--dim", type=click.IntRange(min=1), default=dim, show_default=True,
                     help="Output dimension n" + suffix + "."),
        click.option("--layers", type=click.IntRange(min=1), default=layers, show_default=True,
                     help="Convolution layers" + suffix + "."),
    ]

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


from hybrid_qpr.backends.cluster.connection import (ENGINE_NAMES, ENGINES, engine_flag, engine_module,  # noqa: E402
                                                    node_command)  # (a stdlib-only module)


def cluster_options(func=None, *, engines: tuple[str, ...] = ENGINES,
                    selects_backend: bool = False):
    """Add the cluster connection options to a command: one URL flag per engine in ``engines``
    (``--opensearch [URL]``, ``--elasticsearch [URL]``) and ``--user``, ``--password``,
    ``--api-key``, ``--ca-certs``, ``--verify-certs/--no-verify-certs``, ``--timeout`` for
    whichever engine is chosen.

    Unset options are read from ``$HYBRID_QPR_<ENGINE>_USER``, ``_PASSWORD``, ``_API_KEY``,
    ``_CA`` and ``_VERIFY`` of the chosen engine (``hybrid_qpr.backends.cluster.connection``),
    so secrets need not appear on the command line. The command receives them as one
    ``**connection`` dict; pass it to ``cluster_client(...)`` or ``open_backend(...)``.

    ``selects_backend=True`` is for commands that work on a local index too (ingest, query,
    ...): there a URL flag must be given to choose a cluster, so an exported
    ``HYBRID_QPR_OPENSEARCH_URL`` never silently redirects ``--index ./dir`` to a cluster.
    A bare flag takes the URL from ``$HYBRID_QPR_<ENGINE>_URL``, else the local node.
    """
    if func is None:
        return lambda f: cluster_options(f, engines=engines, selects_backend=selects_backend)
    options = []
    for engine in engines:
        name, flag, env = ENGINE_NAMES[engine], engine_flag(engine), f"HYBRID_QPR_{engine.upper()}_URL"
        node = node_command(engine, "start")
        if selects_backend or len(engines) > 1:
            options.append(click.option(
                flag, engine, metavar="[URL]", is_flag=False, flag_value="", default=None,
                help=f"Use the {name} index --index at URL instead of a local index directory. A bare {flag} "
                     f"takes ${env}, else the node of {node}."))
        else:
            options.append(click.option(flag, engine, metavar="URL", envvar=env,
                                        help=f"{name} URL, e.g. http://127.0.0.1:9200 [env {env}; default: the node of {node}]."))
    options += [
        click.option("--user", "user", default=None, help="Basic-auth user [env HYBRID_QPR_<ENGINE>_USER]."),
        click.option("--password", "password", default=None,
                     help="Basic-auth password; prefer the env variable HYBRID_QPR_<ENGINE>_PASSWORD. Never printed."),
        click.option("--api-key", "api_key", default=None,
                     help="API key (base64 'id:key'), sent as 'Authorization: ApiKey ...'; prefer HYBRID_QPR_<ENGINE>_API_KEY."),
        click.option("--ca-certs", "ca_certs", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="CA bundle for https [env HYBRID_QPR_<ENGINE>_CA]."),
        click.option("--verify-certs/--no-verify-certs", "verify_certs", default=None,
                     help="Check the server's TLS certificate [default: on; env HYBRID_QPR_<ENGINE>_VERIFY=false turns it off]."),
        click.option("--timeout", "timeout", type=FiniteFloatRange(min=0, min_open=True), default=30.0,
                     show_default=True,
                     help="Seconds before a cluster request times out."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def opensearch_options(func=None, *, selects_backend: bool = False):
    """``cluster_options`` for the commands that exist on OpenSearch only (pipeline, mlcommons)."""
    return cluster_options(func, engines=("opensearch",), selects_backend=selects_backend)


def chosen_engine(connection: dict) -> str | None:
    """The engine whose URL flag was given (a bare flag arrives as ""), or None for a local index."""
    chosen = [engine for engine in ENGINES if connection.get(engine) is not None]
    if len(chosen) > 1:
        raise click.UsageError(f"give one of {' or '.join(engine_flag(engine) for engine in chosen)}, not several")
    return chosen[0] if chosen else None


def cluster_client(user=None, password=None, api_key=None, ca_certs=None, verify_certs=None, timeout=30.0,
                   **urls):
    """A checked client of the engine chosen by the values of ``cluster_options``.

    The client libraries log every failed request with a traceback at WARNING; the CLI turns
    the failure into one clear line instead, so those loggers are quieted unless -v was given."""
    import logging

    engine = chosen_engine(urls) or ENGINES[0]  # the OpenSearch-only commands have no other flag
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        for name in (*ENGINES, "elastic_transport"):  # the client libraries' loggers
            logging.getLogger(name).setLevel(logging.ERROR)
    return engine_module(engine).connect(urls.get(engine) or None, username=user, password=password, api_key=api_key,
                                         ca_certs=ca_certs, verify_certs=verify_certs, timeout=timeout)
