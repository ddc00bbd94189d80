"""mkdocs hooks: the page macros of CONTRIBUTING.md, edit/report links, and notebooks under static-i18n."""
import html
import json
import posixpath
import re
from pathlib import Path, PurePosixPath

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.plugins import CombinedEvent, event_priority

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MACRO = re.compile(r"\{\{\s*(\w+)(?:\((.*?)\))?\s*\}\}")

TEXT = {
    "zh": {
        "runs_title": "本章运行",
        "runs": "`{script}`，实测 {seconds} 秒（{model}，{device}，torch {torch}）",
        "tiny": "微型测试模型",
        "output_title": "输出",
        "tiny_figure": "微型测试模型的随机权重画出的图，不代表 Qwen3.5-0.8B",
        "measured": "实测：`{script}` · {model} · {machine} · {threads} 线程 · {date} · torch {torch} · {dtype}",
        "unofficial": "不是官方权重",
        "unofficial_note": "这份输出来自 {model}，不是 Qwen/Qwen3.5-0.8B 的官方权重。",
        "tiny_note": "这份输出来自**微型测试模型**（形状与官方一致但极小、权重随机），不是 Qwen3.5-0.8B。"
                     "下载官方权重后运行 `make regen`，这里就换成真模型的结果。",
        "provenance": "来源：`{script}` · {model} · 权重 sha256 `{sha}` · torch {torch} · {device} · {dtype} · {seconds} 秒",
        "legend": "+ 本章新增 · ~ 本章修改 · 其余来自前面各章",
        "edit": "发现错误，或有更好的讲法？[在 GitHub 上编辑本页]({edit}) · [报告问题]({issue})",
    },
    "en": {
        "runs_title": "What this chapter runs",
        "runs": "`{script}`, measured {seconds} s ({model}, {device}, torch {torch})",
        "tiny": "tiny test model",
        "output_title": "Output",
        "tiny_figure": "drawn from the tiny test model's random weights, not Qwen3.5-0.8B",
        "measured": "Measured: `{script}` · {model} · {machine} · {threads} threads · {date} · torch {torch} · {dtype}",
        "unofficial": "not the official weights",
        "unofficial_note": "This output comes from {model}, not from the official Qwen/Qwen3.5-0.8B weights.",
        "tiny_note": "This output comes from the **tiny test model** (the official layout, tiny sizes, random weights), "
                     "not from Qwen3.5-0.8B. Download the official weights and run `make regen` to see "
                     "the real model's output here.",
        "provenance": "Provenance: `{script}` · {model} · weights sha256 `{sha}` · torch {torch} · {device} · {dtype} · {seconds} s",
        "legend": "+ new in this chapter · ~ changed in this chapter · the rest come from earlier chapters",
        "edit": "Found a mistake or a better way to say it? [Edit this page on GitHub]({edit}) · [Report an issue]({issue})",
    },
}


def _lang(page):
    return PurePosixPath(page.file.src_uri).parts[0] if page.file.src_uri.startswith(("zh/", "en/")) else "zh"


def _provenance(name):
    path = DOCS / "outputs" / f"{name}.json"
    if not path.is_file():
        raise PluginError(f"no output for {name}: run `python -m book.regen {name}`")
    return json.loads(path.read_text())


# The model labels runs record (scripts/bench.py, book/regen.py), in the Chinese edition's words. A label not
# listed here (a plain model name such as "Qwen/Qwen3.5-0.8B", or a folder and its sha256) is shown as recorded;
# the tiny test model is named by each edition's TEXT["tiny"].
MODEL_ZH = {
    "Qwen3.5-0.8B shapes, random bf16 weights": "Qwen3.5-0.8B 的形状，随机 bf16 权重",
    "Qwen/Qwen3.5-0.8B config.json (no weights)": "Qwen/Qwen3.5-0.8B 的 config.json（不含权重）",
    "tiny random reference models (tests/reference.py)": "微型随机参考模型（tests/reference.py）",
}


def model_label(p, lang):
    """The run's model as the edition shows it: the recorded label, or its Chinese rendering in the zh edition."""
    if p["model"] == "tiny test model":
        return TEXT[lang]["tiny"]
    return MODEL_ZH.get(p["model"], p["model"]) if lang == "zh" else p["model"]


