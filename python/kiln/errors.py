"""Kiln's exceptions. Each also derives from the built-in exception Python code expects for that
kind of failure, so `except ValueError` or `except KeyError` written for onnxruntime.training keeps
working: a bad argument is a ValueError, a wrong type a TypeError, an unknown name a KeyError, a
file problem an OSError, a missing feature a NotImplementedError."""


class KilnError(Exception):
    """Any error raised by Kiln's core."""


class InvalidModel(KilnError, ValueError):
    """The model file or graph is malformed."""


class ShapeError(KilnError, ValueError):
    """A tensor has a shape that does not fit."""


class DTypeError(KilnError, TypeError):
    """A tensor has a dtype that does not fit."""


class Unsupported(KilnError, NotImplementedError):
    """The model or call asks for something Kiln does not implement."""


class KilnIOError(KilnError, OSError):
    """A file could not be read or written."""


class CorruptFile(KilnIOError, ValueError):
    """A checkpoint or data file is truncated, corrupted, or of another model."""


class InvalidArgument(KilnError, ValueError):
    """A caller passed a bad argument."""


class KilnKeyError(InvalidArgument, KeyError):
    """A name looked up in a mapping is not there."""

    def __str__(self):  # KeyError would quote the message
        return Exception.__str__(self)
