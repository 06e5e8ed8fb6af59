"""The compiled core, with a clear message when it has not been built."""
try:
    from kiln import _kiln  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "kiln's compiled core (kiln._kiln) is missing: build it (`make build`) and put build/python on "
        f"PYTHONPATH, or install the package (`cmake --install build`). ({e})") from e

core = _kiln
