"""Helpers shared by the CLI modules: turning library errors into clean messages."""

from __future__ import annotations

import functools

import click

from hybrid_qpr.errors import HybridQPRError, missing_dependency


def friendly_errors(func):
    """Turn ``HybridQPRError``, and a missing optional package (torch for train, onnx for
    export...), into ``click.ClickException``: one line with the fix, exit code 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except HybridQPRError as exc:
            raise click.ClickException(str(exc)) from exc
        except ModuleNotFoundError as exc:
            missing = missing_dependency(exc, f"'{click.get_current_context().command_path}'")
            if missing is None:
                raise
            raise click.ClickException(str(missing)) from exc

    return wrapper


def opensearch_options(func=None, *, selects_backend: bool = False):
    """Add the OpenSearch connection options (URL, basic auth, TLS, timeout) to a command.

    Every option also reads an environment variable, so passwords need not appear on the
    command line (or in shell history). The command receives them as ``opensearch``,
    ``os_user``, ``os_password``, ``os_ca_certs``, ``os_verify`` and ``os_timeout``; pass them
    to ``opensearch_client(...)``.

    ``selects_backend=True`` is for commands that work on a local index too (ingest, query,
    ...): there ``--opensearch`` must be given to choose the cluster, so an exported
    ``HYBRID_QPR_OPENSEARCH_URL`` never silently redirects ``--index ./dir`` to a cluster.
    A bare ``--opensearch`` takes the URL from the environment or the local node.
    """
    if func is None:
        return lambda f: opensearch_options(f, selects_backend=selects_backend)
    if selects_backend:
        url_option = click.option(
            "--opensearch", "opensearch", metavar="[URL]", is_flag=False, flag_value="", default=None,
            help="Use the OpenSearch index --index at URL instead of a local index directory. A bare "
                 "--opensearch takes $HYBRID_QPR_OPENSEARCH_URL, else the node of 'hybrid-qpr cluster start'.")
    else:
        url_option = click.option(
            "--opensearch", "opensearch", metavar="URL", envvar="HYBRID_QPR_OPENSEARCH_URL",
            help="OpenSearch URL, e.g. http://127.0.0.1:9200 [env HYBRID_QPR_OPENSEARCH_URL; "
                 "default: the node of 'hybrid-qpr cluster start'].")
    options = [
        url_option,
        click.option("--user", "os_user", envvar="HYBRID_QPR_OPENSEARCH_USER", help="Basic-auth user [env HYBRID_QPR_OPENSEARCH_USER]."),
        click.option("--password", "os_password", envvar="HYBRID_QPR_OPENSEARCH_PASSWORD",
                     help="Basic-auth password; prefer the env variable HYBRID_QPR_OPENSEARCH_PASSWORD. Never printed."),
        click.option("--ca-certs", "os_ca_certs", type=click.Path(exists=True, dir_okay=False),
                     envvar="HYBRID_QPR_OPENSEARCH_CA", help="CA bundle for https [env HYBRID_QPR_OPENSEARCH_CA]."),
        click.option("--verify-certs/--no-verify-certs", "os_verify", default=None,
                     help="Check the server's TLS certificate [default: on; env HYBRID_QPR_OPENSEARCH_VERIFY=false turns it off]."),
        click.option("--timeout", "os_timeout", type=float, default=30.0, show_default=True,
                     help="Seconds before an OpenSearch request times out."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def opensearch_client(opensearch=None, os_user=None, os_password=None, os_ca_certs=None, os_verify=None,
                      os_timeout=30.0):
    """A checked client from the values of ``opensearch_options``.

    opensearch-py logs every failed request with a traceback at WARNING; the CLI turns the
    failure into one clear line instead, so that logger is quieted unless -v was given."""
    import logging

    from hybrid_qpr.backends.opensearch import connect

    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        logging.getLogger("opensearch").setLevel(logging.ERROR)

    return connect(opensearch or None, username=os_user, password=os_password, ca_certs=os_ca_certs,
                   verify_certs=os_verify, timeout=os_timeout)