def _fmt(p, lang):
    return {"script": p["script"], "seconds": p["seconds"], "device": p["device"], "torch": p["torch"],
            "dtype": p["dtype"], "sha": p["weights_sha256"][:12], "model": model_label(p, lang)}


def chapters():
    """{page file name: front matter} for every page of the default edition, read straight from disk."""
    pages = {}
    for md in sorted((DOCS / "zh").rglob("*.md")):
        text = md.read_text()
        if text.startswith("---\n"):
            pages[md.relative_to(DOCS / "zh").as_posix()] = yaml.safe_load(text.split("---\n", 2)[1]) or {}
    return pages


def tree(meta):
    """The repository's files as of this chapter: earlier chapters' files, + new ones, ~ changed ones."""
    here = meta["chapter"]
    new, changed = set(meta.get("new", [])), set(meta.get("changed", []))
    files = sorted({f for m in chapters().values() if "chapter" in m and m["chapter"] <= here for f in m.get("new", [])},
                   key=lambda f: (f.count("/"), f.split("/")[0], f))
    for f in files:
        if not (ROOT / f).is_file():
            raise PluginError(f"chapter {here} lists {f}, which does not exist")
    lines, by_dir = [], {}
    for f in files:
        d, _, name = f.rpartition("/")
        by_dir.setdefault(d, []).append((name, f))
    width = max(len(n) for group in by_dir.values() for n, _ in group) + 6
    for d, group in by_dir.items():
        lines.append(f"{d}/")
        for i, (name, f) in enumerate(group):
            branch = "└── " if i == len(group) - 1 else "├── "
            mark = "+" if f in new else "~" if f in changed else ""
            lines.append(f"{branch}{name}".ljust(width) + mark)
    return "\n".join(lines)


def in_span(line, pos):
    """Is position `pos` of a markdown line inside an inline code span (an odd number of backticks before it)?"""
    return line[:pos].count("`") % 2 == 1


def _macro(page, lang, match, in_code_span=False):
    name, args = match.group(1), match.group(2)
    args = [a.strip().strip("'\"") for a in args.split(",", 1)] if args else []
    t = TEXT[lang]
    if name == "runs":                          # a box of its own: the macro stands alone on its line
        return f'!!! abstract "{t["runs_title"]}"\n    {t["runs"].format(**_fmt(_provenance(args[0]), lang))}\n'
    if name == "value":
        values = _provenance(args[0])["values"]
        if len(args) < 2 or args[1] not in values:
            raise PluginError(f"{page.file.src_uri}: {args[0]} recorded no value {args[1:]!r} (has {sorted(values)})")
        if in_code_span:                         # inside `…` markdown shows text as it is: only a backtick breaks it
            if "`" in str(values[args[1]]):
                raise PluginError(f"{page.file.src_uri}: {args[0]}'s {args[1]} contains a backtick; "
                                  f"take the value out of the code span")
            return str(values[args[1]])
        return as_text(values[args[1]])
    if name == "output":
        p = _provenance(args[0])
        return output_block((DOCS / "outputs" / f"{args[0]}.txt").read_text(), p, lang) + _provenance_note(p, lang)
    if name == "figure":
        fig = f"figures/{args[0]}_{lang}.svg"
        if not (DOCS / fig).is_file():
            raise PluginError(f"{page.file.src_uri}: no figure {fig}: run `python -m book.regen`")
        up = "../" * (len(PurePosixPath(page.file.src_uri).parts) - 1)
        alt = as_text(args[1] if len(args) > 1 else args[0]).replace("[", "\\[").replace("]", "\\]")
        return f"![{alt}]({up}{fig})\n\n" + _provenance_note(figure_provenance(args[0]), lang, figure=True)
    if name == "tree":
        if "chapter" not in page.meta:
            raise PluginError(f"{page.file.src_uri}: {{{{ tree }}}} needs `chapter:` in the front matter")
        return f"```text\n{tree(page.meta)}\n```\n\n<small>{t['legend']}</small>"
    raise PluginError(f"{page.file.src_uri}: unknown macro {match.group(0)}")


