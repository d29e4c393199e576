"""Encoder kinds read by ``hybrid_qpr.encoder.Encoder.load``; none imports torch."""
