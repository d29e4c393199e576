"""In-batch distillation loss: the student matches the teacher's in-batch similarity distribution.

Knowledge distillation (Hinton, Vinyals & Dean, "Distilling the Knowledge in a Neural
Network", 2015, arXiv:1503.02531) trains a small student on the teacher's softened output
distribution instead of hard labels. For an encoder there are no class outputs; the
"outputs" are the similarities of a question to the other questions of the batch, the same
in-batch softmax that SDML and the N-pair/MultipleNegativesRanking losses train (in-batch soft
targets from a teacher's similarities: e.g. Hofstätter et al., "Efficiently Teaching an
Effective Dense Retriever with Balanced Topic Aware Sampling", SIGIR 2021, arXiv:2104.06967).

For a batch of N questions with student vectors s_i and unit-length teacher vectors t_i,
each row i ranges over the other questions j ≠ i (the diagonal is masked: a question is
trivially its own nearest neighbour and would soak up the mass):

    teacher   p_ij = softmax_j( cos(t_i, t_j) / τ_t )
    student   log q_ij = log_softmax_j( −‖s_i − s_j‖² / τ_s )
    L = 1/N Σ_i Σ_{j≠i} p_ij · (log p_ij − log q_ij)          (KL(p_i ‖ q_i), averaged)

This is the SDML loss (``hybrid_qpr.model.losses.sdml``) with the teacher's distribution in
place of the smoothed one-hot target, and with the batch's questions against themselves
instead of anchors against positives. The student keeps SDML's squared-Euclidean geometry,
so the exported model is searched like any SDML CNN. τ_t sets how sharp the targets are
(MiniLM cosines of unrelated questions sit around 0-0.3, of paraphrases around 0.8-0.95);
τ_s only rescales the student's distances, which the student can also learn through its
vector norms, so 1.0 is the usual choice.

Example::

    loss = InBatchDistillationLoss(teacher_temperature=0.05)(model(batch), teacher_vectors)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.losses.sdml import squared_distances


class InBatchDistillationLoss(nn.Module):
    search_distance = "sqeuclidean"

    def __init__(self, teacher_temperature: float = 0.05, student_temperature: float = 1.0):
        super().__init__()
        if teacher_temperature <= 0 or student_temperature <= 0:
            raise ConfigError(f"temperatures must be > 0 (teacher {teacher_temperature}, student {student_temperature})")
        self.teacher_temperature = float(teacher_temperature)
        self.student_temperature = float(student_temperature)

    def targets(self, teacher: torch.Tensor) -> torch.Tensor:
        """The teacher's row distributions p [N, N] over the other questions (diagonal 0)."""
        teacher = F.normalize(teacher.float(), dim=1)
        logits = teacher @ teacher.T / self.teacher_temperature
        return torch.softmax(_mask_diagonal(logits), dim=1)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        if student.dim() != 2 or teacher.dim() != 2 or student.shape[0] != teacher.shape[0]:
            raise ConfigError(f"student {tuple(student.shape)} and teacher {tuple(teacher.shape)} must be [N, d] and [N, D]")
        if student.shape[0] < 2:
            raise ConfigError("in-batch distillation needs at least 2 questions per batch")
        with torch.no_grad():
            p = self.targets(teacher.to(student.device))
        log_q = F.log_softmax(_mask_diagonal(-squared_distances(student, student) / self.student_temperature), dim=1)
        # p_ij = 0 on the diagonal; xlogy keeps 0·log 0 = 0 and the masked −inf out of the sum
        kl = torch.xlogy(p, p) - p * log_q.masked_fill(p == 0, 0.0)
        return kl.sum() / student.shape[0]


def _mask_diagonal(logits: torch.Tensor) -> torch.Tensor:
    eye = torch.eye(logits.shape[0], dtype=torch.bool, device=logits.device)
    return logits.masked_fill(eye, float("-inf"))
