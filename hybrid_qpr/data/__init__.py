"""Data pipeline: readers of raw pair and QA-log files, clusters, splits and BEIR eval sets.

The readers here are the only code that parses raw input files; everything else gets
dataclasses. Import submodules directly (``from hybrid_qpr.data.pairs import iter_pairs``).
"""
