"""Synthetic corpora that tests, benchmarks and examples build in memory, reproducibly and
without any data download:

* ``question_bank`` - 200 short questions (20 subjects x 10 phrasings) with metadata, for
  index, search and filter checks; ``held_out_questions`` are phrasings not in it;
* ``example_documents`` - the committed examples/ bank (300 questions in paraphrase groups)
  less ``examples_held_out``, one question of each val and test group with its qrels;
* ``paraphrase_answers_tsv`` - an answer-selection set (WikiQA layout) on which kNN beats BM25
  and RRF 0.5, so an untuned hybrid is below kNN alone (with ``model_without_fusion_defaults``);
* ``topic_clusters`` - paraphrase clusters drawn from four topic words each, so a model learns
  them in seconds; ``write_dataset_dir`` writes them as `dataset build` leaves a dataset;
* ``write_community_qa`` - a forum set in the SemEval-2016 Task 3 layout (each question with its
  own related posts, ``group``, ``ir_rank``, every candidate judged), train and val parts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from hybrid_qpr.data.clusters import Cluster, Question
from hybrid_qpr.data.splits import write_split
from hybrid_qpr.types import Document

SUBJECTS = ("password", "email address", "credit card", "phone number", "username", "profile picture",
            "shipping address", "subscription", "order", "delivery date", "bank account", "home address",
            "security question", "display name", "newsletter", "payment method", "invoice", "language setting",
            "time zone", "avatar")
PHRASINGS = ("how do i change my {s}?", "how can i update my {s}?", "what is the way to reset my {s}?",
             "why can't i edit my {s}?", "where do i find my {s}?", "is it possible to delete my {s}?",
             "can i recover my old {s}?", "who can see my {s}?", "when does my {s} expire?",
             "what happens if i lose my {s}?")


def question_bank() -> list[Document]:
    """200 questions, ids ``q000``..``q199`` (subject by subject): ``lang`` metadata alternates
    en/de, ``topic`` is the subject (one subject = one paraphrase group), ``n`` the position."""
    return [Document(f"q{i:03d}", phrasing.format(s=subject),
                     {"lang": "en" if i % 2 == 0 else "de", "topic": subject, "n": i})
            for i, (subject, phrasing) in enumerate((s, p) for s in SUBJECTS for p in PHRASINGS)]


def paraphrase_answers_tsv(seed: int = 3) -> str:
    """One question per subject whose correct candidate is another phrasing of it and whose four
    wrong candidates repeat its own phrasing with another subject: BM25 prefers the wrong ones
    (they share every word but the subject), an encoder trained on paraphrases the right one, and
    RRF 0.5 lands in between (with the default CNN: MAP bm25 0.39, knn 0.84, rrf 0.5 0.55)."""
    rng = random.Random(seed)
    rows = ["qid\tquestion\tsentence\tlabel"]
    for i, subject in enumerate(SUBJECTS):
        p = rng.randrange(len(PHRASINGS))
        question = PHRASINGS[p].format(s=subject)
        rows.append(f"a{i}\t{question}\t{PHRASINGS[(p + 3) % len(PHRASINGS)].format(s=subject)}\t1")
        for other in rng.sample([s for s in SUBJECTS if s != subject], 4):
            rows.append(f"a{i}\t{question}\t{PHRASINGS[p].format(s=other)}\t0")
    return "\n".join(rows) + "\n"


def write_paraphrase_answers(out_dir: Path) -> Path:
    """``paraphrase_answers_tsv`` built as ``dataset from-answers --split-name val`` builds it;
    returns its beir/ directory (queries carry ``group``, the answer-selection filter)."""
    from hybrid_qpr.data.answer_dataset import build_answer_selection

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "answers.tsv").write_text(paraphrase_answers_tsv(), encoding="utf-8")
    build_answer_selection(out_dir / "answers.tsv", out_dir / "dataset", split_name="val")
    return out_dir / "dataset" / "beir"


def model_without_fusion_defaults(model_dir: Path, out_dir: Path) -> Path:
    """A copy of the encoder directory ``model_dir`` at ``out_dir`` whose config.json carries no
    fusion defaults, so an index ``ingest`` builds with it fuses with RRF 0.5 until tuned (the
    bundled models carry defaults chosen on development domains)."""
    import shutil

    model = Path(shutil.copytree(model_dir, out_dir))
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    config.pop("fusion_defaults", None)
    (model / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return model


def held_out_questions() -> list[str]:
    """One phrasing per subject (in ``SUBJECTS`` order) that ``question_bank`` does not hold."""
    return [f"i forgot my {s}, what should i do now?" for s in SUBJECTS]


def examples_held_out() -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """One question of each group of the examples/ bank's val and test splits (30 in all), held
    out of the index so it is a new question whose paraphrases (the rest of its group, as the
    qrels say) are in the bank: ``(query id -> text, qrels)``."""
    from hybrid_qpr import resources
    from hybrid_qpr.data.beir import load_beir

    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for split in ("val", "test"):
        _, texts, judged = load_beir(resources.examples_dir() / "beir", split)
        first = {}
        for qid in sorted(texts):
            first.setdefault(qid.rsplit("-", 1)[0], qid)
        for qid in first.values():
            queries[qid], qrels[qid] = texts[qid], judged[qid]
    return queries, qrels


def example_documents():
    """The examples/ bank (300 questions with group and topic metadata) less the held-out queries."""
    from hybrid_qpr import resources
    from hybrid_qpr.data.documents import iter_documents

    held_out = examples_held_out()[0]
    return [doc for _, doc in iter_documents(resources.examples_dir() / "questions.jsonl") if doc.id not in held_out]


def topic_clusters(n: int, seed: int, varied_sizes: bool = False) -> list[Cluster]:
    """n clusters of 3 questions (3 to 5 with ``varied_sizes``), reproducible from ``seed``:
    each cluster's questions are three of its four topic words plus one random word."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(400)]
    clusters = []
    for c in range(n):
        topic = rng.sample(words, 4)
        size = 3 + c % 3 if varied_sizes else 3
        questions = [Question(f"{c}-{k}", " ".join(rng.sample(topic, 3) + rng.sample(words, 1))) for k in range(size)]
        clusters.append(Cluster(f"c{c}", questions))
    return clusters


