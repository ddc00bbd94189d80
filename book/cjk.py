"""Chinese prose in the zh edition: a line break between two Chinese characters is not a space."""

import re

# Markdown turns a soft line break into whitespace, which a browser shows between two Chinese
# characters ("运行）： 它的"). In the zh edition a break between two CJK characters (Han, CJK
# punctuation, fullwidth forms, the quotes, dashes and ellipsis Chinese text uses) joins the lines.
# Only paragraph text is joined: code (fenced or indented), display math, HTML blocks, tables (a
# block whose second line is `|---|---|`), headings and hard breaks keep their lines, and a line
# that starts a block (a list item, a heading, `!!!`, `|`, `{{ … }}`) starts with no CJK character,
# so it is never merged; the lines of one blockquote ("> ") join after their markers. It runs before
# the macros are expanded: outputs and values are never joined.
CJK = (
    "\u2014\u2018\u2019\u201c\u201d\u2026\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\ufe10-\ufe1f\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f"
)
# one trailing space is still a soft break; two are a hard one
CJK_END = re.compile(f"[{CJK}][*_]* ?$")
CJK_START = re.compile(f"^[*_]*[{CJK}]")  # **粗体** at either end counts as its CJK text
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
BOX = re.compile(
    r"^(?:!!!|\?\?\?\+?|===)(?:\s|$)"
)  # admonition, details, tab: content indented by 4
LIST = re.compile(r"^(?:[-*+]|\d+[.)])(?:\s|$)")  # a list item: its lines may also be lazy
SETEXT = re.compile(r"^\s*(?:=+|-+)\s*$")
QUOTE = re.compile(r"^\s*(?:>\s?)+")  # a blockquote's markers: "> ", "> > "
TABLE_RULE = re.compile(
    r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$|^\s*\|\s*:?-+:?\s*\|?\s*$"
)  # |---|---|


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def join_cjk_lines(lines):
    """The lines of a zh page with every soft break between two CJK characters removed (see
    above)."""
    out, fence, math, skip_block, containers, ticks, start = [], None, False, False, [], 0, True
    for n, line in enumerate(lines):
        stripped = line.strip()
        if fence:  # inside fenced code: copied as it is, until its fence
            m = FENCE.match(line)
            if (
                m
                and m.group(1)[0] == fence[0]
                and len(m.group(1)) >= len(fence)
                and not m.group(2).strip()
            ):
                fence = None
            out.append(line)
            continue
        if math:  # inside display math
            math = not (stripped.endswith("$$") or stripped.endswith("\\]"))
            out.append(line)
            continue
        if not stripped:
            out.append(line)
            start, skip_block, ticks = True, False, 0
            continue
        m = FENCE.match(line)
        if m:
            fence = m.group(1)
            out.append(line)
            start = True
            continue
        if stripped.startswith(("$$", "\\[")):
            math = not (len(stripped) > 2 and stripped.endswith(("$$", "\\]")))
            out.append(line)
            start = True
            continue
        indent = _indent(line)
        opens = "box" if BOX.match(stripped) else "list" if LIST.match(stripped) else None
        if start or opens:  # the first line of a block, or a new list item / box
            while containers and containers[-1][0] > indent:
                containers.pop()
            if start:  # indented code, or an HTML block: left as they are
                skip_block = (
                    indent >= (containers[-1][0] if containers else 0) + 4
                    and not opens
                    or stripped.startswith("<")
                    or n + 1 < len(lines)
                    and TABLE_RULE.match(lines[n + 1])
                )
            if opens:
                containers.append((indent + 4, opens))
        prev = out[-1] if out and not start else None
        start = False
        outside_box = containers and containers[-1][1] == "box" and indent < containers[-1][0]
        text = line.lstrip()  # what joins the line before
        quote, prev_quote = QUOTE.match(line), QUOTE.match(prev or "")
        if (
            quote
            and prev_quote
            and quote.group().replace(" ", "") == prev_quote.group().replace(" ", "")
        ):
            text = line[quote.end() :].lstrip()  # the next line of one quote: its text
            stripped = text.strip()
        if (
            prev is not None
            and not skip_block
            and not outside_box
            and CJK_END.search(prev)
            and CJK_START.match(stripped)
            and ticks % 2 == 0
            and prev.count("`") % 2 == 0  # not in a code span
            and not prev.lstrip().startswith(("#", "<", "!!!", "???", "===", "|"))
            and not stripped.endswith("|")
            and not (n + 1 < len(lines) and SETEXT.match(lines[n + 1]))
        ):
            out[-1] = prev.rstrip(" ") + text
        else:
            out.append(line)
        ticks += line.count("`")
    return out
