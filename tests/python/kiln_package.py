"""Imports the kiln Python package from the build tree (KILN_BUILD_DIR/python, default build/python).
Tests fail, not skip, when it has not been built."""
import sys

from kiln_cli import build_dir


def import_kiln():
    path = build_dir() / "python"
    assert (path / "kiln").is_dir(), f"{path}/kiln does not exist: build the kiln_python target or set KILN_BUILD_DIR"
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    import kiln  # noqa: F401
    return kiln