# ---------------------------------------------------------------- outputs are text: they never become markup
SNIPPET = re.compile(r"(-{1,}8<-{1,})")        # pymdownx.snippets would include a file named after it


def as_text(value):
    """A recorded value as literal text in prose: no HTML, no markdown emphasis, no macro, no snippet."""
    text = html.escape(str(value), quote=False)
    text = re.sub(r"([\\`*_{}\[\]<>#|~])", r"\\\1", text)
    return SNIPPET.sub(lambda m: m.group(1).replace("8<", "8&lt;"), text)


def output_block(text, p, lang):
    """A printed output as a fenced text block, whatever it contains: the fence is longer than any run of
    backticks inside, so a ``` line cannot end it; inside a fence HTML and {{ }} are shown, not run."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = "\n".join(";" + line if SNIPPET.search(line) and line.lstrip().startswith(("-", ";")) else line
                     for line in text.rstrip().split("\n"))
    return f'{fence}text title="{TEXT[lang]["output_title"]}"\n{body}\n{fence}\n\n'


def figure_provenance(name):
    """The provenance of the run that drew figure `name` (the output whose json lists it)."""
    for path in sorted((DOCS / "outputs").glob("*.json")):
        p = json.loads(path.read_text())
        if name in p.get("figures", []):
            return p
    raise PluginError(f"no output lists the figure {name}: run `python -m book.regen`")


def is_tiny(p):
    return p["model"] == "tiny test model"


def _provenance_note(p, lang, figure=False):
    t = TEXT[lang]
    note = f"<small>{t['provenance'].format(**_fmt(p, lang))}</small>\n"
    if p.get("measured"):
        note = f"<small>{t['measured'].format(**_fmt(p, lang), machine=html.escape(str(p.get('machine', '?'))), threads=p.get('threads', '?'), date=p.get('date', '?'))}</small>\n"
    if is_tiny(p) and figure:                    # under a figure: a label, not a second warning box
        note = note.replace("</small>", f" · <strong class=\"tiny-label\">⚠ {t['tiny_figure']}</strong></small>")
    elif is_tiny(p):
        note += f"\n!!! warning \"{t['tiny']}\"\n    {t['tiny_note']}\n"
    elif not p.get("official", True) and not p.get("measured"):
        note += f"\n!!! warning \"{t['unofficial']}\"\n    {t['unofficial_note'].format(model=html.escape(model_label(p, lang)))}\n"
    return note


BLOCK = re.compile(r"^\s*\{\{\s*(tiny|official)\((.*?)\)\s*\}\}\s*$")
END = re.compile(r"^\s*\{\{\s*end\s*\}\}\s*$")


def conditional_blocks(lines, page):
    """Keep `{{ tiny("chNN") }} … {{ end }}` only while chNN's output is the tiny model's, and
    `{{ official("chNN") }} … {{ end }}` only once it is the official weights': interpretation follows provenance."""
    out, keep, opened = [], True, None
    for n, line in enumerate(lines, 1):
        m = BLOCK.match(line)
        if m:
            if opened:
                raise PluginError(f"{page.file.src_uri}:{n}: {{{{ {m.group(1)} }}}} inside another block (line {opened})")
            p = _provenance(m.group(2).strip().strip("'\""))
            keep = is_tiny(p) if m.group(1) == "tiny" else bool(p.get("official")) and not is_tiny(p)
            opened = n
            continue
        if END.match(line):
            if not opened:
                raise PluginError(f"{page.file.src_uri}:{n}: {{{{ end }}}} without an opening block")
            keep, opened = True, None
            continue
        if keep:
            out.append(line)
    if opened:
        raise PluginError(f"{page.file.src_uri}:{opened}: block without {{{{ end }}}}")
    return out


