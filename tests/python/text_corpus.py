"""Real English text for the tokenizer and metric tests: Debian's fortunes (installed by
scripts/setup.sh --test), cookies separated by "%" lines. The tests fail, not skip, without it."""
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")


def fortunes(*names):
    """The cookies of the named fortune files, each a string (several lines joined by newlines)."""
    assert FORTUNES.is_dir(), f"{FORTUNES} is missing: install Debian's fortunes (scripts/setup.sh --test)"
    out = []
    for name in names:
        text = (FORTUNES / name).read_text(encoding="utf-8", errors="strict")
        out.extend(c.strip("\n") for c in text.split("\n%\n") if c.strip())
    return out


def lines(*names):
    """The non-empty lines of the named fortune files."""
    return [line for cookie in fortunes(*names) for line in cookie.split("\n") if line.strip()]
