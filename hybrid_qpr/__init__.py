"""hybrid-qpr: question paraphrase retrieval with BM25, a trained encoder and kNN, fused.

Inference needs only numpy and onnxruntime; ``import hybrid_qpr`` never imports torch.
"""

from hybrid_qpr.encoders import Encoder
from hybrid_qpr.errors import HybridQPRError

__version__ = "0.1.0"
__all__ = ["Encoder", "HybridQPRError", "__version__"]