# ---------------------------------------------------------------- Chinese prose: a line break is not a space
# Markdown turns a soft line break into whitespace, which a browser shows between two Chinese characters
# ("运行）： 它的"). In the zh edition a break between two CJK characters (Han, CJK punctuation, fullwidth forms,
# the quotes, dashes and ellipsis Chinese text uses) joins the lines. Only paragraph text is joined: code (fenced or
# indented), display math, HTML blocks, tables (a block whose second line is `|---|---|`), headings and hard breaks
# keep their lines, and a line that starts a block (a list item, a heading, `!!!`, `|`, `{{ … }}`) starts with no
# CJK character, so it is never merged; the lines of one blockquote ("> ") join after their markers. It runs before
# the macros are expanded: outputs and values are never joined.
CJK = ("\u2014\u2018\u2019\u201c\u201d\u2026\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
       "\uf900-\ufaff\ufe10-\ufe1f\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f")
CJK_END = re.compile(f"[{CJK}][*_]* ?$")             # one trailing space is still a soft break; two are a hard one
CJK_START = re.compile(f"^[*_]*[{CJK}]")              # **粗体** at either end counts as its CJK text
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
BOX = re.compile(r"^(?:!!!|\?\?\?\+?|===)(?:\s|$)")            # admonition, details, tab: content indented by 4
LIST = re.compile(r"^(?:[-*+]|\d+[.)])(?:\s|$)")               # a list item: its lines may also be lazy
SETEXT = re.compile(r"^\s*(?:=+|-+)\s*$")
QUOTE = re.compile(r"^\s*(?:>\s?)+")                           # a blockquote's markers: "> ", "> > "
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$|^\s*\|\s*:?-+:?\s*\|?\s*$")  # |---|---|


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def join_cjk_lines(lines):
    """The lines of a zh page with every soft break between two CJK characters removed (see above)."""
    out, fence, math, skip_block, containers, ticks, start = [], None, False, False, [], 0, True
    for n, line in enumerate(lines):
        stripped = line.strip()
        if fence:                                       # inside fenced code: copied as it is, until its fence
            m = FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            out.append(line)
            continue
        if math:                                        # inside display math
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
        if start or opens:                              # the first line of a block, or a new list item / box
            while containers and containers[-1][0] > indent:
                containers.pop()
            if start:                                   # indented code, or an HTML block: left as they are
                skip_block = (indent >= (containers[-1][0] if containers else 0) + 4 and not opens
                              or stripped.startswith("<") or n + 1 < len(lines) and TABLE_RULE.match(lines[n + 1]))
            if opens:
                containers.append((indent + 4, opens))
        prev = out[-1] if out and not start else None
        start = False
        outside_box = containers and containers[-1][1] == "box" and indent < containers[-1][0]
        text = line.lstrip()                                     # what joins the line before
        quote, prev_quote = QUOTE.match(line), QUOTE.match(prev or "")
        if quote and prev_quote and quote.group().replace(" ", "") == prev_quote.group().replace(" ", ""):
            text = line[quote.end():].lstrip()                   # the next line of one quote: its text
            stripped = text.strip()
        if (prev is not None and not skip_block and not outside_box and CJK_END.search(prev)
                and CJK_START.match(stripped) and ticks % 2 == 0 and prev.count("`") % 2 == 0  # not in a code span
                and not prev.lstrip().startswith(("#", "<", "!!!", "???", "===", "|")) and not stripped.endswith("|")
                and not (n + 1 < len(lines) and SETEXT.match(lines[n + 1]))):
            out[-1] = prev.rstrip(" ") + text
        else:
            out.append(line)
        ticks += line.count("`")
    return out


@event_priority(100)
def on_config(config):
    """The pages' outputs and figures are read from the docs folder this build uses (tests build copies)."""
    global DOCS
    DOCS = Path(config.docs_dir)
    return config


def on_page_markdown(markdown, page, config, files):
    lang = _lang(page)
    if page.file.src_uri.endswith(".ipynb"):
        return markdown
    interrupted = sorted((DOCS / "outputs").glob(".regen-journal-*.json"))
    if interrupted:
        raise PluginError(f"an interrupted regeneration left {interrupted[0].name}: run `python -m book.regen`")
    lines = conditional_blocks(markdown.split("\n"), page)
    if lang == "zh":
        lines = join_cjk_lines(lines)
    out, in_code = [], False
    for line in lines:                                  # macros outside code blocks only
        if line.lstrip().startswith("```"):
            in_code = not in_code
        out.append(line if in_code else MACRO.sub(lambda m: _macro(page, lang, m, in_span(line, m.start())), line))
    markdown = "\n".join(out)
    repo = config.repo_url.rstrip("/")
    edit = f"{repo}/edit/main/docs/{page.file.src_uri}"
    issue = f"{repo}/issues/new?title={page.file.src_uri}"
    return markdown + "\n\n---\n\n" + TEXT[lang]["edit"].format(edit=edit, issue=issue) + "\n"


