"""Write the product-support sample of hybrid-qpr: examples/support/.

Every question is generated from the templates below, written for this project (no external
text; Apache-2.0 with the rest of the repository, use it freely). It imitates a support FAQ:
12 kinds of request (reset a password, get a refund, ...) about 8 made-up products. A
paraphrase *group* is one request about one product, asked four ways; the four phrasings of a
request share few words, and every question names its product.

That makes the two retrievers fail differently, which is what the demo is for. With the default
CNN, on the 80 test questions: BM25's first answer is wrong 28 times, 27 of them the same request
about another product (the request's words match, the product's two words weigh less); kNN's is
wrong 13 times, every one another request about the right product. The fusion of both finds the
right request about the right product (MRR@20: bm25 0.804, knn 0.884, tuned hybrid 0.985).

Files (the run is deterministic):

* ``questions.jsonl`` - 384 questions with ``id`` (``<product>-<request>-<n>``), ``text``,
  ``group``, ``product`` and ``request`` (metadata for ``--filter``);
* ``beir/`` - groups split 60/20/20 into train/val/test by a seeded shuffle; corpus = every
  question, queries = the val and test questions, qrels = the other questions of the group;
* ``pairs.tsv`` - the same questions as labelled pairs in the Quora layout (``id, qid1, qid2,
  question1, question2, is_duplicate``): every phrasing paired with the group's first one
  (duplicates) plus pairs of the same product or the same request that are not duplicates.
  ``hybrid-qpr dataset build examples/support/pairs.tsv --out DIR`` turns it into a training set.

Run from the repository root:  python examples/make_support_bank.py
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "support"
sys.path.insert(0, str(HERE.parent))

PRODUCTS = {
    "nimbus": "nimbus router",
    "orbit": "orbit watch",
    "pixelpad": "pixelpad tablet",
    "aurora": "aurora speaker",
    "vortex": "vortex blender",
    "sparrow": "sparrow drone",
    "quill": "quill e-reader",
    "tundra": "tundra thermostat",
}

# A question = a frame (how it is asked) around a request's core (what is asked) and the product.
# Each group asks its request four ways: four different cores in four different frames, drawn by
# a seeded shuffle, so no two products' groups read alike.
FRAMES = [  # short and built from the same few words, as most support questions are
    "how do i {c} on my {p}?",
    "how can i {c} on my {p}?",
    "how to {c} on the {p}?",
    "{p}: how do i {c}?",
    "can i {c} on my {p}?",
    "how do i {c} on a {p}",
    "{p}, how can i {c}",
    "{p}: {c}",
]
# request -> (actions, objects): a core is one action with one object. A group takes two actions
# and two objects and asks all four combinations, so each of its questions shares half its core
# with two of the others and nothing with the third, and the same request reads differently in
# every product's group.
REQUEST_TABLE = """
reset-password: reset; recover; change; retrieve; replace
    | the password; my forgotten login; the sign in code; the account passcode; the admin credentials

refund: get a refund for; return; send back; claim my money back on; cancel the purchase of
    | the order; this purchase; the item i bought; what i paid for it; the unit

wont-turn-on: power on; switch on; start; boot up; wake up
    | the device; it when the screen stays black; it after it died; the unit; it at all

battery: extend; save; stop draining; improve; preserve
    | the battery; the charge; battery life; the power between charges; the cell

update: update; upgrade; install; download; flash
    | the firmware; the latest software; the newest release; the system version; a software patch

warranty: check; claim; extend; look up; use
    | the warranty; the guarantee; repair coverage; the free repair period; the manufacturer cover

wifi: fix; keep; stabilise; restore; strengthen
    | the wifi connection; the wireless link; the internet signal; the network connection; the home network

factory-reset: factory reset; wipe; erase; restore; clear
    | all settings; everything; the device to defaults; the original configuration; all my data

shipping: track; trace; find; follow; locate
    | the delivery; the parcel; my shipment; the package; the courier

noise: stop; silence; get rid of; fix; quiet
    | the buzzing noise; a humming sound; the loud rattle; the clicking; the whine

pairing: pair; connect; link; sync; set up
    | my phone; the bluetooth; my smartphone; the mobile app; my iphone

overheating: stop; prevent; cool; reduce; avoid
    | the overheating; the heat; the high temperature; the hot casing; the thermal shutdown
"""  # request: actions | objects, each list separated by ';'
REQUESTS = {request.strip(): tuple([part.strip() for part in side.split(";")] for side in rest.split("|"))
            for request, rest in (entry.split(":", 1) for entry in REQUEST_TABLE.strip().split("\n\n"))}
PER_GROUP = 4

SEED = 13


def build() -> list[dict]:
    rng = random.Random(SEED)
    questions = []
    for product, name in PRODUCTS.items():
        for request, (actions, objects) in REQUESTS.items():
            group = f"{product}-{request}"
            (a1, a2), (o1, o2) = rng.sample(actions, 2), rng.sample(objects, 2)
            asked = zip(((a1, o1), (a2, o2), (a1, o2), (a2, o1)), rng.sample(FRAMES, PER_GROUP))
            for n, ((action, obj), frame) in enumerate(asked):
                text = frame.format(c=f"{action} {obj}", p=name)
                questions.append({"id": f"{group}-{n}", "text": text, "group": group,
                                  "product": product, "request": request})
    return questions


def pairs(questions: list[dict]) -> list[tuple[str, str, int]]:
    """(id1, id2, is_duplicate): each phrasing with its group's first one, plus a seeded sample
    of hard non-duplicates (same product or same request, another group)."""
    by_group: dict[str, list[dict]] = {}
    for q in questions:
        by_group.setdefault(q["group"], []).append(q)
    out = [(g[0]["id"], q["id"], 1) for g in by_group.values() for q in g[1:]]
    rng = random.Random(SEED)
    firsts = [g[0] for g in by_group.values()]
    for q in firsts:
        same_product = [o for o in firsts if o["product"] == q["product"] and o is not q]
        same_request = [o for o in firsts if o["request"] == q["request"] and o is not q]
        out.append((q["id"], rng.choice(same_product)["id"], 0))
        out.append((q["id"], rng.choice(same_request)["id"], 0))
    return out


def main() -> None:
    from hybrid_qpr.artifacts import write_jsonl
    from hybrid_qpr.data.beir import write_beir
    from hybrid_qpr.data.clusters import Cluster, Question

    questions = build()
    OUT.mkdir(exist_ok=True)
    write_jsonl(OUT / "questions.jsonl", questions)
    groups: dict[str, list[dict]] = {}
    for q in questions:
        groups.setdefault(q["group"], []).append(q)
    names = sorted(groups)
    random.Random(SEED).shuffle(names)
    cut1, cut2 = int(0.6 * len(names)), int(0.8 * len(names))
    parts = {"train": names[:cut1], "val": names[cut1:cut2], "test": names[cut2:]}
    splits = {split: [Cluster(g, [Question(q["id"], q["text"]) for q in groups[g]]) for g in sorted(part)]
              for split, part in parts.items()}
    counts = write_beir(OUT / "beir", splits)
    text = {q["id"]: q["text"] for q in questions}
    with open(OUT / "pairs.tsv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        for n, (a, b, duplicate) in enumerate(pairs(questions)):
            writer.writerow([n, a, b, text[a], text[b], duplicate])
    print(f"{len(questions)} questions in {len(groups)} groups -> {OUT.relative_to(HERE.parent)}; beir: {counts}")


if __name__ == "__main__":
    main()
