"""``hybrid-qpr mlcommons register|deploy|undeploy|ingest-pipeline|status``: let the cluster embed questions itself."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import FiniteFloatRange, cluster_client, friendly_errors, opensearch_options


class _MLCommonsGroup(click.Group):
    def get_command(self, ctx, name):
        # "pipeline", the old name of ingest-pipeline, still works (hidden: it did not say which pipeline)
        return super().get_command(ctx, "ingest-pipeline" if name == "pipeline" else name)


@click.group(cls=_MLCommonsGroup)
def mlcommons() -> None:
    """Run an exported transformer encoder inside OpenSearch (ml-commons local model).

    \b
    Typical flow (local node of 'hybrid-qpr node start'):
      ID=$(hybrid-qpr mlcommons register models/minilm)
      hybrid-qpr mlcommons deploy $ID
      hybrid-qpr mlcommons ingest-pipeline $ID --name hqpr-embed
    Then index {"text": ...} documents with ?pipeline=hqpr-embed and search with a 'neural'
    query. Only transformer encoders qualify (the CNN's tokenizer cannot run in the cluster).
    See docs/mlcommons.md for what deploying needs offline.

    \b
    A cross-encoder reranker ('hybrid-qpr reranker export') registers the same way, as a
    TEXT_SIMILARITY model; 'rerank-pipeline' then makes a search pipeline that re-scores the
    hits in the cluster (docs/reranker.md).
    """


@mlcommons.command()
@opensearch_options
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--name", default=None, help="Model name in ml-commons. [default: hybrid-qpr-<directory name>]")
@click.option("--model-version", "version", default="1", show_default=True, help="Version string stored with the model.")
@click.option("--allow-local-upload", is_flag=True,
              help="First set plugins.ml_commons.allow_registering_model_via_local_file=true (persistent) on the "
                   "cluster; chunked uploads are refused without it. The local node sets it already.")
@friendly_errors
def register(model_dir, name, version, allow_local_upload, **connection) -> None:
    """Package MODEL_DIR (model.onnx + tokenizer.json) and upload it in 10 MB chunks; print the model id.

    No URL is involved: the zip travels in the request bodies, so the cluster needs no
    internet and allow_registering_model_via_url stays off.

    \b
    Example:
      hybrid-qpr mlcommons register models/minilm --name minilm-questions
    """
    from hybrid_qpr.mlcommons import register_dir
    from hybrid_qpr.errors import require

    require("onnx", feature="'hybrid-qpr mlcommons register' (it adapts the ONNX graph)")  # before connecting

    client = cluster_client(**connection)
    click.echo(register_dir(client, model_dir, name, version=version, allow_local_upload=allow_local_upload))


@mlcommons.command()
@opensearch_options
@click.argument("model_id")
@click.option("--wait", "wait_s", type=FiniteFloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds to wait for the deploy task.")
@friendly_errors
def deploy(model_id, wait_s, **connection) -> None:
    """Deploy MODEL_ID on the cluster's nodes and wait until it is ready (or failed, with the reason).

    \b
    Example:
      hybrid-qpr mlcommons deploy Xy12abc --wait 120
    """
    from hybrid_qpr.mlcommons import deploy as deploy_model

    task = deploy_model(cluster_client(**connection), model_id, timeout=wait_s)
    click.echo(f"{model_id}: {task.get('state')} on {', '.join(task.get('worker_node') or [])}")


@mlcommons.command()
@opensearch_options
@click.argument("model_ids", metavar="MODEL_ID...", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Undeploy every model the cluster holds deployed.")
@friendly_errors
def undeploy(model_ids, every, **connection) -> None:
    """Unload MODEL_IDs from the cluster's memory (the models stay registered: 'deploy' loads
    them again). Deployed models outlive a node restart, and each holds memory that ml-commons'
    circuit breaker counts: undeploy the ones you do not use.

    \b
    Examples:
      hybrid-qpr mlcommons undeploy Xy12abc Zt34def
      hybrid-qpr mlcommons undeploy --all
    """
    from hybrid_qpr.mlcommons import deployed_models, undeploy as undeploy_model

    if bool(model_ids) == every:
        raise click.UsageError("give the MODEL_IDs to undeploy, or --all")
    client = cluster_client(**connection)
    model_ids = model_ids or [m["id"] for m in deployed_models(client)]
    if not model_ids:
        click.echo("no model is deployed")
    for model_id in model_ids:
        undeploy_model(client, model_id)
        click.echo(f"{model_id}: undeployed")


def _pipeline_command(name: str, kind: str, example: str):
    """``mlcommons NAME MODEL_ID --name P``: a command that creates one pipeline around a model."""
    def wrap(func):
        func = click.option("--name", required=True, help=f"{kind} pipeline name, e.g. {example}.")(func)
        func = click.argument("model_id")(func)
        return mlcommons.command(name)(opensearch_options(func))
    return wrap


@_pipeline_command("ingest-pipeline", "Ingest", "hqpr-embed")
@click.option("--source", default="text", show_default=True, help="Field holding the question text.")
@click.option("--target", default="embedding", show_default=True, help="knn_vector field to fill.")
@friendly_errors
def ingest_pipeline(model_id, name, source, target, **connection) -> None:
    """Create (or replace) an ingest pipeline whose text_embedding processor embeds SOURCE into TARGET.

    \b
    Example:
      hybrid-qpr mlcommons ingest-pipeline Xy12abc --name hqpr-embed
    """
    from hybrid_qpr.mlcommons import put_ingest_pipeline

    put_ingest_pipeline(cluster_client(**connection), name, model_id, source, target)
    click.echo(f"ingest pipeline {name}: {source} -> {target} with model {model_id}")


@_pipeline_command("rerank-pipeline", "Search", "hqpr-rerank")
@click.option("--field", default="text", show_default=True, help="Document field the cross-encoder reads.")
@friendly_errors
def rerank_pipeline(model_id, name, field, **connection) -> None:
    """Create (or replace) a search pipeline whose rerank response processor re-scores the hits
    with the cross-encoder MODEL_ID (registered from a 'reranker export' directory).

    \b
    Example:
      ID=$(hybrid-qpr mlcommons register onnx/reranker-minilm-l6-int8); hybrid-qpr mlcommons deploy $ID
      hybrid-qpr mlcommons rerank-pipeline $ID --name hqpr-rerank
    Search with ?search_pipeline=hqpr-rerank and "ext": {"rerank": {"query_context": {"query_text": "..."}}}.
    """
    from hybrid_qpr.mlcommons import put_rerank_pipeline

    put_rerank_pipeline(cluster_client(**connection), name, model_id, field)
    click.echo(f"search pipeline {name}: rerank on {field} with model {model_id}")


@mlcommons.command()
@opensearch_options
@click.argument("model_id")
@friendly_errors
def status(model_id, **connection) -> None:
    """Print the model's ml-commons record as JSON (model_state, chunks, hash, model_config...).

    \b
    Example:
      hybrid-qpr mlcommons status Xy12abc
    """
    from hybrid_qpr.mlcommons import status as model_status

    click.echo(json.dumps(model_status(cluster_client(**connection), model_id), indent=2, sort_keys=True))


@mlcommons.command()
@opensearch_options
@click.option("--index", required=True, help="Index to set up (created in hybrid-qpr's layout when missing).")
@click.option("--model", default=None,
              help="Model name (fast, quality, or a bundled directory's name) or an exported transformer "
                   "directory. [default: the index's model, else fast]")
@click.option("--name", default=None, help="Model name in ml-commons. [default: hybrid-qpr-<directory name>]")
@click.option("--allow-local-upload", is_flag=True,
              help="First set plugins.ml_commons.allow_registering_model_via_local_file=true (persistent) on the "
                   "cluster. The local node sets it already.")
@click.option("--wait", "wait_s", type=FiniteFloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds to wait for the deploy task.")
@friendly_errors
def setup(index, model, name, allow_local_upload, wait_s, **connection) -> None:
    """Let the cluster embed and search INDEX by itself: model, pipelines and a search template.

    Registers the model (reusing one already registered with the same bytes) and deploys it;
    makes INDEX-embed the index's default ingest pipeline (a plain {"text": ...} document is
    embedded by the cluster) and INDEX-hybrid its default search pipeline, with the index's
    tuned fusion ('hybrid-qpr tune'; run setup again after tuning); stores the search template
    INDEX-hybrid, the hybrid query that needs only the question. Safe to run again.

    \b
    Example:
      hybrid-qpr mlcommons setup --index questions
      curl -s localhost:9200/questions/_search/template -H 'Content-Type: application/json' \\
        -d '{"id": "questions-hybrid", "params": {"query_text": "how do i reset my password"}}'
    """
    from hybrid_qpr import resources
    from hybrid_qpr.mlcommons import setup as setup_cluster
    from hybrid_qpr.errors import require

    require("onnx", feature="'hybrid-qpr mlcommons setup' (it adapts the ONNX graph)")
    client = cluster_client(**connection)
    if model is None:
        from hybrid_qpr.backends.opensearch import OpenSearchBackend

        built_with = OpenSearchBackend(client, index).model_dir if client.indices.exists(index=index) else None
        model = built_with if built_with and resources.resolve_model(built_with).is_dir() else None
    done = setup_cluster(client, resources.resolve_model(model), index, name=name,
                         allow_local_upload=allow_local_upload, deploy_timeout=wait_s)
    fusion = done.fusion
    click.echo(f"model {done.model_id}: {'already registered, ' if done.reused_model else ''}deployed")
    click.echo(f"index {index}: ingest pipeline {done.ingest_pipeline}, search pipeline {done.search_pipeline} "
               f"({fusion['fusion']} alpha {fusion['alpha']}, depth {fusion['depth']}"
               f"{'' if fusion['tuned'] else '; untuned: run hybrid-qpr tune, then setup again'})")
    click.echo(f"search template {done.template}: query with only the text, e.g.")
    click.echo(f"  curl -s {(connection.get('opensearch') or 'http://localhost:9200').rstrip('/')}/{index}/_search/template "
               "-H 'Content-Type: application/json' "
               f"-d '{{\"id\": \"{done.template}\", \"params\": {{\"query_text\": \"how do i reset my password\"}}}}'")
