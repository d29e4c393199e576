"""Evaluation: pure metrics (``metrics``), the evaluator (dicts in, dicts out) and report writers.

Import submodules directly, e.g. ``from hybrid_qpr.evaluation.metrics import mrr_at_k``.
"""
