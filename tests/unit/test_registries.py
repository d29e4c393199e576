"""Each option list is kept in one place (the modes in ``search.MODES``, the fusion methods in
``fusion.FUSION_METHODS``, the cluster engines in ``connection.ENGINE_SPECS``, the model kinds in
``artifacts.ModelKind``) and every surface reads it: a value added there reaches the CLI, the
library, the workbench page and its OpenAPI, or fails loudly (a fusion method without its
OpenSearch search-pipeline file, an encoder kind without its module)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from importlib import resources
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hybrid_qpr import fusion, search
from hybrid_qpr.backends.base import Capabilities
from hybrid_qpr.backends.cluster import connection
from hybrid_qpr.errors import BackendError, ConfigError


def _choices(command: click.Command, option: str) -> tuple[str, ...]:
    [param] = [p for p in command.params if option in p.opts]
    return tuple(param.type.choices)


# ---------------------------------------------------------------------- modes
def test_the_modes_come_from_the_literal_and_each_has_a_runner():
    assert search.MODES == typing.get_args(search.Mode) and search.DEFAULT_MODE in search.MODES
    assert set(search.MODE_RUNNERS) == set(search.MODES)
    assert set(search.SERVER_SIDE_MODES) <= set(search.MODES)
    fields = {f.name for f in dataclasses.fields(Capabilities)}
    assert all(f"server_side_{mode}" in fields for mode in search.SERVER_SIDE_MODES)
    assert all(new in search.MODES and old not in search.MODES for old, new in search.MODE_ALIASES.items())
    assert search.ACCEPTED_MODES == (*search.MODES, *search.MODE_ALIASES)


def test_a_mode_and_its_old_name_are_read_alike_and_a_wrong_one_is_named():
    assert [search.check_mode(mode) for mode in search.MODES] == list(search.MODES)
    assert search.check_mode("rerank") == "rescore"
    with pytest.raises(ConfigError, match="mode='nope': allowed values are bm25, knn, hybrid, rescore"):
        search.check_mode("nope")


def test_every_surface_lists_the_modes():
    from hybrid_qpr.cli.evaluate import evaluate as evaluate_command
    from hybrid_qpr.cli.query import query
    from hybrid_qpr.evaluation.evaluator import evaluate
    from hybrid_qpr.workbench.openapi import openapi_spec
    from hybrid_qpr.workbench.service import COMPARE_MODES

    assert _choices(query, "--mode") == search.MODES
    assert [p.default for p in evaluate_command.params if "--modes" in p.opts] == [",".join(search.MODES)]
    assert tuple(inspect.signature(evaluate).parameters["modes"].default) == search.MODES
    assert COMPARE_MODES == search.MODES
    [mode] = [p for p in openapi_spec()["paths"]["/api/search"]["get"]["parameters"] if p["name"] == "mode"]
    assert mode["schema"]["enum"] == list(search.ACCEPTED_MODES)


def test_the_cli_accepts_a_modes_old_name_and_its_help_lists_the_new_one():
    from hybrid_qpr.cli.query import query

    context = query.make_context("query", ["x", "--index", "idx", "--mode", "rerank"])
    assert context.params["mode"] == "rescore"
    help_text = CliRunner().invoke(query, ["--help"], terminal_width=200).output
    assert "[bm25|knn|hybrid|rescore]" in help_text and "--rescore-depth" in help_text


# ---------------------------------------------------------------------- fusion methods
def test_the_fusion_methods_come_from_the_literals_and_each_fuses():
    assert fusion.FUSION_METHODS == typing.get_args(fusion.FusionMethod) == ("rrf", *fusion.NORMALISATIONS)
    first, second = (["a", "b", "c"], [3.0, 2.0, 1.0]), (["c", "d"], [0.9, 0.5])
    for method in fusion.FUSION_METHODS:
        fused = fusion.fuse_ranked(first, second, fusion=method, alpha=0.5)
        assert sorted(f.id for f in fused) == ["a", "b", "c", "d"], method
    for normalisation in fusion.NORMALISATIONS:
        assert len(fusion.normalize([1.0, 2.0], normalisation)) == 2  # type: ignore[arg-type]


def test_every_surface_lists_the_fusion_methods():
    from hybrid_qpr.cli.evaluate import evaluate as evaluate_command
    from hybrid_qpr.cli.query import query
    from hybrid_qpr.cli.search_pipeline import install
    from hybrid_qpr.workbench.openapi import openapi_spec

    for command, option in ((query, "--fusion"), (evaluate_command, "--fusion"), (install, "--fusion")):
        assert _choices(command, option) == fusion.FUSION_METHODS, command.name
    [method] = [p for p in openapi_spec()["paths"]["/api/search"]["get"]["parameters"] if p["name"] == "fusion"]
    assert method["schema"]["enum"] == list(fusion.FUSION_METHODS)
    static = resources.files("hybrid_qpr.workbench") / "static"
    page, script = (static / "index.html").read_text(encoding="utf-8"), (static / "app.js").read_text(encoding="utf-8")
    assert not [m for m in fusion.FUSION_METHODS if f'value="{m}"' in page]  # the page lists none itself
    assert "h.fusions" in script  # it reads them from /api/health


def test_every_fusion_method_has_its_opensearch_pipeline_or_says_it_runs_client_side_only(monkeypatch):
    from hybrid_qpr.backends.opensearch import CLIENT_SIDE_ONLY, pipeline_body

    assert set(CLIENT_SIDE_ONLY) < set(fusion.FUSION_METHODS)
    from hybrid_qpr.resources import mapping_file

    for method in fusion.FUSION_METHODS:
        if method in CLIENT_SIDE_ONLY:
            with pytest.raises(ConfigError, match=f"fusion {method} runs client-side only"):
                pipeline_body(method, 0.3)
            assert not mapping_file(f"opensearch/pipeline-{method}.json").is_file()
        else:
            assert pipeline_body(method, 0.3)["description"], method
    monkeypatch.setattr(fusion, "FUSION_METHODS", (*fusion.FUSION_METHODS, "newmethod"))
    with pytest.raises(BackendError, match="pipeline-newmethod.json: mapping file is missing"):
        pipeline_body("newmethod")


# ---------------------------------------------------------------------- engines
def test_every_engine_names_its_backend_and_gets_a_cli_flag():
    from hybrid_qpr.cli._common import chosen_engine, cluster_options

    assert connection.ENGINES == tuple(connection.ENGINE_SPECS) == typing.get_args(connection.Engine)
    for engine, spec in connection.ENGINE_SPECS.items():
        module = connection.engine_module(engine)
        assert callable(module.connect) and getattr(module, spec.backend_class).engine == engine
    command = cluster_options(click.command()(lambda **kwargs: None))
    assert {engine for engine in connection.ENGINES if any(f"--{engine}" in p.opts for p in command.params)} == \
        set(connection.ENGINES)
    assert chosen_engine({engine: "" for engine in connection.ENGINES[1:]}) == connection.ENGINES[1]
    with pytest.raises(click.UsageError, match="not several"):
        chosen_engine({engine: "" for engine in connection.ENGINES})


# ---------------------------------------------------------------------- model kinds
def test_the_model_kinds_come_from_the_literals():
    from hybrid_qpr import artifacts

    assert artifacts.MODEL_KINDS == typing.get_args(artifacts.ModelKind) == \
        (*artifacts.ENCODER_KINDS, artifacts.CROSS_ENCODER_KIND)
    assert artifacts.ENCODER_KINDS == typing.get_args(artifacts.EncoderKind) == \
        (*artifacts.SINGLE_MODEL_KINDS, artifacts.ASYMMETRIC_KIND)
    assert artifacts.SINGLE_MODEL_KINDS == typing.get_args(artifacts.SingleModelKind)


def test_every_encoder_kind_loads_by_its_own_class_and_every_single_kind_exports():
    from hybrid_qpr import artifacts
    from hybrid_qpr.cli.export import EXPORTERS, export
    from hybrid_qpr.encoders.base import Encoder, _import_encoder_kinds
    from hybrid_qpr.export.cross_encoder import KIND as EXPORTED_RERANKER_KIND
    from hybrid_qpr.rerankers.cross_encoder import KIND as RERANKER_KIND

    _import_encoder_kinds()
    assert set(Encoder._kinds) == set(artifacts.ENCODER_KINDS)
    for kind, cls in Encoder._kinds.items():
        assert cls.kind == kind and cls.__module__ == f"hybrid_qpr.encoders.{kind}", kind
    from hybrid_qpr.cli.export import EXPORT_KINDS

    # every single model kind exports; "static" is an export-only kind (written as a transformer model)
    assert _choices(export, "--kind") == EXPORT_KINDS == tuple(EXPORTERS)
    assert EXPORT_KINDS[:len(artifacts.SINGLE_MODEL_KINDS)] == artifacts.SINGLE_MODEL_KINDS
    assert [p.default for p in export.params if "--kind" in p.opts] == [artifacts.SINGLE_MODEL_KINDS[0]]
    assert RERANKER_KIND == EXPORTED_RERANKER_KIND == artifacts.CROSS_ENCODER_KIND


def test_a_new_encoder_kind_without_its_module_fails_loudly_and_an_unknown_kind_is_named(tmp_path, monkeypatch):
    from hybrid_qpr import artifacts
    from hybrid_qpr.encoders import base
    from hybrid_qpr.errors import ArtifactError

    model = tmp_path / "model"
    model.mkdir()
    for name in (artifacts.ENCODER_MODEL_FILE, artifacts.ENCODER_TOKENIZER_FILE):
        (model / name).write_bytes(b"")
    artifacts.write_encoder_config(model, {"kind": "nope", "dim": 4, "distance": "cosine"})
    with pytest.raises(ArtifactError, match=r"kind='nope'; allowed kinds are \['asymmetric', 'cnn', 'transformer'\]"):
        base.Encoder.load(model)
    monkeypatch.setattr(base, "ENCODER_KINDS", (*artifacts.ENCODER_KINDS, "newkind"))
    with pytest.raises(ModuleNotFoundError, match="hybrid_qpr.encoders.newkind"):
        base.Encoder.load(model)


def test_every_kind_the_package_writes_or_reads_is_a_registered_one():
    """Any kind named in the code (a config.json written, a kind compared, a class's kind, a
    ``--kind`` in a message) is one of ``artifacts.MODEL_KINDS``, and each of those is named."""
    import re

    from hybrid_qpr import artifacts

    patterns = [r'"kind":\s*"([\w-]+)"', r'config(?:\.get\("kind"\)|\["kind"\])\s*[!=]=\s*"([\w-]+)"', r'^\s+kind = "([\w-]+)"$',
                r"--kind ([\w-]+)", r'kind: "([\w-]+)"']
    package = resources.files("hybrid_qpr")
    named: dict[str, set[str]] = {}
    for path in sorted(Path(str(package)).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in patterns:
            for kind in re.findall(pattern, text, flags=re.MULTILINE):
                named.setdefault(kind, set()).add(path.name)
    from hybrid_qpr.cli.export import EXPORT_KINDS

    export_only = set(EXPORT_KINDS) - set(artifacts.MODEL_KINDS)  # "static": exported as a transformer model
    named = {kind: files for kind, files in named.items() if kind not in export_only}
    unknown = {kind: files for kind, files in named.items() if kind not in artifacts.MODEL_KINDS}
    assert not unknown, f"kinds missing from artifacts.ModelKind: {unknown}"
    assert set(named) == set(artifacts.MODEL_KINDS)


# ---------------------------------------------------------------------- the other option lists
def _library_choices():
    from hybrid_qpr import errors
    from hybrid_qpr.data import beir, clusters, documents, splits
    from hybrid_qpr.localnode import distributions
    from hybrid_qpr.model import choices as model_choices
    from hybrid_qpr.training import choices as training_choices

    return [  # (command path, option, the library's tuple, the Literal it is made from)
        (("ingest",), "--format", documents.FORMATS, documents.DocumentFormat),
        (("dataset", "build"), "--on-bad-line", errors.ON_BAD_LINE, errors.OnBadLine),
        (("dataset", "build"), "--key", clusters.KEY_MODES, clusters.KeyMode),
        (("dataset", "from-answers"), "--split-name", splits.SPLITS, splits.Split),
        (("tune",), "--split", beir.EVAL_SPLITS, beir.EvalSplit),
        (("evaluate",), "--split", beir.EVAL_SPLITS, beir.EvalSplit),
        (("node", "start"), "--engine", distributions.ENGINES, distributions.Engine),
        (("reranker", "train"), "--loss", training_choices.RERANKER_LOSSES, training_choices.RerankerLoss),
        (("reranker", "train"), "--precision", training_choices.PRECISIONS, training_choices.Precision),
        (("reranker", "train"), "--pooling", model_choices.POOLINGS, model_choices.Pooling),
        (("asbert",), "--loss", training_choices.ASBERT_LOSSES, training_choices.AsbertLoss),
        (("asbert",), "--negatives", model_choices.LABELLED_NEGATIVES, model_choices.LabelledNegatives),
        (("finetune",), "--loss", training_choices.TRANSFORMER_LOSSES, training_choices.LossName),
        (("finetune",), "--negatives", model_choices.NEGATIVES, model_choices.Negatives),
        (("finetune",), "--batching", training_choices.BATCHINGS, training_choices.Batching),
        (("train",), "--negatives", model_choices.NEGATIVES, model_choices.Negatives),
        (("train",), "--triplet-distance", model_choices.TRIPLET_DISTANCES, model_choices.TripletDistance),
    ]


def test_every_cli_choice_of_a_library_list_reads_that_list():
    """A ``click.Choice`` that repeats a library list takes it from the library (its tuple,
    made from its ``Literal``), so a value added there reaches the command line."""
    from hybrid_qpr.cli.main import cli

    for path, option, values, literal in _library_choices():
        command = cli
        for name in path:
            command = command.get_command(click.Context(command), name)
        assert _choices(command, option) == values == typing.get_args(literal), (path, option)
    from hybrid_qpr.localnode import distributions

    assert connection.ENGINES is distributions.ENGINES  # the engines are kept once, with the node builder
