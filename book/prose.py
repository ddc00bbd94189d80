"""Numbers typed in the prose that a run recorded: they should be bound with {{ value(...) }}
instead.

    python -m book.prose            # list them, page by page; exit 1 if there are any

A number in a page's prose (math included; code, macros, link targets, chapter and exercise numbers
excluded) is flagged when it equals a value recorded by one of the outputs the page shows
({{ runs }}, {{ output }}, {{ value }}, {{ figure }}). Typed, it would stay behind when the output
changes (another model, the official weights); bound, it cannot disagree with the output. Two kinds
of typed numbers are checked:

- anywhere on the page, a distinctive number (a decimal, or an integer of 1,000 or more) that a run
  recorded, unless it is a value of the official config.json (head_dim 256, eos id 248044: facts of
  the checkpoint);
- anywhere, a rounding-error size typed in e-notation with decimals (2.98e-07, not a tolerance like
  1e-4): those come from a run (`parity`) and depend on the CPU, so they are always bound;
- in the part that reads the output (from {{ output }} to the second heading after it), any number
  from 3 up that a run recorded: there a typed "8 layers" is the tiny model's 8 and would be wrong
  for the official weights.
"""

import json
import re
import sys
from pathlib import Path

from book.checkpoint import TINY
from book.compare import NUMBER

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MACRO = re.compile(r"\{\{\s*(\w+)(?:\((.*?)\))?\s*\}\}")
COMMON = {0.0, 1.0, 2.0}
NOT_A_RESULT = [  # numbers that name things rather than measure them
    re.compile(
        r"(?:chapters?|Chapters?|ch\.?|Stage|stage|Exercise|exercise|part|Part|lesson)\s+\d+(?:\s*(?:-|–|and|,)\s*\d+)*"
    ),
    re.compile(r"第\s*\d+(?:\s*[-–、]\s*\d+)*\s*[章节部课段]"),
    re.compile(r"[练作]习\s*\d+"),
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"<[^>]+>"),  # html tags and their attributes
    re.compile(r"^\s*#+\s*\d+(?:\.\d+)*\.?", re.M),  # heading numbers
    re.compile(r"^\s*\d+\.\s", re.M),  # list numbering
]


def shown(markdown):
    """The page as its readers see it now: lines of {{ tiny }} / {{ official }} blocks that the
    current outputs hide are blanked (book/pages.py decides which), so line numbers stay those of
    the page."""
    from book.pages import BLOCK, END, is_tiny

    out, keep = [], True
    for line in markdown.split("\n"):
        m = BLOCK.match(line)
        if m:
            path = DOCS / "outputs" / f"{m.group(2).strip().strip(chr(39) + chr(34))}.json"
            p = json.loads(path.read_text()) if path.is_file() else {"model": TINY}
            keep = (
                is_tiny(p) if m.group(1) == "tiny" else bool(p.get("official")) and not is_tiny(p)
            )
            out.append("")
        elif END.match(line):
            keep = True
            out.append("")
        else:
            out.append(line if keep else "")
    return "\n".join(out)


def prose(markdown):
    """The page without front matter, code blocks, code spans and macros: what is typed as text and
    math."""
    if markdown.startswith("---\n"):
        markdown = (
            "\n" * markdown.split("---\n", 2)[1].count("\n")
            + "\n\n"
            + markdown.split("---\n", 2)[2]
        )
    blank = lambda m: "\n" * m.group(0).count("\n")  # keep the line numbers of the page
    markdown = re.sub(r"^(\s*)(`{3,}|~{3,}).*?^\1\2\s*$", blank, markdown, flags=re.S | re.M)
    markdown = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown)
    markdown = MACRO.sub(lambda m: " " + blank(m), markdown)
    for pattern in NOT_A_RESULT:
        markdown = pattern.sub(lambda m: " " + blank(m), markdown)
    return markdown


def outputs_of(markdown):
    """The outputs a page shows: every script named by its macros, and the scripts behind its
    figures."""
    names = set()
    for m in MACRO.finditer(markdown):
        if m.group(1) in ("runs", "output", "value", "tiny", "official") and m.group(2):
            names.add(m.group(2).split(",")[0].strip().strip("'\""))
        elif m.group(1) == "figure" and m.group(2):
            fig = m.group(2).split(",")[0].strip().strip("'\"")
            for path in (DOCS / "outputs").glob("*.json"):
                if fig in json.loads(path.read_text()).get("figures", []):
                    names.add(path.stem)
    return sorted(names | {"parity"})  # the parity figures may be quoted on any page


def _as_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and NUMBER.fullmatch(value.strip()):
        return float(value.strip().replace(",", ""))
    return None


def recorded(names):
    """{number: ['chNN.key', …]} of every numeric value these outputs recorded."""
    found = {}
    for name in names:
        path = DOCS / "outputs" / f"{name}.json"
        if not path.is_file():
            continue
        for key, value in json.loads(path.read_text()).get("values", {}).items():
            n = _as_number(value)
            if n is not None and n not in COMMON:
                found.setdefault(n, []).append(f"{name}.{key}")
    return found


def official_config_numbers():
    """Every number in the official config.json: typed, they are facts of the checkpoint, not of a
    run."""
    found = set()

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            found.add(float(x))

    walk(json.loads((ROOT / "book" / "data" / "qwen3.5-0.8b" / "config.json").read_text()))
    return found


def reading_part(lines):
    """(first, last) line index of the part that reads the output: {{ output }} to the second
    heading after it."""
    start = next((i for i, line in enumerate(lines) if "{{ output(" in line), None)
    if start is None:  # a page that shows no output (the reading guide): nothing reads one
        return (0, 0)
    headings = [i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")]
    return (start, headings[1] if len(headings) > 1 else len(lines))


def typed_numbers(page):
    """[(line number, typed number, [recorded keys it equals])] for one Markdown page."""
    text = shown(Path(page).read_text())
    values = recorded(outputs_of(text))
    config = official_config_numbers()
    lines = text.split("\n")
    first, last = reading_part(lines)
    hits = []
    # prose() keeps line breaks: the page's line numbers
    for n, line in enumerate(prose(text).split("\n")):
        for m in NUMBER.finditer(line):
            token = m.group(0)
            v = float(token.replace(",", ""))
            # 2.98e-07; a tolerance 1e-4 is typed
            if re.search(r"\d\.\d+[eE]-", token) and abs(v) < 1e-3:
                hits.append((n + 1, token, values.get(v, ["parity.<the comparison>"])))
                continue
            if v not in values:
                continue
            distinctive = bool(re.search(r"[.eE]", token)) or abs(v) >= 1000
            if (distinctive and v not in config) or (first <= n < last and abs(v) >= 3):
                hits.append((n + 1, token, values[v]))
    return hits


def pages():
    return sorted(p for lang in ("zh", "en") for p in (DOCS / lang).rglob("*.md"))


def main():
    total = 0
    for page in pages():
        for line, number, keys in typed_numbers(page):
            total += 1
            print(
                f"{page.relative_to(ROOT)}: ~line {line}: {number} is recorded "
                f"as {', '.join(keys)}: "
                f'use {{{{ value("{keys[0].split(".")[0]}", "{keys[0].split(".", 1)[1]}") }}}}'
            )
    print(f"{total} typed number(s) that a run recorded")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