def on_startup(command, dirty):
    """static-i18n recreates every file as a plain File, so notebooks stop being pages (static-i18n issue #198)."""
    from mkdocs_static_i18n import folder

    if getattr(folder.create_i18n_file, "_keeps_notebooks", False):
        return
    original = folder.create_i18n_file

    def create_i18n_file(file, *args, **kwargs):
        new = original(file, *args, **kwargs)
        if file.src_uri.endswith(".ipynb") and file.is_documentation_page():
            new.is_documentation_page = lambda: True
        return new

    create_i18n_file._keeps_notebooks = True
    folder.create_i18n_file = create_i18n_file


# The site around the pages: each edition gets its own search index and its own 404 page. static-i18n builds the
# editions one after the other into one folder, so each build overwrites site/404.html and the search plugin writes
# one index holding both editions (Chinese results on English pages, an English stemmer on Chinese pages).
# Chinese: the words jieba cut (the search plugin's segmentation for zh), no stemmer. English: each word and its
# stem, a typed word searched by its stem (the index's language "book_en" is
# overrides/assets/javascripts/lunr/min/lunr.book_en.min.js: Material searches every word as a prefix, cache*,
# which a stemmed index entry, cach, never matches by itself), so "caching" finds cache and cached.
SEARCH = {"zh": {"lang": ["zh"], "pipeline": ["trimmer", "stopWordFilter"]},
          "en": {"lang": ["book_en"], "pipeline": ["trimmer", "stopWordFilter", "stemmer"]}}
TEX = [(re.compile(r"\\\(|\\\)|\\\[|\\\]"), ""), (re.compile(r"\\text\{([^{}]*)\}"), r"\1"), (re.compile(r"\{,\}"), ","),
       (re.compile(r"\\times\b"), "×"), (re.compile(r"\\cdot\b"), "·"), (re.compile(r"\\approx\b"), "≈"),
       (re.compile(r"\\[,;! ]"), " ")]
_not_found = {}


def _edition(config):
    i18n = config.plugins.get("i18n")
    return (i18n.current_language if i18n else None) or "zh", i18n


def _keep_404(config):
    """After each edition's build: remember the 404 page it wrote (the next edition's build overwrites it)."""
    lang, _ = _edition(config)
    page = Path(config.site_dir) / "404.html"
    if page.is_file():
        _not_found[lang] = page.read_text()


def _plain(text):
    """Search snippets show text, not TeX delimiters: \\(t\\) -> t."""
    for pattern, repl in TEX:
        text = pattern.sub(repl, text)
    return text


