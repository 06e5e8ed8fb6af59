"""Verse-aligned sentence pairs from the Bibles Debian ships as SWORD modules (sword-text-web: the
World English Bible, engWEB2015eb; sword-text-sparv: the Reina-Valera 1909, spaRV1909eb), read with
`diatheke` (the diatheke package).

    pairs = aligned_pairs("Matthew-John", "engWEB2015eb", "spaRV1909eb")   # [(ref, english, spanish)]

diatheke prints one verse a line as "Book C:V: text" with the module's OSIS markup (<w> words with
Strong's numbers, <q> quotations, milestones), then "(module)". Every tag becomes a space, then the
spaces before closing punctuation and after opening punctuation go and runs of spaces become one:
"<w>born</w></q><q><w>Son</w>" reads "born Son", "<w>Jude</w>,<w>a</w>" reads "Jude, a". Both
modules use the KJV versification, so references pair verses; a verse empty in either (merged into
a neighbour by a translation) is left out.
"""
import re
import shutil
import subprocess

_VERSE = re.compile(r"^((?:[1-3] )?[A-Z][A-Za-z ]*?) (\d+):(\d+): ?(.*)$")
_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE = re.compile(r"\s+([,.;:!?)\]»’”])")
_SPACE_AFTER = re.compile(r"([(\[«“])\s+")


class BibleError(RuntimeError):
    """diatheke is missing, the module is not installed, or its output is not verses."""


def clean(markup):
    """A verse's OSIS markup as plain text."""
    text = _TAG.sub(" ", markup)
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub(r"\1", text)
    return " ".join(text.split())


def parse(output, module):
    """{(book, chapter, verse): plain text} from diatheke's output; lines that do not start a verse
    continue the previous one."""
    verses, current = {}, None
    for line in output.splitlines():
        if line.strip() == f"({module})":
            continue
        m = _VERSE.match(line)
        if m:
            current = (m.group(1), int(m.group(2)), int(m.group(3)))
            verses[current] = m.group(4)
        elif current is not None:
            verses[current] += " " + line
        elif line.strip():
            raise BibleError(f"diatheke -b {module}: expected 'Book C:V: text', got {line[:80]!r}")
    return {ref: clean(text) for ref, text in verses.items()}


def read(keys, module, diatheke="diatheke"):
    """The verses of `keys` (diatheke's key syntax: "John", "Matthew-John", "Gen 1:1-5") in
    `module`."""
    exe = shutil.which(diatheke)
    if exe is None:
        raise BibleError("diatheke is not installed (Debian: apt-get install diatheke sword-text-web "
                         "sword-text-sparv)")
    proc = subprocess.run([exe, "-b", module, "-k", keys], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise BibleError(f"diatheke -b {module} -k {keys!r} failed: {proc.stderr.strip()[:200]}")
    verses = parse(proc.stdout, module)
    if not verses:
        raise BibleError(f"diatheke -b {module} -k {keys!r} printed no verses: is the module installed "
                         f"(diatheke -b system -k modulelist)?")
    return verses


def aligned_pairs(keys, source_module, target_module):
    """[(reference "Book C:V", source text, target text)] in canonical order, for the verses both
    modules have with text."""
    source, target = read(keys, source_module), read(keys, target_module)
    return [(f"{ref[0]} {ref[1]}:{ref[2]}", source[ref], target[ref]) for ref in source
            if source[ref] and target.get(ref)]
