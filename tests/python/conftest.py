"""Shared fixtures for the PyTorch parity tests (run with /usr/bin/python3 -m pytest tests/python)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kiln_cli  # noqa: E402


@pytest.fixture(scope="session")
def kiln():
    """The `kiln` executable; the tests fail (not skip) when it has not been built."""
    exe = kiln_cli.kiln_path()
    assert exe.exists(), f"{exe} does not exist: build the kiln_cli target or set KILN_BUILD_DIR"
    return exe


@pytest.fixture
def ortmodule_in_kiln(monkeypatch):
    """ORTModule must run the graph in Kiln: a test comparing it with torch would otherwise compare
    torch with itself after a silent fallback. Use with pytestmark = pytest.mark.usefixtures(...)."""
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