def write_dataset_dir(path: Path, splits: dict[str, list[Cluster]], fingerprint: str | None = None) -> Path:
    """``<split>.jsonl`` files by the project's own ``write_split`` (and a manifest when a
    fingerprint is given), as `dataset build` leaves them."""
    for split, clusters in splits.items():
        write_split(path / f"{split}.jsonl", clusters)
    if fingerprint is not None:
        (path / "manifest.json").write_text(json.dumps({"format": "hybrid-qpr-dataset", "fingerprint": fingerprint}))
    return path


def mixed_script_texts() -> list[str]:
    """Texts that stress BM25 analysis: several scripts, accents composed and decomposed,
    compatibility forms, punctuation runs, joiners, digits of other scripts, an over-long word."""
    return [
        "How do I reset my PASSWORD?!? (it's been 3 days...)",
        "What's the best way to learn C++/C# -- or Rust_lang -- in 2024?",
        "Ça coûte combien, le café à Paris ? « Très cher » !",
        "Wie groß ist die Straße? Größe: 42 cm; Ärger über Öl",
        "e\u0301cole, cafe\u0301 and na\u00efve re\u0301sume\u0301s",
        "ＰＹＴＨＯＮ ｆｕｌｌｗｉｄｔｈ and ﬁnancial ﬂows",
        "Как выучить русский язык быстро? Ёлка, йогурт",
        "Πώς μαθαίνω ελληνικά; ΟΔΟΣ οδός",
        "हिन्दी भाषा कैसे सीखें? नमस्ते",
        "東京の天気は？ 北京大学 한국어 공부",
        "كيف أتعلم اللغة العربية؟ ٣٤٥ كتاب",
        "Ørsted, Łódź, Þórr, Æsir, œuvre, straße",
        "emoji 🙂 and symbols ™ © ½ ² ⅻ Ⓐ",
        "url https://example.com/path?q=a&b=c email a.b@example.org",
        "zero\u200bwidth space, joiner a\u200db and non-joiner می\u200cخواهم",
        "numbers 3.14 1,000,000 ٣٤ १२३ and dates 2024-01-02",
        "İstanbul'da ıspanak yiyor musun? DİYARBAKIR",
        "   \t\n  ",
        "running runners ran easily; generously generalized organizations",
        "x" * 300 + " short tail",
    ]


FORUM_TOPICS = ("visa renewal", "driving licence", "school fees", "car rental", "bank account", "phone plan")


def write_community_qa(out_dir: Path, topics: tuple[str, ...] = FORUM_TOPICS) -> Path:
    """A tiny BEIR directory in the SemEval-2016 Task 3 subtask B layout: per topic an original
    question (``Q<i>``, its ``group`` its own id) and four related posts (``Q<i>_R<k>``, ``group`` the
    question, ``ir_rank`` the forum's order k): two on the topic (relevant, listed by the forum at
    ranks 3 and 4) and two off it (irrelevant, ranks 1 and 2), so the forum's order is beaten by
    any ranking that reads the posts. The last topic has no relevant post (a question the task
    counts as 0). Topics alternate between the train and val parts (``qrels/train.tsv``, ``val.tsv``)."""
    out_dir = Path(out_dir)
    (out_dir / "qrels").mkdir(parents=True, exist_ok=True)
    queries, corpus, qrels = [], [], {"train": [], "val": []}
    for i, topic in enumerate(topics):
        qid, split = f"Q{i}", ("train", "val")[i % 2]
        unanswered = i == len(topics) - 1
        queries.append({"_id": qid, "text": f"{topic} question. how long does the {topic} take in doha?",
                        "group": qid, "split": split})
        other = topics[(i + 1) % len(topics)]
        posts = [(f"the {other} office closes early on friday.", 0), (f"anyone selling a {other} here?", 0),
                 (f"{topic} time? my {topic} took two weeks in doha.", 0 if unanswered else 1),
                 (f"how long for the {topic}? it takes a month.", 0 if unanswered else 1)]
        for rank, (text, grade) in enumerate(posts, start=1):
            doc = f"{qid}_R{rank}"
            corpus.append({"_id": doc, "text": text, "group": qid, "split": split, "ir_rank": rank,
                           "category": "Advice and Help"})
            qrels[split].append(f"{qid}\t{doc}\t{grade}")
    (out_dir / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (out_dir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    for split, rows in qrels.items():
        (out_dir / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n",
                                                      encoding="utf-8")
    return out_dir
