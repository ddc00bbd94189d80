"""The site around the pages, after mkdocs renders them: one search index and one 404 page per
edition, search entries as readable text, the lessons' links, anchors and figure alt texts."""

import html
import json
import posixpath
import re
from pathlib import Path, PurePosixPath

from mkdocs.exceptions import PluginError

# The site around the pages: each edition gets its own search index and its own 404 page.
# static-i18n builds the editions one after the other into one folder, so each build overwrites
# site/404.html and the search plugin writes one index holding both editions (Chinese results on
# English pages, an English stemmer on Chinese pages). Chinese: the words jieba cut (the search
# plugin's segmentation for zh), no stemmer. English: each word and its stem, a typed word searched
# by its stem (the index's language "book_en" is
# overrides/assets/javascripts/lunr/min/lunr.book_en.min.js: Material searches every word as a
# prefix, cache*, which a stemmed index entry, cach, never matches by itself), so "caching" finds
# cache and cached.
SEARCH = {
    "zh": {"lang": ["zh"], "pipeline": ["trimmer", "stopWordFilter"]},
    "en": {"lang": ["book_en"], "pipeline": ["trimmer", "stopWordFilter", "stemmer"]},
}
TEX = [
    (re.compile(r"\\\(|\\\)|\\\[|\\\]"), ""),
    (re.compile(r"\\text\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\\times\b"), "×"),
    (re.compile(r"\\cdot\b"), "·"),
    (re.compile(r"\\approx\b"), "≈"),
    (re.compile(r"\\[,;! ]"), " "),
]
_not_found = {}


def _edition(config):
    i18n = config.plugins.get("i18n")
    return (i18n.current_language if i18n else None) or "zh", i18n


def keep_404(config):
    """After each edition's build: remember the 404 page it wrote (the next edition's build
    overwrites it)."""
    lang, _ = _edition(config)
    page = Path(config.site_dir) / "404.html"
    if page.is_file():
        _not_found[lang] = page.read_text()


def _plain(text):
    """Search snippets show text, not TeX delimiters: \\(t\\) -> t."""
    for pattern, repl in TEX:
        text = pattern.sub(repl, text)
    return text


# A search result is read as text. A formula (a chapter's \\( \\), a lesson's $ $) becomes the
# symbols it stands for, a lesson heading loses its "¶" link, and the English index drops the
# zero-width spaces the search plugin's jieba put in (the Chinese index keeps them: they are where
# its words are cut; javascripts/search.js hides them).
MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
CODE = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>)", re.S)
TEX_SYMBOL = {
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "Gamma": "Γ",
    "delta": "δ",
    "Delta": "Δ",
    "epsilon": "ε",
    "theta": "θ",
    "lambda": "λ",
    "mu": "μ",
    "pi": "π",
    "sigma": "σ",
    "omega": "ω",
    "ell": "ℓ",
    "top": "⊤",
    "odot": "⊙",
    "times": "×",
    "cdot": "·",
    "approx": "≈",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "ne": "≠",
    "in": "∈",
    "infty": "∞",
    "sum": "Σ",
    "prod": "Π",
    "pm": "±",
    "leftarrow": "←",
    "rightarrow": "→",
    "to": "→",
    "dots": "…",
    "ldots": "…",
    "cdots": "⋯",
    "langle": "⟨",
    "rangle": "⟩",
    "lVert": "‖",
    "rVert": "‖",
    "lfloor": "⌊",
    "rfloor": "⌋",
    "lceil": "⌈",
    "rceil": "⌉",
    "bmod": "mod",
}
TEX_STEPS = [
    (
        re.compile(
            r"\\(?:operatorname|mathrm|mathbf|mathbb|mathcal|text|hat|tilde|bar)\{([^{}]*)\}"
        ),
        r"\1",
    ),
    (re.compile(r"\\t?frac\{([^{}]*)\}\{([^{}]*)\}"), r"\1/\2"),
    (re.compile(r"\\sqrt\{([^{}]*)\}"), r"√(\1)"),
    (re.compile(r"\\underbrace\{([^{}]*)\}_\{[^{}]*\}"), r"\1"),
    (re.compile(r"\\(?:begin|end)\{[a-z]*\}|\\(?:[bB]ig+|left|right)\b"), ""),
    (re.compile(r"\\\\"), "; "),
    (re.compile(r"\\(?:qquad|quad)\b|\\[,;:! ]|&amp;|&"), " "),
    (re.compile(r"\\([A-Za-z]+)"), lambda m: TEX_SYMBOL.get(m.group(1), m.group(1))),
    (re.compile(r"\\_"), "_"),
    (re.compile(r"[{}]"), ""),
    (re.compile(r"√\((\w+)\)"), r"√\1"),
    (re.compile(r" {2,}"), " "),
]


def _math_text(tex):
    """$\\sqrt{d}\\,\\omega_i$ -> √d ω_i: what a reader can read in a search result."""
    for pattern, repl in TEX_STEPS:
        tex = pattern.sub(repl, tex)
    return tex.strip()


