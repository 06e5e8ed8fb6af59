"""Kiln: train ONNX models natively.

    from kiln.training import api, artifacts, onnxblock   # onnxruntime.training's names
    import kiln.backend                                    # onnx.backend over Kiln

The compiled core (kiln._kiln) is loaded by the modules that need it, so pure-Python parts such as
onnxblock import without it.
"""
from kiln.errors import (CorruptFile, DTypeError, InvalidArgument, InvalidModel, KilnError, KilnIOError,  # noqa: F401
                         KilnKeyError, ShapeError, Unsupported)

__all__ = ["CorruptFile", "DTypeError", "InvalidArgument", "InvalidModel", "KilnError", "KilnIOError",
           "KilnKeyError", "ShapeError", "Unsupported"]
__version__ = "0.1.0"
