"""ONNX interop below the frontends: ``to_onnx`` (export through structured regions) and
the ``onnx.backend`` interface (``prepare(model).run(inputs)``) that the official node
tests use.  ``onnx`` is imported only by these modules."""
