"""torch -> ONNX export (CNN: onnx.py; transformer: transformer.py)."""
