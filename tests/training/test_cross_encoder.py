"""The cross-encoder reranker: the scoring head, ONNX export parity, bad reranker directories,
the second stage on the embedded index (the cluster backends: tests/cluster/test_reranker.py),
tuning and evaluation with it, and its training (the generic trainer's resume, losses, bf16,
distillation, mined negatives, dev sets, the CLI). The model is a tiny randomly initialised BERT
with MiniLM's tokenizer (built once per session: tests/conftest.py), so the tests check the
plumbing, not the quality."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hybrid_qpr import resources
from hybrid_qpr.errors import ArtifactError, ConfigError, RerankerError
from hybrid_qpr.testing.rerankers import searches_rerank, tiny_bert
from hybrid_qpr.testing.scores import same_ranked, same_score

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")


@pytest.fixture()
def tiny_model(tiny_cross_encoder):
    return tiny_cross_encoder


@pytest.fixture()
def exported(exported_tiny_cross_encoder):
    return exported_tiny_cross_encoder


def test_head_scores_one_logit_per_pair_and_pooling_matters(tiny_model):
    from hybrid_qpr.model.cross_encoder import POOLINGS, SEGMENT_SCALE, CrossEncoder

    batch = tiny_model.collate(["q one", "q two", "q three"], ["a", "b b", "c c c"])
    by_pooling = {}
    for pooling in POOLINGS:
        tiny_model.pooling = pooling
        try:
            by_pooling[pooling] = tiny_model(batch)
            # padding does not change a pair's score: alone or batched with a longer pair
            assert torch.allclose(tiny_model(tiny_model.collate(["q one"], ["a"])), by_pooling[pooling][:1], atol=1e-5)
        finally:
            tiny_model.pooling = "segments"
        assert by_pooling[pooling].shape == (3,)
    assert not torch.allclose(by_pooling["mean"], by_pooling["cls"])
    # an untrained "segments" head scores SEGMENT_SCALE x the cosine of the two segments' mean vectors
    fresh = CrossEncoder(tiny_model.backbone, tiny_model.pairs.path, max_length=48, query_tokens=16, pooling="segments").eval()
    with torch.no_grad():
        hidden = tiny_model.backbone(**batch).last_hidden_state
        m, t = batch["attention_mask"].float(), batch["token_type_ids"].float()
        q = (hidden * (m * (1 - t))[..., None]).sum(1) / (m * (1 - t)).sum(1, keepdim=True)
        c = (hidden * (m * t)[..., None]).sum(1) / (m * t).sum(1, keepdim=True)
        expected = SEGMENT_SCALE * torch.nn.functional.cosine_similarity(q, c)
        assert torch.allclose(fresh(batch), expected, atol=1e-4)


def test_saved_model_reloads_with_its_head_and_settings(tiny_model, tmp_path):
    from hybrid_qpr.model.cross_encoder import CrossEncoder

    tiny_model.save(tmp_path / "saved", extra={"training": {"note": "x"}})
    back = CrossEncoder.from_dir(tmp_path / "saved").eval()
    assert back.settings() == {**tiny_model.settings(), "source": tiny_model.source}
    q, t = ["how are you"], ["fine thanks"]
    assert torch.allclose(back.predict(q, t), tiny_model.predict(q, t))


def test_onnx_export_matches_torch_and_loads_torch_free(tiny_model, exported):
    from hybrid_qpr.rerankers import Reranker

    out, config = exported
    assert config["kind"] == "cross-encoder" and config["parity_max_abs_diff_fp32"] <= 1e-4
    reranker = Reranker(out)
    texts = ["paris is the capital", "", "a " * 200, "Ünïcödé 東京"]
    got = reranker.score("what is the capital of france", texts)
    expected = tiny_model.predict(["what is the capital of france"] * len(texts), texts).numpy()
    assert np.abs(got - expected).max() <= 1e-4
    assert reranker.score("q", []).shape == (0,)


def test_int8_export_is_smaller_and_close(tiny_model, exported, tmp_path):
    from hybrid_qpr.export.cross_encoder import export_cross_encoder
    from hybrid_qpr.rerankers import Reranker

    config = export_cross_encoder(tiny_model, tmp_path / "int8", quantize=True)
    assert config["quantization"] == "int8-dynamic"
    export_cross_encoder(tiny_model, tmp_path / "traced-int8", quantize=True, graph="torch")
    from hybrid_qpr.rerankers.cross_encoder import ONE_RUN, RUN_COST_TOKENS

    fp32, int8 = Reranker(exported[0]), Reranker(tmp_path / "int8")
    # length-sorted runs, except a traced int8 graph: one run per query (docs/reranker.md)
    assert (fp32.run_cost, int8.run_cost, Reranker(tmp_path / "traced-int8").run_cost) == (
        RUN_COST_TOKENS, RUN_COST_TOKENS, ONE_RUN)
    texts = ["one answer", "another answer here", "a third"]
    assert np.abs(fp32.score("a question", texts) - int8.score("a question", texts)).max() < 0.1


def test_fused_and_traced_graphs_score_alike_for_every_pooling(tiny_model, tmp_path):
    """The fused graph (onnxruntime's Attention, SkipLayerNormalization, BiasGelu) is the default
    export; it must score like torch and like the traced graph, for each pooling, and its int8
    form must hold its attention in QAttention."""
    import onnx

    from hybrid_qpr.export.cross_encoder import export_cross_encoder
    from hybrid_qpr.rerankers import Reranker

    texts = ["paris is the capital", "", "a " * 200, "Ünïcödé 東京", "x"]
    pooling = tiny_model.pooling
    try:
        for choice in ("segments", "mean", "cls"):
            tiny_model.pooling = choice
            fused = export_cross_encoder(tiny_model, tmp_path / f"fused-{choice}")
            traced = export_cross_encoder(tiny_model, tmp_path / f"torch-{choice}", graph="torch")
            assert (fused["graph"], traced["graph"]) == ("fused", "torch")
            expected = tiny_model.predict(["where is paris"] * len(texts), texts).numpy()
            for directory in (tmp_path / f"fused-{choice}", tmp_path / f"torch-{choice}"):
                assert np.abs(Reranker(directory).score("where is paris", texts) - expected).max() <= 1e-4, directory
        ops = {node.op_type for node in onnx.load(str(tmp_path / "fused-cls" / "model.onnx")).graph.node}
        assert {"Attention", "SkipLayerNormalization", "BiasGelu"} <= ops and "Softmax" not in ops
        export_cross_encoder(tiny_model, tmp_path / "fused-int8", quantize=True)
        ops = {node.op_type for node in onnx.load(str(tmp_path / "fused-int8" / "model.onnx")).graph.node}
        assert "QAttention" in ops and "Attention" not in ops
    finally:
        tiny_model.pooling = pooling


def test_the_fused_graph_refuses_a_backbone_it_was_not_written_for(tiny_model, tmp_path):
    from hybrid_qpr.errors import ArtifactError
    from hybrid_qpr.export.cross_encoder import export_cross_encoder

    act = tiny_model.backbone.config.hidden_act
    tiny_model.backbone.config.hidden_act = "relu"
    try:
        with pytest.raises(ArtifactError, match="not the 'relu' activation: export it with --graph torch"):
            export_cross_encoder(tiny_model, tmp_path / "out", graph="fused")
        assert not (tmp_path / "out").exists()
        assert export_cross_encoder(tiny_model, tmp_path / "auto")["graph"] == "torch"  # the default falls back
    finally:
        tiny_model.backbone.config.hidden_act = act
    with pytest.raises(ArtifactError, match="allowed values are fused, torch"):
        export_cross_encoder(tiny_model, tmp_path / "out", graph="tf")


def test_length_sorted_runs_cover_every_pair_and_score_like_one_run(exported):
    from hybrid_qpr.rerankers import Reranker
    from hybrid_qpr.rerankers.cross_encoder import length_runs

    lengths = [40, 9, 41, 10, 12, 90, 11, 39]
    runs = length_runs(lengths, run_cost=16)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    assert [sorted(lengths[i] for i in run) for run in runs] == [[9, 10, 11, 12], [39, 40, 41], [90]]
    assert length_runs(lengths, run_cost=10**9) == [sorted(range(len(lengths)), key=lambda i: lengths[i])]
    assert length_runs([]) == []
    texts = ["short", "a " * 200, "a middling answer of a few more words", "", "x y", "b " * 30]
    split, one = Reranker(exported[0], run_cost=0), Reranker(exported[0], run_cost=10**9)
    assert len(length_runs(split.pairs.encode("a question", texts)[1].sum(1).tolist(), 0)) > 1
    assert np.abs(split.score("a question", texts) - one.score("a question", texts)).max() <= 1e-5  # padding is masked


def test_bad_reranker_directories_give_one_line_errors(exported, tmp_path):
    from hybrid_qpr.rerankers import Reranker

    with pytest.raises(ArtifactError, match="does not exist"):
        Reranker(tmp_path / "nowhere")
    with pytest.raises(ArtifactError, match="is not a cross-encoder"):
        Reranker(resources.model_dir())  # an encoder directory
    bad = tmp_path / "bad-tokenizer"
    shutil.copytree(exported[0], bad)
    data = json.loads((bad / "tokenizer.json").read_text())
    data["model"]["vocab"]["zzzextra"] = len(data["model"]["vocab"])
    (bad / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="not the tokenizer this cross-encoder was trained with"):
        Reranker(bad)
    missing = tmp_path / "no-model"
    shutil.copytree(exported[0], missing)
    (missing / "model.onnx").unlink()
    with pytest.raises(ArtifactError, match="model.onnx is missing"):
        Reranker(missing)
    for error in (ArtifactError("x"),):
        assert "\n" not in str(error)


def test_an_encoder_directory_refuses_a_cross_encoder(exported):
    from hybrid_qpr.encoders import Encoder

    with pytest.raises(ArtifactError, match="cross-encoder"):
        Encoder.load(exported[0])


# ---------------------------------------------------------------------- search integration
def test_reranker_on_the_embedded_index(exported, tmp_path, question_bank, committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex

    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(question_bank[:60], committed_encoder, show_progress=False)
    searcher = searches_rerank(LocalIndex.open(tmp_path / "idx"), committed_encoder, exported[0],
                                "i forgot my password, what now?")
    # a reranker that fails mid-query fails the query with one line; nothing is returned unranked
    from hybrid_qpr.encoders.base import onnx_session

    searcher.reranker.session = onnx_session(committed_encoder.model_dir / "model.onnx")  # a graph with other inputs
    with pytest.raises(RerankerError, match="no results are shown re-ranked") as caught:
        searcher.search("i forgot my password", mode="hybrid", top_k=3)
    assert "\n" not in str(caught.value)


def test_query_cli_json_keeps_first_stage_and_adds_the_cross_encoder(exported, tmp_path, question_bank,
                                                                      committed_encoder):
    from click.testing import CliRunner

    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.cli.main import cli

    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(question_bank[:40], committed_encoder, show_progress=False)
    args = ["query", "how do i change my email address", "--index", str(tmp_path / "idx"), "--json", "-k", "4"]
    runner = CliRunner()
    plain = json.loads(runner.invoke(cli, args).output)
    result = runner.invoke(cli, [*args, "--reranker", str(exported[0]), "--reranker-depth", "3"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)["hits"]
    first = {h["id"]: h for h in plain["hits"]}
    assert sorted(h["first_stage_rank"] for h in hits) == [1, 2, 3, 4]
    for h in hits:
        plain_hit = first[h["id"]]
        assert same_score(h["score"], plain_hit["score"]) and same_ranked(h["bm25"], plain_hit["bm25"])
        assert (h["cross_encoder"] is None) == (h["first_stage_rank"] > 3)
    bad = runner.invoke(cli, [*args, "--reranker", str(resources.model_dir())])
    assert bad.exit_code == 1 and "is not a cross-encoder" in bad.output and "Traceback" not in bad.output


def test_evaluate_reports_each_mode_with_and_without_the_reranker(exported, tmp_path, committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.evaluator import evaluate, tune, tune_reranker
    from hybrid_qpr.search import HybridSearcher

    beir = resources.examples_dir() / "beir"
    corpus, queries, qrels = load_beir(beir, "test")
    from hybrid_qpr.types import Document

    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest([Document(i, t) for i, t in corpus.items()], committed_encoder, show_progress=False)
    searcher = HybridSearcher(LocalIndex.open(tmp_path / "idx"), committed_encoder, reranker=exported[0],
                              reranker_depth=10)
    some = dict(list(queries.items())[:8])
    out = evaluate(searcher, some, qrels, modes=("bm25", "hybrid"))
    assert list(out) == ["bm25", "bm25+reranker", "hybrid", "hybrid+reranker"]
    assert out["hybrid+reranker"]["settings"]["reranker_depth"] == 10
    tuned = tune(searcher, some, qrels)
    chosen = tune_reranker(searcher, some, qrels, tuned, depths=(5, 10))
    main = chosen.metric
    # a random cross-encoder: whatever it chose is not below the hybrid without it
    assert chosen.depth == 0 or chosen.by_depth[chosen.depth][main] > chosen.without[main]
    assert set(chosen.by_depth) == {5, 10}
    # the grid: every depth x norm x weight (weight 0 once: the cross-encoder alone, whatever the norm)
    assert len(chosen.grid) == 2 * (1 + 2 * 6)
    assert {(r["norm"], r["weight"]) for r in chosen.grid if r["weight"] == 0} == {("minmax", 0.0)}
    stored = chosen.defaults
    assert set(stored) >= {"depth", "model", "norm", "weight", "without"}
    assert stored["depth"] == 0 or chosen.grid and any(
        r["depth"] == stored["depth"] and r["weight"] == stored["weight"] and r["allowed"] for r in chosen.grid)


def _hits(scores):
    from hybrid_qpr.search import SearchResult

    return [SearchResult(f"d{i}", f"text {i}", s) for i, s in enumerate(scores)]


def test_interpolation_mixes_the_logit_with_the_normalised_first_stage(exported):
    from hybrid_qpr.rerankers import Interpolation, Reranker
    from hybrid_qpr.rerankers.cross_encoder import RANK_K

    reranker = Reranker(exported[0])
    assert reranker.interpolation == Interpolation()  # never tuned: the cross-encoder alone
    hits = _hits([9.0, 7.0, 5.0, 1.0, 0.5])
    logits = [0.0, 1.0, 3.0, 2.0, 9.0]
    # weight 0: the logits' order; the tail (beyond depth 4) keeps its place
    plain = reranker.reorder(hits, 4, logits[:4])
    assert [h.id for h in plain] == ["d2", "d3", "d1", "d0", "d4"] and plain[-1].reranked is None
    # min-max over the reranked head: 9 -> 1, 1 -> 0; final = logit + weight x part
    mixed = reranker.reorder(hits, 4, logits[:4], Interpolation(4.0, "minmax"))
    by_id = {h.id: h.reranked for h in mixed[:4]}
    assert by_id["d0"].first_stage == 1.0 and by_id["d3"].first_stage == 0.0
    assert by_id["d1"].first_stage == pytest.approx(0.75)
    assert by_id["d1"].score == pytest.approx(1.0 + 4.0 * 0.75)
    # finals 4, 4, 5, 2: d2 first, then d0 and d1 (a tie keeps the first-stage order)
    assert [h.id for h in mixed] == ["d2", "d0", "d1", "d3", "d4"]
    assert [h.cross_encoder.rank for h in mixed[:4]] == [1, 2, 3, 4]
    # a large weight keeps the first-stage order; the rank norm is (k + 1) / (k + rank)
    assert [h.id for h in reranker.reorder(hits, 4, logits[:4], Interpolation(1e6, "rank"))] == [h.id for h in hits]
    ranked = reranker.reorder(hits, 4, logits[:4], Interpolation(1.0, "rank"))
    assert {h.id: h.reranked.first_stage for h in ranked[:4]}["d2"] == pytest.approx((RANK_K + 1) / (RANK_K + 3))
    # equal first-stage scores: min-max has no spread, every part is the same
    flat = reranker.reorder(_hits([2.0, 2.0]), 2, [0.0, 1.0], Interpolation(3.0, "minmax"))
    assert [h.id for h in flat] == ["d1", "d0"]
    # JSON shows both parts of the final score
    shown = mixed[0].to_dict()["cross_encoder"]
    assert shown == {"score": 3.0, "rank": 1, "first_stage": 0.5, "weight": 4.0, "final": pytest.approx(5.0)}
    for bad in ({"weight": -1}, {"weight": "x"}, {"norm": "zscore"}):
        with pytest.raises(ConfigError, match="reranker"):
            Interpolation.of(bad, "config.json")


def test_query_follows_the_tuned_second_stage_and_says_when_it_is_off(exported, tmp_path, question_bank,
                                                                      committed_encoder):
    from click.testing import CliRunner

    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.rerankers import Reranker

    reranker_dir = tmp_path / "reranker"
    shutil.copytree(exported[0], reranker_dir)
    fingerprint = Reranker(reranker_dir).fingerprint
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(question_bank[:40], committed_encoder, show_progress=False)
    # the fusion given, so the first stage is the same before and after the index's defaults are stored
    base = ["query", "how do i change my email address", "--index", str(tmp_path / "idx"), "--json", "-k", "4",
            "--fusion", "rrf", "--alpha", "0.5"]
    runner = CliRunner()
    plain = json.loads(runner.invoke(cli, base).output)["hits"]
    with_reranker = [*base, "--reranker", str(reranker_dir)]

    def store(reranker):
        opened = LocalIndex.open(tmp_path / "idx")
        opened.set_fusion_defaults({"fusion": "rrf", "alpha": 0.5, "reranker": reranker})
        opened.close()

    # tuned off: one line on stderr, the first stage's results, no cross-encoder fields
    store({"depth": 0, "model": fingerprint, "metric": "MRR@20", "without": 0.5, "weight": 0.0, "norm": "minmax"})
    off = runner.invoke(cli, with_reranker)
    assert off.exit_code == 0, off.output
    assert off.stderr.count("\n") == 1 and "does not help here" in off.stderr and "--reranker-depth" in off.stderr
    assert [h["id"] for h in json.loads(off.stdout)["hits"]] == [h["id"] for h in plain]
    assert "cross_encoder" not in json.loads(off.stdout)["hits"][0]
    forced = json.loads(runner.invoke(cli, [*with_reranker, "--reranker-depth", "3"]).stdout)["hits"]
    assert forced[0]["cross_encoder"]["weight"] == 0.0
    # tuned on: its depth and weight are applied, and the JSON shows both parts
    store({"depth": 3, "model": fingerprint, "weight": 2.0, "norm": "minmax"})
    hits = json.loads(runner.invoke(cli, with_reranker).stdout)["hits"]
    parts = [h["cross_encoder"] for h in hits[:3]]
    assert all(p["weight"] == 2.0 and p["final"] == pytest.approx(p["score"] + 2.0 * p["first_stage"]) for p in parts)
    assert [p["final"] for p in parts] == sorted((p["final"] for p in parts), reverse=True)
    assert hits[3]["cross_encoder"] is None
    # an index tuned for another reranker: the reranker's own config.json (tune --save-to-model) applies
    store({"depth": 3, "model": "another", "weight": 2.0})
    config = json.loads((reranker_dir / "config.json").read_text())
    config["second_stage"] = {"depth": 2, "weight": 1.0, "norm": "rank"}
    (reranker_dir / "config.json").write_text(json.dumps(config))
    hits = json.loads(runner.invoke(cli, with_reranker).stdout)["hits"]
    assert [h["cross_encoder"] is not None for h in hits] == [True, True, False, False]
    assert hits[0]["cross_encoder"]["weight"] == 1.0
    config["second_stage"] = {"depth": 2, "weight": -1}
    (reranker_dir / "config.json").write_text(json.dumps(config))
    bad = runner.invoke(cli, with_reranker)
    assert bad.exit_code == 1 and "weight=-1" in bad.output and "Traceback" not in bad.output


def test_tune_cli_stores_the_second_stage_in_the_index_and_the_reranker(exported, tmp_path, committed_encoder):
    from click.testing import CliRunner

    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.types import Document

    beir = resources.examples_dir() / "beir"
    corpus, _, _ = load_beir(beir, "test")
    model_dir = tmp_path / "model"
    shutil.copytree(committed_encoder.model_dir, model_dir)
    reranker_dir = tmp_path / "reranker"
    shutil.copytree(exported[0], reranker_dir)
    from hybrid_qpr.encoders import Encoder

    encoder = Encoder.load(model_dir)
    index = LocalIndex.create(tmp_path / "idx", encoder)
    index.ingest([Document(i, t) for i, t in corpus.items()], encoder, show_progress=False)
    index.close()
    result = CliRunner().invoke(cli, ["tune", "--beir", str(beir), "--split", "test", "--index", str(tmp_path / "idx"),
                                      "--model", str(model_dir), "--max-queries", "6", "--reranker", str(reranker_dir),
                                      "--reranker-depths", "5", "--save-to-model"])
    assert result.exit_code == 0, result.output
    assert "weight" in result.output
    stored = LocalIndex.open(tmp_path / "idx").fusion_defaults["reranker"]
    travelled = json.loads((reranker_dir / "config.json").read_text())["second_stage"]
    assert stored["depth"] in (0, 5) and {k: travelled[k] for k in stored} == stored
    assert travelled["first_stage_model"] == encoder.fingerprint


# ---------------------------------------------------------------------- trainer
def test_trainer_keeps_the_best_state_and_resumes(tmp_path):
    from hybrid_qpr.training.trainer import Trainer, TrainerSettings, lr_factor

    assert [round(lr_factor(s, 10, 0.2), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]

    def make(steps):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        x, y = torch.randn(32, 3), torch.randn(32, 1)

        def step_loss(step):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return float(loss)

        def evaluate():
            with torch.no_grad():
                return -float(torch.nn.functional.mse_loss(model(x), y))

        settings = TrainerSettings(steps=steps, lr=0.05, eval_every=2, checkpoint_every=1, log_every=1, patience=50)
        return model, Trainer(model, settings, tmp_path / "run", step_loss=step_loss, evaluate=evaluate,
                              run_settings={"lr": 0.05, "steps": steps}, description="toy")

    model, trainer = make(4)
    first = trainer.run(show_progress=False)
    assert first.steps_done == 4 and first.best_step == 4 and len(first.history) == 3  # steps 0, 2, 4
    model, trainer = make(8)
    again = trainer.run(resume=True, show_progress=False)
    assert again.steps_done == 8 and [h["step"] for h in again.history] == [0, 2, 4, 6, 8]
    assert again.best_metric > first.best_metric
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "event" not in r] == list(range(1, 9))
    with pytest.raises(ConfigError, match="other settings"):
        Trainer(model, TrainerSettings(steps=8), tmp_path / "run", step_loss=lambda s: 0.0,
                run_settings={"lr": 0.1, "steps": 8}).run(resume=True, show_progress=False)


def test_listwise_and_bce_losses_by_hand():
    from hybrid_qpr.training.reranker import group_loss

    scores = torch.tensor([2.0, 0.0, 1.0, -1.0, 0.5, 0.5])
    grouped = scores.view(2, 3)
    expected = -(torch.log_softmax(grouped, 1)[:, 0]).mean()
    assert torch.isclose(group_loss(scores, 3, "listwise"), expected)
    labels = torch.tensor([[1.0, 0, 0], [1.0, 0, 0]])
    bce = -(labels * torch.nn.functional.logsigmoid(grouped) + (1 - labels) * torch.nn.functional.logsigmoid(-grouped)).mean()
    assert torch.isclose(group_loss(scores, 3, "bce"), bce)
    assert torch.isclose(group_loss(scores, 3, "listwise+bce"), expected + bce)


def test_length_buckets_score_like_one_padded_batch(tiny_model):
    """Scoring a step's pairs in length-sorted chunks changes the padding, not the scores, and
    gives them back in input order."""
    queries = ["q"] * 4 + ["a longer question here"] * 3
    texts = ["x", "a much longer candidate sentence with many words in it", "y y", "z", "short",
             "another fairly long candidate sentence", "w"]
    with torch.no_grad():
        whole = tiny_model.score_pairs(queries, texts)
        assert torch.allclose(whole, tiny_model(tiny_model.collate(queries, texts)))
        for buckets in (2, 3, 7, 20):
            assert torch.allclose(tiny_model.score_pairs(queries, texts, buckets), whole, atol=1e-5)


def test_cpu_bf16_support_is_read_from_the_cpu_flags(tmp_path):
    from hybrid_qpr.training.reranker import cpu_has_bf16

    (tmp_path / "avx2").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n")
    (tmp_path / "sapphire").write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n")
    (tmp_path / "no-flags").write_text("processor\t: 0\n")
    assert cpu_has_bf16(tmp_path / "avx2") is False
    assert cpu_has_bf16(tmp_path / "sapphire") is True
    assert cpu_has_bf16(tmp_path / "no-flags") is None and cpu_has_bf16(tmp_path / "missing") is None


def test_a_bf16_step_trains_the_fp32_weights(tiny_model):
    """Under bf16 autocast the weights stay fp32 and get fp32 gradients; the loss is finite and
    near the fp32 step's loss on the same batch."""
    import copy

    from hybrid_qpr.training.reranker import Example, RerankerSettings, step_function

    examples = [Example(f"question {i}", [f"answer {i}"], [f"wrong {i} {j}" for j in range(3)]) for i in range(4)]
    losses = {}
    for precision in ("fp32", "bf16"):
        model = copy.deepcopy(tiny_model).train()
        model.dropout.p = 0.0
        settings = RerankerSettings(batch_size=2, negatives=3, precision=precision, length_buckets=2)
        losses[precision] = step_function(model, examples, settings, seed=0)(0)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(g.dtype == torch.float32 for g in grads)
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses["fp32"] > 0 and abs(losses["bf16"] - losses["fp32"]) < 0.05 * losses["fp32"]
    with pytest.raises(ConfigError, match="precision='fp16'"):
        RerankerSettings(precision="fp16").check()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    """A saved 4-layer tiny cross-encoder with a random head: a teacher to cut."""
    from hybrid_qpr.model.cross_encoder import CrossEncoder

    directory = tmp_path_factory.mktemp("teacher")
    model = CrossEncoder.from_dir(tiny_bert(directory / "base", layers=4), max_length=48, query_tokens=16,
                                  pooling="segments")
    torch.nn.init.normal_(model.head.weight, std=1.0)
    model.save(directory / "model")
    return directory / "model", model.eval()


def test_student_starts_as_the_chosen_teacher_layers(tiny_teacher, tmp_path):
    from hybrid_qpr.export.cross_encoder import export_cross_encoder
    from hybrid_qpr.model.cross_encoder import CrossEncoder
    from hybrid_qpr.rerankers import Reranker
    from hybrid_qpr.training.reranker import RerankerSettings, build_model

    teacher_dir, teacher = tiny_teacher
    settings = RerankerSettings(teacher=str(teacher_dir.parent), max_length=48, query_tokens=16)  # a run dir
    student = build_model(replace(settings, layers=(1, 3))).eval()
    assert len(student.backbone.encoder.layer) == student.backbone.config.num_hidden_layers == 2
    for kept, source in zip(student.backbone.encoder.layer, (1, 3)):
        for (name, value), expected in zip(kept.state_dict().items(), teacher.backbone.encoder.layer[source].state_dict().values()):
            assert torch.equal(value, expected), name
    assert torch.equal(student.head.weight, teacher.head.weight)
    assert torch.equal(student.backbone.embeddings.word_embeddings.weight, teacher.backbone.embeddings.word_embeddings.weight)
    q, t = ["what is a river"] * 2, ["a river flows", "music"]
    whole = build_model(replace(settings, layers=(0, 1, 2, 3))).eval()
    assert torch.allclose(whole.predict(q, t), teacher.predict(q, t))  # every layer kept = the teacher
    assert not torch.allclose(student.predict(q, t), teacher.predict(q, t))
    student.save(tmp_path / "student")
    back = CrossEncoder.from_dir(tmp_path / "student").eval()
    assert back.backbone.config.num_hidden_layers == 2 and torch.allclose(back.predict(q, t), student.predict(q, t))
    config = export_cross_encoder(student, tmp_path / "onnx")
    assert config["parity_max_abs_diff_fp32"] <= 1e-4
    assert np.abs(Reranker(tmp_path / "onnx").score(q[0], t) - student.predict(q, t).numpy()).max() <= 1e-4
    with pytest.raises(ConfigError, match="has 4 layers"):
        build_model(replace(settings, layers=(1, 4)))
    for bad in ((3, 1), (), (1, 1)):
        with pytest.raises(ConfigError, match="increasing order"):
            replace(settings, layers=bad).check()
    with pytest.raises(ConfigError, match="not both"):
        replace(settings, base_model="x").check()


def test_distillation_loss_by_hand():
    from hybrid_qpr.training.reranker import distillation_loss

    student = torch.tensor([2.0, 0.0, 1.0, -1.0, 0.5, 0.5])
    teacher = torch.tensor([3.0, 1.0, -2.0, 0.0, 0.0, 2.0])
    for temperature in (1.0, 2.0):
        p = torch.softmax(teacher.view(2, 3) / temperature, 1)
        q = torch.softmax(student.view(2, 3) / temperature, 1)
        expected = (p * (p.log() - q.log())).sum(1).mean() * temperature**2
        assert torch.isclose(distillation_loss(student, teacher, 3, temperature), expected)
    assert distillation_loss(teacher, teacher + 5.0, 3, 1.0).abs() < 1e-6  # a shift per group changes nothing


def _cluster_dataset(directory: Path, splits=("train",)) -> list[list[str]]:
    """A 'dataset build'-layout directory whose every split holds the same clusters: two
    phrasings of each subject of the synthetic question bank."""
    from hybrid_qpr.testing.corpora import PHRASINGS, SUBJECTS

    clusters = [[PHRASINGS[0].format(s=s), PHRASINGS[1].format(s=s)] for s in SUBJECTS]
    directory.mkdir()
    for split in splits:
        (directory / f"{split}.jsonl").write_text("".join(
            json.dumps({"id": f"c{i}", "questions": [{"id": f"q{i}_{j}", "text": t} for j, t in enumerate(c)]}) + "\n"
            for i, c in enumerate(clusters)))
    return clusters


def test_hard_negatives_come_from_other_clusters_of_the_engines_hits(tmp_path, committed_encoder):
    from hybrid_qpr.training.hard_negatives import mine_cluster_examples

    clusters = _cluster_dataset(tmp_path / "clusters")
    examples = mine_cluster_examples(tmp_path / "clusters", None, 0, depth=4, miner_model=str(committed_encoder.model_dir))
    assert len(examples) == len(clusters)
    owner = {t: i for i, c in enumerate(clusters) for t in c}
    for question, positives, negatives in examples:
        assert len(positives) == 1 and owner[positives[0]] == owner[question]
        assert 1 <= len(negatives) <= 4 and all(owner[n] != owner[question] for n in negatives)
        assert len(set(negatives)) == len(negatives)
    # the same template with another subject shares most words: BM25 finds it
    question, _, negatives = next(e for e in examples if e[0] == clusters[0][0])
    assert any(n.startswith("how do i change my") for n in negatives)


def test_mined_answer_negatives_are_other_questions_sentences_the_engine_ranks_high(tmp_path, committed_encoder):
    """``--mine-answers``: each answer-set question keeps its labelled wrong sentences and gains the
    wrong ones BM25 and kNN rank highest over the dataset's sentences, never its correct ones."""
    from hybrid_qpr.data.answer_dataset import build_answer_selection
    from hybrid_qpr.training.reranker import RerankerSettings, load_examples

    subjects = ["glacier", "volcano", "river", "desert", "forest", "island"]
    rows = ["qid\tquestion\tsentence\tlabel"]
    for i, subject in enumerate(subjects):
        rows += [f"q{i}\twhat is a {subject} made of ?\ta {subject} is made of {subject} matter .\t1",
                 f"q{i}\twhat is a {subject} made of ?\tthe weather was fine that day .\t0"]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    build_answer_selection(tmp_path / "train.tsv", tmp_path / "answers")
    plain = load_examples([tmp_path / "answers"], RerankerSettings(), seed=0)
    mined = load_examples([tmp_path / "answers"], RerankerSettings(mine_answers=True, mine_depth=3,
                                                                   miner_model=str(committed_encoder.model_dir)), seed=0)
    assert [e.query for e in mined] == [e.query for e in plain]
    for before, after in zip(plain, mined):
        assert after.positives == before.positives and after.negatives[:len(before.negatives)] == before.negatives
        extra = after.negatives[len(before.negatives):]
        assert 1 <= len(extra) <= 3 and len(set(after.negatives)) == len(after.negatives)
        assert not set(extra) & set(after.positives)
        # the other questions' answers share "is made of ... matter": the engine finds them
        assert any(" is made of " in text for text in extra)


def test_paraphrase_dev_set_is_a_first_stage_top_20_with_the_cluster_marked(tmp_path, committed_encoder):
    from hybrid_qpr.training.reranker import DEV_DEPTH, RerankerSettings, dev_set

    clusters = _cluster_dataset(tmp_path / "clusters", ("train", "val"))
    owner = {t: i for i, c in enumerate(clusters) for t in c}
    settings = RerankerSettings(dev_max_questions=8, miner_model=str(committed_encoder.model_dir))
    dev = dev_set(tmp_path / "clusters", settings, seed=0)
    assert dev.metric == "dev_mrr20" and len(dev.items) == 8
    assert len({question for question, _, _ in dev.items}) == 8  # a seeded sample of distinct clusters
    for question, candidates, correct in dev.items:
        assert question == clusters[owner[question]][0] and question not in candidates
        assert len(candidates) == DEV_DEPTH == len(set(candidates))
        assert correct == [i for i, text in enumerate(candidates) if owner[text] == owner[question]]
    assert dev_set(tmp_path / "clusters", settings, seed=0).items == dev.items


class _ListedScores:
    """A stand-in cross-encoder that scores each text by its place in a fixed list (earlier
    is better), so the dev metric can be checked by hand."""

    def __init__(self, order):
        self.order = order

    def predict(self, queries, texts):
        return torch.tensor([-float(self.order.index(t)) for t in texts])


def test_dev_score_is_mrr20_for_questions_and_map_for_answers():
    from hybrid_qpr.training.reranker import DevSet, dev_score

    model = _ListedScores(["a", "b", "c", "d", "e"])
    items = [("q1", ["c", "a", "b"], [2]),  # correct "b" ranked 2nd by the model: 1/2
             ("q2", ["e", "d"], [1]),  # correct "d" ranked 1st: 1
             ("q3", ["b", "a"], [])]  # the first stage found no paraphrase: 0
    assert dev_score(model, DevSet("dev_mrr20", items)) == pytest.approx((0.5 + 1 + 0) / 3)
    # MAP over all of a question's candidates: correct "c" and "e" at ranks 2 and 4 of "a c d e"
    answers = [("q", ["e", "a", "c", "d"], [0, 2])]
    assert dev_score(model, DevSet("dev_map", answers)) == pytest.approx((1 / 2 + 2 / 4) / 2)


def _answer_dataset(tmp_path: Path, name: str, subjects=("glacier", "volcano", "river", "desert", "forest", "island"),
                    dev_questions: int = 2) -> Path:
    """A synthetic answer dataset ``tmp_path/name``: one correct and two wrong sentences per
    subject; the first ``dev_questions`` subjects again (their own qids) as the val split."""
    from hybrid_qpr.data.answer_dataset import build_answer_selection

    rows = ["qid\tquestion\tsentence\tlabel"]
    for i, subject in enumerate(subjects):
        rows += [f"q{i}\twhat is a {subject} ?\ta {subject} is a natural feature .\t1",
                 f"q{i}\twhat is a {subject} ?\tthe weather was fine that day .\t0",
                 f"q{i}\twhat is a {subject} ?\tmany people like music .\t0"]
    (tmp_path / f"{name}-train.tsv").write_text("\n".join(rows) + "\n")
    dev = [rows[0]] + ["dev-" + row for row in rows[1 : 1 + 3 * dev_questions]]
    (tmp_path / f"{name}-dev.tsv").write_text("\n".join(dev) + "\n")
    build_answer_selection(tmp_path / f"{name}-train.tsv", tmp_path / name, extra={"val": tmp_path / f"{name}-dev.tsv"})
    return tmp_path / name


def test_reranker_train_selects_on_the_mean_of_several_dev_sets(tmp_path):
    """``--dev A --dev B``: each set's MAP is logged, their mean decides the best state."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    first = _answer_dataset(tmp_path, "answers")
    second = _answer_dataset(tmp_path, "more", ("canyon", "lagoon", "meadow", "plateau"), dev_questions=3)
    args = ["reranker", "train", str(first), "--dev", str(first), "--dev", str(second), "--out", str(tmp_path / "run"),
            "--base-model", str(tiny_bert(tmp_path / "tiny")), "--max-length", "32", "--query-tokens", "8",
            "--batch-size", "2", "--negatives", "2", "--eval-every", "2", "--steps", "4"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["dev_questions"] == 5 and [h["step"] for h in report["history"]] == [0, 2, 4]
    for record in report["history"]:
        assert record["dev_mean"] == pytest.approx((record["dev_map:answers"] + record["dev_map:more"]) / 2)
    assert report["best_metric"] == max(h["dev_mean"] for h in report["history"])
    settings = json.loads((tmp_path / "run" / "settings.json").read_text())
    assert settings["dev"] == [str(first), str(second)]
    # the run's last checkpoint averaged with the model it started from (its recorded base model)
    from hybrid_qpr.model.cross_encoder import CrossEncoder
    from hybrid_qpr.training.reranker import load_run_checkpoint

    done = CliRunner().invoke(cli, ["interpolate", str(tmp_path / "run"), "--checkpoint", "last", "--weight", "0.5",
                                    "--out", str(tmp_path / "soup")])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["tuned_step"] == 4
    last, _ = load_run_checkpoint(tmp_path / "run", "last")
    start = CrossEncoder.from_dir(tmp_path / "tiny", max_length=32, query_tokens=8, pooling="segments")
    name = "backbone.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(last.state_dict()[name], start.state_dict()[name])
    mixed = CrossEncoder.from_dir(tmp_path / "soup").state_dict()[name]
    assert torch.allclose(mixed, (last.state_dict()[name] + start.state_dict()[name]) / 2, atol=1e-6)


def test_interpolate_averages_two_rerankers_and_exports_the_mix(tiny_model, tmp_path):
    """``hybrid-qpr interpolate RUN --base-model OTHER`` on cross-encoders: backbone and head at
    the weighted mean, the export scores as the torch mix; a reranker without a usable recorded
    base is refused in one line."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.model.cross_encoder import CrossEncoder
    from hybrid_qpr.rerankers import Reranker

    tiny_model.save(tmp_path / "a")
    other = CrossEncoder.from_dir(tmp_path / "a")
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    other.save(tmp_path / "b", extra={"training": {"base_model": "a run's state before it (gone)"}})
    result = CliRunner().invoke(cli, ["interpolate", str(tmp_path / "b"), "--base-model", str(tmp_path / "a"),
                                      "--weight", "0.25", "--out", str(tmp_path / "mix"), "--export", str(tmp_path / "onnx")])
    assert result.exit_code == 0, result.output
    mix = CrossEncoder.from_dir(tmp_path / "mix").eval()
    a, b = tiny_model.state_dict(), other.state_dict()
    for name in ("head.weight", "backbone.encoder.layer.1.output.dense.weight"):
        assert torch.allclose(mix.state_dict()[name], 0.75 * a[name] + 0.25 * b[name], atol=1e-6)
    assert mix.pairs.max_length == 48 and mix.pooling == "segments"  # the tuned model's settings travel
    texts = ["a river is a natural feature .", "many people like music ."]
    expected = mix.predict(["what is a river ?"] * 2, texts).numpy()
    assert np.allclose(Reranker(tmp_path / "onnx").score("what is a river ?", texts), expected, atol=1e-4)
    refused = CliRunner().invoke(cli, ["interpolate", str(tmp_path / "b"), "--out", str(tmp_path / "x")])
    assert refused.exit_code != 0 and "give the cross-encoder to mix it with as --base-model" in refused.output
    assert "Traceback" not in refused.output


def test_reranker_train_cli_resumes_and_exports_a_run(tmp_path):
    """``reranker train`` end to end on a synthetic answer set with the tiny BERT (bf16, length
    buckets): dev MAP logged at steps 0, 2, 4, resume to 6 steps, export of model/, of best.pt
    and per-channel int8."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.rerankers import Reranker

    _answer_dataset(tmp_path, "answers")
    base = tiny_bert(tmp_path / "tiny")
    args = ["reranker", "train", str(tmp_path / "answers"), "--dev", str(tmp_path / "answers"), "--out",
            str(tmp_path / "run"), "--base-model", str(base), "--max-length", "32", "--query-tokens", "8",
            "--batch-size", "2", "--negatives", "2", "--eval-every", "2", "--checkpoint-every", "1", "--log-every", "1",
            "--precision", "bf16", "--length-buckets", "2"]
    runner = CliRunner()
    first = runner.invoke(cli, [*args, "--steps", "4"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(cli, [*args, "--steps", "6", "--resume"])
    assert again.exit_code == 0, again.output
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["steps_done"] == 6 and [h["step"] for h in report["history"]] == [0, 2, 4, 6]
    changed = runner.invoke(cli, [*args, "--steps", "6", "--resume", "--lr", "1e-3"])
    assert changed.exit_code == 1 and "other settings" in changed.output
    for extra in ([], ["--checkpoint", "best"], ["--int8", "--per-channel"]):
        out = tmp_path / f"export{len(extra)}"
        done = runner.invoke(cli, ["reranker", "export", str(tmp_path / "run"), "--out", str(out), *extra])
        assert done.exit_code == 0, done.output
        assert Reranker(out).score("what is a river ?", ["a river is a natural feature ."]).shape == (1,)
    assert json.loads((tmp_path / "export2" / "config.json").read_text())["quantization"] == "int8-dynamic-per-channel"
    refused = runner.invoke(cli, ["reranker", "export", str(tmp_path / "run"), "--out", str(tmp_path / "x"),
                                  "--per-channel"])
    assert refused.exit_code == 2 and "give --int8 too" in refused.output
    # a 1-layer student of that run: distilled, resumable, exported from its best.pt (rebuilt from the teacher)
    student = [*args[:6], str(tmp_path / "student"), *args[9:], "--teacher", str(tmp_path / "run"), "--layers", "1",
               "--temperature", "2"]
    done = runner.invoke(cli, [*student, "--steps", "2"])
    assert done.exit_code == 0, done.output
    again = runner.invoke(cli, [*student, "--steps", "4", "--resume"])
    assert again.exit_code == 0, again.output
    report = json.loads((tmp_path / "student" / "report.json").read_text())
    assert [h["step"] for h in report["history"]] == [0, 2, 4] and "dev_map" in report["history"][0]
    done = runner.invoke(cli, ["reranker", "export", str(tmp_path / "student"), "--out", str(tmp_path / "s1"),
                               "--checkpoint", "best", "--int8"])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "student" / "model" / "config.json").read_text())["num_hidden_layers"] == 1
    assert Reranker(tmp_path / "s1").score("what is a river ?", ["a river .", "music"]).shape == (2,)


def test_reranker_train_takes_a_paraphrase_dataset_as_dev(tmp_path, committed_encoder):
    """``reranker train data/clusters --dev data/clusters``: mined negatives for training and the
    dev MRR@20 of re-ranking the val questions' first stage, logged and reported as best."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli

    _cluster_dataset(tmp_path / "clusters", ("train", "val"))
    args = ["reranker", "train", str(tmp_path / "clusters"), "--dev", str(tmp_path / "clusters"), "--out",
            str(tmp_path / "run"), "--base-model", str(tiny_bert(tmp_path / "tiny")), "--max-length", "32",
            "--query-tokens", "12", "--batch-size", "2", "--negatives", "3", "--dev-max-questions", "6",
            "--miner-model", str(committed_encoder.model_dir), "--eval-every", "2", "--steps", "2"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["dev_questions"] == 6 and [h["step"] for h in report["history"]] == [0, 2]
    assert all(0 <= h["dev_mrr20"] <= 1 for h in report["history"])
    assert report["best_metric"] == max(h["dev_mrr20"] for h in report["history"])


def test_a_reranker_can_cut_pairs_other_than_as_trained(exported):
    from hybrid_qpr.rerankers import Reranker

    long_post = "visa renewal question. " + "my sponsor says it takes weeks and the office is closed . " * 20
    trained, cut = Reranker(exported[0]), Reranker(exported[0], max_length=24, query_tokens=6)
    assert (trained.pairs.max_length, trained.pairs.query_tokens) == (exported[1]["max_length"], exported[1]["query_tokens"])
    ids, mask, types = cut.pairs.encode(long_post, [long_post])
    assert mask.sum() == 24 and types[0, :8].sum() == 0  # [CLS] + 6 question pieces + [SEP], then the post
    assert cut.score(long_post, [long_post, "a car for rent"]).shape == (2,)


def test_reranker_train_on_a_forum_set_named_twice_draws_it_twice_as_often(tmp_path):
    """`dataset from-beir` on a SemEval-layout set trains and selects a reranker; a dataset named
    twice is read once and its examples listed twice."""
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.data.answer_dataset import build_from_beir
    from hybrid_qpr.testing.corpora import write_community_qa

    forum = build_from_beir(write_community_qa(tmp_path / "forum"), tmp_path / "forum-ds").out
    args = ["reranker", "train", forum, forum, "--dev", forum, "--out", str(tmp_path / "run"),
            "--base-model", str(tiny_bert(tmp_path / "tiny")), "--max-length", "32", "--query-tokens", "8",
            "--batch-size", "2", "--negatives", "2", "--eval-every", "2", "--steps", "2"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    # three train questions, each with a relevant post, listed twice; two val questions with one
    assert report["train_examples"] == 6 and report["dev_questions"] == 2
    assert "dev_map" in report["history"][0]
