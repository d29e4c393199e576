"""The --task and --filter-field options shared by 'evaluate' and 'tune'."""

from __future__ import annotations

import click

from hybrid_qpr.evaluation.tasks import TASK_NAMES

TASK_HELP = ("What is measured: paraphrase (H@k, MRR@20, drop the query's own id), answer-selection (MAP, MRR over "
             "each question's own candidates), answer-retrieval (MRR, R@1, R@5 over the whole corpus) or community-qa "
             "(SemEval-2016 Task 3: MAP, MRR, AvgRec of each question's own candidates over all questions, beside "
             "the corpus's ir_rank order).")
FILTER_FIELD_HELP = ("Filter each query on its own value of this field in queries.jsonl (a per-query filter). "
                     "[default: group for answer-selection and community-qa, none otherwise]")


def task_options(func):
    func = click.option("--filter-field", default=None, help=FILTER_FIELD_HELP)(func)
    return click.option("--task", type=click.Choice(TASK_NAMES),
                        default=TASK_NAMES[0], show_default=True, help=TASK_HELP)(func)
