"""Gradient caching: a large in-batch loss with the memory of a small chunk.

Gao, Zhang, Han & Callan, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup" (RepL4NLP 2021, arXiv:2101.06983). An in-batch loss such as SDML couples every pair
of the batch, so its batch cannot simply be split into accumulated micro-batches (each would
only see its own negatives). The loss, however, depends on the encoder only through the
embeddings, so the chain rule splits the backward pass in two:

1. embed every text of the batch without a graph (cheap in memory), chunk by chunk;
2. compute the loss on those embeddings as leaf tensors and back-propagate to them only,
   which gives g = dL/de for every embedding;
3. embed each chunk again, this time with a graph, and back-propagate the surrogate
   sum(e · g): its gradient w.r.t. the weights is that chunk's share of dL/dθ.

The parameter gradients summed over the chunks equal the plain loss's. Chunks are cut from
the texts ordered by length, so a chunk pads to about its own texts' length (the loss sees
the embeddings in their original order; on CPU this saves a third of the work on Quora
questions, whose lengths vary from 3 to 30 tokens). Dropout would make
the second forward differ from the first, so the random state is saved before each chunk's
first forward and restored before its second: both see the same masks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

EmbedFn = Callable[[Sequence[str]], torch.Tensor]


def _chunks(texts: Sequence[str], size: int) -> list[list[int]]:
    """Positions of ``texts`` in chunks of ``size``, shortest texts first."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    return [order[i : i + size] for i in range(0, len(order), size)]


def cached_backward(embed: EmbedFn, sides: Sequence[Sequence[str]],
                    loss_fn: Callable[..., torch.Tensor], chunk_size: int) -> float:
    """Back-propagate ``loss_fn(embed(sides[0]), embed(sides[1]), ...)`` into ``embed``'s
    parameters, holding a graph for at most ``chunk_size`` texts at a time; returns the loss.

    ``embed`` maps texts to embeddings [n, d] (any module in training mode); gradients are
    added to the parameters' ``.grad`` like ``loss.backward()`` would.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size}: must be >= 1")
    plans: list[list[tuple[list[str], list[int], torch.Tensor]]] = []
    leaves: list[torch.Tensor] = []
    for texts in sides:
        plan, parts, positions = [], [], []
        for chunk in _chunks(texts, chunk_size):
            chunk_texts = [texts[i] for i in chunk]
            rng = torch.get_rng_state()
            with torch.no_grad():
                parts.append(embed(chunk_texts))
            plan.append((chunk_texts, chunk, rng))
            positions.extend(chunk)
        plans.append(plan)
        embedded = torch.cat(parts)
        leaf = torch.empty_like(embedded)
        leaf[torch.tensor(positions)] = embedded  # back to the caller's order
        leaves.append(leaf.requires_grad_(True))
    loss = loss_fn(*leaves)
    loss.backward()
    for plan, leaf in zip(plans, leaves):
        for chunk_texts, chunk, rng in plan:
            resume_rng = torch.get_rng_state()
            torch.set_rng_state(rng)
            embeddings = embed(chunk_texts)
            torch.set_rng_state(resume_rng)
            (embeddings * leaf.grad[torch.tensor(chunk)]).sum().backward()
    return float(loss.detach())
