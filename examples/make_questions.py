"""Write the sample question bank of hybrid-qpr: examples/questions.jsonl and examples/beir/.

Every question is generated here from templates written for this project (no external
text). An *intent* (e.g. "forgot a password") has four phrasings that share few words on
purpose, so BM25 alone cannot find every paraphrase; filling the intent's slot with one
value (e.g. "netflix") makes one paraphrase *group*. Each question carries metadata:
``group`` (its paraphrase group), ``topic`` (for --filter) and ``intent``.

Groups are split 60/20/20 into train/val/test by a seeded shuffle; examples/beir holds
the BEIR eval set (corpus = every question; qrels = the other questions of the group).

Run from the repository root:  python examples/make_questions.py
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

INTENTS = [
    ("account", "forgot-password", ["netflix", "my bank app", "gmail", "the wifi router", "instagram", "my work laptop"], [
        "how do i reset my {x} password?",
        "i forgot the password for {x}, how can i get back in?",
        "what is the way to recover access to {x} when the login no longer works?",
        "locked out of {x} - can't remember the passcode, what now?"]),
    ("account", "delete-account", ["facebook", "spotify", "linkedin", "amazon", "twitter", "dropbox"], [
        "how can i permanently delete my {x} account?",
        "what are the steps to close my {x} profile for good?",
        "is there a way to remove all my data from {x} and quit?",
        "i want to get rid of {x} completely, how?"]),
    ("travel", "cheap-flights", ["tokyo", "new york", "lisbon", "cape town", "sydney", "mexico city"], [
        "how do i find cheap flights to {x}?",
        "what is the best way to get a low airfare to {x}?",
        "where can i book an inexpensive plane ticket to {x}?",
        "any tips for flying to {x} on a budget?"]),
    ("travel", "visa", ["japan", "the united states", "india", "brazil", "canada", "australia"], [
        "do i need a visa to visit {x}?",
        "is an entry permit required for tourists going to {x}?",
        "what documents must i have to enter {x} as a traveller?",
        "can i go to {x} on holiday without applying for a visa?"]),
    ("cooking", "substitute", ["eggs", "butter", "buttermilk", "baking powder", "heavy cream", "brown sugar"], [
        "what can i use instead of {x} when baking?",
        "is there a good substitute for {x} in a cake recipe?",
        "i ran out of {x}, what should i replace it with?",
        "which ingredient works as a replacement for {x}?"]),
    ("cooking", "storage", ["cooked rice", "fresh bread", "avocados", "homemade soup", "fresh herbs", "cheese"], [
        "how long does {x} keep in the fridge?",
        "what is the best way to store {x} so it stays fresh?",
        "how can i stop {x} from going bad too quickly?",
        "when does {x} spoil and how should i keep it?"]),
    ("health", "sleep", ["after night shifts", "with a newborn", "before exams", "in hot weather", "after drinking coffee", "when travelling"], [
        "how can i fall asleep faster {x}?",
        "what helps with insomnia {x}?",
        "any tricks to get better rest {x}?",
        "why do i lie awake for hours {x} and how do i fix it?"]),
    ("health", "exercise", ["running", "swimming", "cycling", "yoga", "weight lifting", "rowing"], [
        "is {x} good for losing weight?",
        "how many calories does {x} burn?",
        "will {x} help me shed fat?",
        "does {x} work as a workout to slim down?"]),
    ("tech", "slow-computer", ["windows 10", "my macbook", "ubuntu", "an old pc", "a chromebook", "windows 11"], [
        "why is {x} so slow and how do i speed it up?",
        "what can i do to make {x} run faster?",
        "{x} takes forever to start, any fixes?",
        "how do i improve the performance of {x}?"]),
    ("tech", "learn-language", ["python", "javascript", "rust", "java", "go", "c++"], [
        "what is the best way to learn {x} programming?",
        "how should a beginner start coding in {x}?",
        "which resources teach {x} from scratch?",
        "i want to become good at {x}, where do i begin?"]),
    ("money", "save", ["a house", "a car", "retirement", "a wedding", "university", "a holiday"], [
        "how do i save money for {x}?",
        "what is a good plan to put aside cash for {x}?",
        "how much should i set aside each month for {x}?",
        "tips for building up savings to pay for {x}?"]),
    ("money", "invest", ["index funds", "bitcoin", "gold", "real estate", "government bonds", "stocks"], [
        "is it a good idea to invest in {x}?",
        "should i put my savings into {x}?",
        "what are the risks of investing money in {x}?",
        "are {x} a smart investment right now?"]),
]


def build() -> list[dict]:
    questions = []
    for topic, intent, values, templates in INTENTS:
        for value in values:
            group = f"{intent}:{value.replace(' ', '-')}"
            for j, template in enumerate(templates):
                questions.append({"id": f"{intent}-{values.index(value)}-{j}", "text": template.format(x=value),
                                  "group": group, "topic": topic, "intent": intent})
    return questions


def main() -> None:
    from hybrid_qpr.data._io import write_jsonl
    from hybrid_qpr.data.beir import write_beir
    from hybrid_qpr.data.clusters import Cluster, Question

    questions = build()
    write_jsonl(HERE / "questions.jsonl", questions)
    groups: dict[str, list[dict]] = {}
    for q in questions:
        groups.setdefault(q["group"], []).append(q)
    names = sorted(groups)
    random.Random(13).shuffle(names)
    cut1, cut2 = int(0.6 * len(names)), int(0.8 * len(names))
    parts = {"train": names[:cut1], "val": names[cut1:cut2], "test": names[cut2:]}
    splits = {split: [Cluster(g, [Question(q["id"], q["text"]) for q in groups[g]]) for g in sorted(part)]
              for split, part in parts.items()}
    counts = write_beir(HERE / "beir", splits)
    print(f"{len(questions)} questions in {len(groups)} groups -> examples/questions.jsonl; beir: {counts}")


if __name__ == "__main__":
    main()
