"""The cases of ONNX's backend test runner that Kiln does not pass, grouped by reason.

The list is tools/conformance/known_bad.txt, which the C++ conformance runner reads too (its format
is described at the top of that file). A group whose `raises` names a class of kiln.errors is still
run, as a strict xfail that must raise exactly that error: when Kiln gains the feature the case
XPASSes and the suite fails until it is removed from the list, and a case that starts failing some
other way is reported too. A group with `raises=None` (`[skip]`) is not run at all (its data cannot
be matched or needs the network). Names are the runner's case names without the device suffix
(`_cpu`).
"""
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

KNOWN_BAD = Path(__file__).resolve().parents[2] / "tools" / "conformance" / "known_bad.txt"


@dataclass(frozen=True)
class Group:
    reason: str
    raises: Optional[str]  # a class name in kiln.errors, or None: skip without running
    cases: Tuple[str, ...]


def read_groups(path=KNOWN_BAD):
    """The groups of the known-bad list at `path`, in file order."""
    groups = []
    header = None  # (reason, raises) of the group being read
    cases = []
    seen = set()

    def close():
        if header is not None:
            groups.append(Group(header[0], header[1], tuple(cases)))

    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[(skip|raises (\w+))\]\s+(.+)", line)
        if m:
            close()
            header, cases = (m.group(3), m.group(2)), []
        elif line.startswith("["):
            raise ValueError(f"{path}:{number}: '{line}' is not a [skip] or [raises ERROR] header")
        elif header is None:
            raise ValueError(f"{path}:{number}: case '{line}' comes before any [skip] or [raises ERROR] header")
        elif line in seen:
            raise ValueError(f"{path}:{number}: case '{line}' is listed twice")
        else:
            seen.add(line)
            cases.append(line)
    close()
    return tuple(groups)


GROUPS = read_groups()