# A search result is read as text. A formula (a chapter's \\( \\), a lesson's $ $) becomes the symbols it stands for,
# a lesson heading loses its "¶" link, and the English index drops the zero-width spaces the search plugin's jieba
# put in (the Chinese index keeps them: they are where its words are cut; javascripts/search.js hides them).
MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
CODE = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>)", re.S)
TEX_SYMBOL = {"alpha": "α", "beta": "β", "gamma": "γ", "Gamma": "Γ", "delta": "δ", "Delta": "Δ", "epsilon": "ε",
              "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "omega": "ω", "ell": "ℓ", "top": "⊤",
              "odot": "⊙", "times": "×", "cdot": "·", "approx": "≈", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥",
              "ne": "≠", "in": "∈", "infty": "∞", "sum": "Σ", "prod": "Π", "pm": "±", "leftarrow": "←",
              "rightarrow": "→", "to": "→", "dots": "…", "ldots": "…", "cdots": "⋯", "langle": "⟨", "rangle": "⟩",
              "lVert": "‖", "rVert": "‖", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉", "bmod": "mod"}
TEX_STEPS = [(re.compile(r"\\(?:operatorname|mathrm|mathbf|mathbb|mathcal|text|hat|tilde|bar)\{([^{}]*)\}"), r"\1"),
             (re.compile(r"\\t?frac\{([^{}]*)\}\{([^{}]*)\}"), r"\1/\2"), (re.compile(r"\\sqrt\{([^{}]*)\}"), r"√(\1)"),
             (re.compile(r"\\underbrace\{([^{}]*)\}_\{[^{}]*\}"), r"\1"),
             (re.compile(r"\\(?:begin|end)\{[a-z]*\}|\\(?:[bB]ig+|left|right)\b"), ""),
             (re.compile(r"\\\\"), "; "), (re.compile(r"\\(?:qquad|quad)\b|\\[,;:! ]|&amp;|&"), " "),
             (re.compile(r"\\([A-Za-z]+)"), lambda m: TEX_SYMBOL.get(m.group(1), m.group(1))), (re.compile(r"\\_"), "_"),
             (re.compile(r"[{}]"), ""), (re.compile(r"√\((\w+)\)"), r"√\1"), (re.compile(r" {2,}"), " ")]


def _math_text(tex):
    """$\\sqrt{d}\\,\\omega_i$ -> √d ω_i: what a reader can read in a search result."""
    for pattern, repl in TEX_STEPS:
        tex = pattern.sub(repl, tex)
    return tex.strip()


def search_text(text, lang):
    """A search entry's title or text as a result shows it (code left as it is)."""
    parts = CODE.split(text)
    for i in range(0, len(parts), 2):             # prose between code
        parts[i] = _plain(MATH.sub(lambda m: _math_text(next(g for g in m.groups() if g is not None)), parts[i]))
    text = "".join(parts).replace("¶", "")
    return text.replace("\u200b", "") if lang == "en" else text


def _split_site(config):
    """After the last edition's build: one 404 page and one search index per edition."""
    _, i18n = _edition(config)
    if i18n is None or i18n.building:            # an inner build of static-i18n: the editions are not all there yet
        return
    site = Path(config.site_dir)
    if "zh" in _not_found:
        (site / "404.html").write_text(ALTERNATE.sub("", _not_found["zh"]))
    if "en" in _not_found:
        (site / "en").mkdir(exist_ok=True)
        (site / "en" / "404.html").write_text(ALTERNATE.sub("", _not_found["en"]))
    index_path = site / "search" / "search_index.json"
    if not index_path.is_file():
        return
    index = json.loads(index_path.read_text())
    for lang, folder in (("zh", site), ("en", site / "en")):
        mine = [d for d in index["docs"] if d["location"].startswith("en/") == (lang == "en")]
        docs = [{**d, "location": d["location"][3:] if lang == "en" else d["location"],
                 "text": search_text(d["text"], lang), "title": search_text(d["title"], lang)} for d in mine]
        config_ = {**index["config"], **SEARCH[lang]}
        (folder / "search").mkdir(parents=True, exist_ok=True)
        (folder / "search" / "search_index.json").write_text(
            json.dumps({"config": config_, "docs": docs}, ensure_ascii=False, separators=(",", ":")))


on_post_build = CombinedEvent(event_priority(50)(_keep_404), event_priority(-200)(_split_site))


NOTEBOOK_LINK = re.compile(r'href="(?![a-zA-Z][a-zA-Z0-9+.-]*:|#|/)([^"#?]+\.(?:md|ipynb))(#[^"]*)?"')


def notebook_links(html, page, files):
    """A lesson links pages as the repository holds them (../04-rope.md, embedding.ipynb), which also works in
    Jupyter; mkdocs checks and rewrites such links only in Markdown pages, so here: each becomes the page's URL,
    and a link to no page fails the build."""
    here = PurePosixPath(page.file.src_uri).parent

    def one(m):
        target = posixpath.normpath((here / m.group(1)).as_posix())
        file = files.get_file_from_path(target)
        if file is None:
            raise PluginError(f"{page.file.src_uri}: the link {m.group(1)} leads to no page ({target} does not exist)")
        return f'href="{file.url_relative_to(page.file)}{m.group(2) or ""}"'

    return NOTEBOOK_LINK.sub(one, html)


def on_page_content(html, page, config, files):
    """Notebooks skip on_page_markdown: give the lessons the same edit / report line as the chapters."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    html = notebook_links(html, page, files)
    html = _notebook_anchors(html, page, config)
    html = notebook_figure_alt(html, page)
    from markdown import Markdown

    repo = config.repo_url.rstrip("/")
    line = TEXT[_lang(page)]["edit"].format(edit=f"{repo}/edit/main/docs/{page.file.src_uri}",
                                            issue=f"{repo}/issues/new?title={page.file.src_uri}")
    return html + "\n<hr>\n" + Markdown().convert(line) + "\n"


NB_NO_ALT = 'alt="No description has been provided for this image"'   # nbconvert's stand-in for a missing alt
NB_CELL = re.compile(r'(<div class="jp-Cell [^"]*" id="cell-id=([^"]*)">)')


def notebook_figure_alt(content, page):
    """A lesson's figure (a cell's image output) says what it shows: its alt text is the cell's metadata "alt", in
    the edition's language (a list for a cell with several images). nbconvert gives an image without one a stand-in
    ("No description has been provided for this image"); a figure with no alt text in its cell fails the build."""
    if NB_NO_ALT not in content:
        return content
    cells = json.loads(Path(page.file.abs_src_path).read_text(encoding="utf-8"))["cells"]
    alts = {cell.get("id"): cell.get("metadata", {}).get("alt") for cell in cells}
    parts = NB_CELL.split(content)                # text, (cell tag, cell id, the cell's html up to the next cell)...
    for i in range(1, len(parts), 3):
        chunk, alt = parts[i + 2], alts.get(parts[i + 1])
        needed = chunk.count(NB_NO_ALT)
        texts = [alt] if isinstance(alt, str) else list(alt or [])
        if needed and len(texts) != needed:
            raise PluginError(f"{page.file.src_uri}: cell {parts[i + 1]} shows {needed} image(s) and has "
                              f"{len(texts)} alt text(s): give its metadata an \"alt\" in the edition's language")
        for text in texts[:needed]:
            chunk = chunk.replace(NB_NO_ALT, f'alt="{html.escape(text)}"', 1)
        parts[i + 2] = chunk
    content = "".join(part for n, part in enumerate(parts) if n % 3 != 2)
    if NB_NO_ALT in content:
        raise PluginError(f"{page.file.src_uri}: an image outside any cell has no alt text")
    return content


ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')


def on_post_page(output, page, config):
    """Drop the head's <link rel="alternate" hreflang> (the sitemap lists each page's twin for search engines):
    Material fetches sitemap.xml beside each of them, and beside a twin page there is none (a 404 per page)."""
    return ALTERNATE.sub("", output)


NB_HEADING = re.compile(r'<(h[1-6]) id="([^"]*)">(.*?)<a class="anchor-link" href="#[^"]*">¶</a></\1>', re.S)


def _notebook_anchors(html, page, config):
    """mkdocs-jupyter slugs notebook headings in ASCII: Chinese headings get ids like "" and "1", and its table of
    contents other ones (#_1). Give the headings the pages' slugs (toc's slugify from mkdocs.yml) and point the
    table of contents at them."""
    from markdown.extensions.toc import unique
    from markdown.extensions.toc import slugify as ascii_slugify

    slugify = config.mdx_configs.get("toc", {}).get("slugify", ascii_slugify)
    used, by_title = set(), {}

    def text_of(inner):
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", inner)).strip()

    def fix(match):
        tag, _, inner = match.groups()
        title = text_of(inner)
        new = unique(slugify(title, "-"), used)
        by_title.setdefault(title, []).append(new)
        return f'<{tag} id="{new}">{inner}<a class="anchor-link" href="#{new}">¶</a></{tag}>'

    html = NB_HEADING.sub(fix, html)

    def walk(items):
        for item in items:
            ids = by_title.get(text_of(item.title))
            if ids:
                item.id = ids.pop(0)
            walk(item.children)

    walk(page.toc)
    return html
