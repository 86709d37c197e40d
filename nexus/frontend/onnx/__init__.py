"""The ONNX importer: the model reader, its data and control parts and the op rules."""