def search_text(text, lang):
    """A search entry's title or text as a result shows it (code left as it is)."""
    parts = CODE.split(text)
    for i in range(0, len(parts), 2):  # prose between code
        parts[i] = _plain(
            MATH.sub(lambda m: _math_text(next(g for g in m.groups() if g is not None)), parts[i])
        )
    text = "".join(parts).replace("¶", "")
    return text.replace("\u200b", "") if lang == "en" else text


def split_site(config):
    """After the last edition's build: one 404 page and one search index per edition."""
    _, i18n = _edition(config)
    if (
        i18n is None or i18n.building
    ):  # an inner build of static-i18n: the editions are not all there yet
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
        docs = [
            {
                **d,
                "location": d["location"][3:] if lang == "en" else d["location"],
                "text": search_text(d["text"], lang),
                "title": search_text(d["title"], lang),
            }
            for d in mine
        ]
        config_ = {**index["config"], **SEARCH[lang]}
        (folder / "search").mkdir(parents=True, exist_ok=True)
        (folder / "search" / "search_index.json").write_text(
            json.dumps({"config": config_, "docs": docs}, ensure_ascii=False, separators=(",", ":"))
        )


NOTEBOOK_LINK = re.compile(
    r'href="(?![a-zA-Z][a-zA-Z0-9+.-]*:|#|/)([^"#?]+\.(?:md|ipynb))(#[^"]*)?"'
)


def notebook_links(html, page, files):
    """A lesson links pages as the repository holds them (../04-rope.md, embedding.ipynb), which
    also works in
    Jupyter; mkdocs checks and rewrites such links only in Markdown pages, so here: each becomes the
    page's URL,
    and a link to no page fails the build."""
    here = PurePosixPath(page.file.src_uri).parent

    def one(m):
        target = posixpath.normpath((here / m.group(1)).as_posix())
        file = files.get_file_from_path(target)
        if file is None:
            raise PluginError(
                f"{page.file.src_uri}: the link {m.group(1)} leads to no page "
                f"({target} does not exist)"
            )
        return f'href="{file.url_relative_to(page.file)}{m.group(2) or ""}"'

    return NOTEBOOK_LINK.sub(one, html)


# nbconvert's stand-in for a missing alt
NB_NO_ALT = 'alt="No description has been provided for this image"'
NB_CELL = re.compile(r'(<div class="jp-Cell [^"]*" id="cell-id=([^"]*)">)')


def notebook_figure_alt(content, page):
    """A lesson's figure (a cell's image output) says what it shows: its alt text is the cell's
    metadata "alt", in
    the edition's language (a list for a cell with several images). nbconvert gives an image without
    one a stand-in
    ("No description has been provided for this image"); a figure with no alt text in its cell fails
    the build."""
    if NB_NO_ALT not in content:
        return content
    cells = json.loads(Path(page.file.abs_src_path).read_text(encoding="utf-8"))["cells"]
    alts = {cell.get("id"): cell.get("metadata", {}).get("alt") for cell in cells}
    parts = NB_CELL.split(
        content
    )  # text, (cell tag, cell id, the cell's html up to the next cell)...
    for i in range(1, len(parts), 3):
        chunk, alt = parts[i + 2], alts.get(parts[i + 1])
        needed = chunk.count(NB_NO_ALT)
        texts = [alt] if isinstance(alt, str) else list(alt or [])
        if needed and len(texts) != needed:
            raise PluginError(
                f"{page.file.src_uri}: cell {parts[i + 1]} shows {needed} image(s) and has "
                f'{len(texts)} alt text(s): give its metadata an "alt" in the edition\'s language'
            )
        for text in texts[:needed]:
            chunk = chunk.replace(NB_NO_ALT, f'alt="{html.escape(text)}"', 1)
        parts[i + 2] = chunk
    content = "".join(part for n, part in enumerate(parts) if n % 3 != 2)
    if NB_NO_ALT in content:
        raise PluginError(f"{page.file.src_uri}: an image outside any cell has no alt text")
    return content


ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')


NB_HEADING = re.compile(
    r'<(h[1-6]) id="([^"]*)">(.*?)<a class="anchor-link" href="#[^"]*">¶</a></\1>', re.S
)


def notebook_anchors(html, page, config):
    """mkdocs-jupyter slugs notebook headings in ASCII: Chinese headings get ids like "" and "1",
    and its table of
    contents other ones (#_1). Give the headings the pages' slugs (toc's slugify from mkdocs.yml)
    and point the
    table of contents at them."""
    from markdown.extensions.toc import slugify as ascii_slugify
    from markdown.extensions.toc import unique

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


def drop_alternate_links(output):
    """Drop the head's <link rel="alternate" hreflang> (the sitemap lists each page's twin for
    search engines): Material fetches sitemap.xml beside each of them, and beside a twin page there
    is none (a 404 per page)."""
    return ALTERNATE.sub("", output)
