"""The TensorFlow GraphDef importer: the protobuf reader, frames, lists, control and op rules."""
