"""The site: both editions have the same pages and code, every repository file belongs to a chapter,
and `mkdocs build --strict` (notebooks executed) is clean with the language switcher landing on the
twin page."""

import html
import json
import re
from pathlib import Path

import pytest
import yaml

from book.pages import MACRO, chapters

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(
    p.relative_to(DOCS / "zh").as_posix()
    for p in (DOCS / "zh").rglob("*")
    if p.suffix in (".md", ".ipynb")
)


def test_every_page_exists_in_both_editions():
    en = sorted(
        p.relative_to(DOCS / "en").as_posix()
        for p in (DOCS / "en").rglob("*")
        if p.suffix in (".md", ".ipynb")
    )
    assert PAGES == en, f"only in zh: {set(PAGES) - set(en)}; only in en: {set(en) - set(PAGES)}"


def _parts(text):
    """What must be equal in both editions: front matter, included code, and the outputs/figures
    used."""
    front = yaml.safe_load(text.split("---\n", 2)[1]) if text.startswith("---\n") else {}
    includes = re.findall(r"^\s*--8<--\s+(.+)$", text, flags=re.M)
    macros = [(m.group(1), (m.group(2) or "").split(",")[0].strip()) for m in MACRO.finditer(text)]
    return front, includes, macros


@pytest.mark.parametrize("page", [p for p in PAGES if p.endswith(".md")])
def test_editions_share_code_outputs_and_front_matter(page):
    zh, en = _parts((DOCS / "zh" / page).read_text()), _parts((DOCS / "en" / page).read_text())
    assert zh[0] == en[0], "front matter differs"
    assert zh[1] == en[1], "code includes differ"
    assert zh[2] == en[2], "outputs, values or figures differ"


def test_nav_titles_are_translated():
    # BaseLoader: skip !ENV tags
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    en = next(
        lang
        for lang in next(p for p in config["plugins"] if "i18n" in p)["i18n"]["languages"]
        if lang["locale"] == "en"
    )
    sections = [next(iter(item)) for item in config["nav"] if isinstance(item, dict)]
    missing = [s for s in sections if s not in en["nav_translations"]]
    assert not missing, f"nav titles with no English translation: {missing}"
    listed = re.findall(
        r"([\w/.-]+\.(?:md|ipynb))", (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    )
    assert sorted(listed) == PAGES, (
        "every page is in the nav, and the nav names only pages that exist"
    )


def test_every_file_belongs_to_one_chapter():
    owners = {}
    for page, meta in chapters().items():
        for f in meta.get("new", []):
            owners.setdefault(f, []).append(page)
    files = sorted(
        p.relative_to(ROOT).as_posix() for d in ("qwen", "scripts") for p in (ROOT / d).glob("*.py")
    )
    assert [f for f in files if f not in owners] == [], "files no chapter introduces"
    assert {f: o for f, o in owners.items() if len(o) > 1} == {}, "files introduced twice"
    assert [f for f in owners if not (ROOT / f).is_file()] == [], (
        "chapters list files that do not exist"
    )


def library_owners():
    """{qwen/ file: (the chapter that writes it, the chapters that change it)}, from the pages."""
    made, changed = {}, {}
    for meta in chapters().values():
        for f in meta.get("new", []):
            made[f] = meta.get("chapter", 0)
        for f in meta.get("changed", []):
            changed.setdefault(f, []).append(meta.get("chapter", 0))
    return {f: (n, sorted(changed.get(f, []))) for f, n in made.items() if f.startswith("qwen/")}


def test_contributing_says_which_chapter_writes_each_library_file():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    rows = re.findall(r"^\| `(qwen/\w+\.py)` \| (\d+) \| ([\d, ]*|–) \|", text, re.M)
    said = {f: (int(n), [int(c) for c in re.findall(r"\d+", later)]) for f, n, later in rows}
    want = library_owners()
    table = "\n".join(
        f"| `{f}` | {n} | {', '.join(map(str, c)) or '–'} | ..."
        for f, (n, c) in sorted(want.items())
    )
    assert said == want, f"CONTRIBUTING.md's table of qwen/ files should read:\n{table}"


@pytest.fixture(scope="module")
def site(built_site):
    """The site built once per session (tests/conftest.py); the lessons are executed by
    tests/test_lessons.py, not again here."""
    return built_site


def _html(site, lang, page):
    stem = page.rsplit(".", 1)[0]
    folder = site / ("en" if lang == "en" else "") / ("" if stem == "index" else stem)
    return (folder / "index.html").read_text()


MATH_LEFT = re.compile(r".{0,30}(?:\$[\\(a-zA-Z]|\\(?:alpha|beta|frac|times|sum)\b|_\{).{0,30}")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_no_formula_is_left_as_raw_tex(site, lang):
    """A formula that arithmatex did not take (a space before the closing $, as in `$a = $ 3`)
    reaches the reader as TeX source: none may be left in a page's text."""
    left = []
    for page in PAGES:
        if not page.endswith(".md"):
            continue
        text = _html(site, lang, page)
        text = re.sub(r"<(pre|code|script|style)\b[^>]*>.*?</\1>", "", text, flags=re.S)
        text = re.sub(r'<(span|div) class="arithmatex">.*?</\1>', "", text, flags=re.S)
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
        left += [f"{page}: {m.group(0)!r}" for m in MATH_LEFT.finditer(text)]
    assert not left, "TeX shown as text (close each formula right after it):\n" + "\n".join(left)


@pytest.mark.parametrize("page", PAGES)
def test_built_page_in_both_editions_with_switcher_to_its_twin(site, page):
    zh, en = _html(site, "zh", page), _html(site, "en", page)
    assert '<html lang="zh"' in zh and '<html lang="en"' in en
    stem = page.rsplit(".", 1)[0]
    twin = "en/" if stem == "index" else f"en/{stem}/"
    assert re.search(rf'href="[^"]*{re.escape(twin)}"\s+hreflang="en"', zh), (
        "the switcher does not land on the twin"
    )
    assert "--8<--" not in zh and "{{" not in zh.split("<article", 1)[-1].split("</article>")[0]


def test_chinese_search_index_is_segmented(site):
    index = (site / "search" / "search_index.json").read_text()
    assert "\\u200b" in index or "\u200b" in index, "jieba did not segment the Chinese text"


def test_each_edition_searches_its_own_index(site):
    """One index per edition, in its own language: English pages never answer a Chinese search and
    the other way round. The Chinese index is cut into words by jieba and has no stemmer; the
    English one is stemmed by the book's lunr language "book_en" (each word and its stem: Material
    searches words as prefixes, which a stem alone never matches), whose file the site serves. A
    result reads as text: no TeX, no heading's ¶, and no zero-width spaces in the English index (the
    Chinese one cuts its words at them)."""
    import json

    zh = json.loads((site / "search" / "search_index.json").read_text())
    en = json.loads((site / "en" / "search" / "search_index.json").read_text())
    assert zh["config"]["lang"] == ["zh"] and en["config"]["lang"] == ["book_en"]
    assert "stemmer" not in zh["config"]["pipeline"] and "stemmer" in en["config"]["pipeline"]
    assert (site / "assets" / "javascripts" / "lunr" / "min" / "lunr.book_en.min.js").is_file()
    assert not [d["location"] for d in zh["docs"] if d["location"].startswith("en/")], (
        "English pages in zh search"
    )
    assert {d["location"].split("/")[0] for d in zh["docs"]} >= {"02-embedding"}
    assert len({d["location"].split("#")[0] for d in en["docs"]}) == len(
        {d["location"].split("#")[0] for d in zh["docs"]}
    )
    prose = {
        d["location"]: re.sub(
            r"<pre\b.*?</pre>|<code\b.*?</code>", "", d["title"] + " " + d["text"], flags=re.S
        )
        for d in zh["docs"] + en["docs"]
    }
    raw = [
        (where, m)
        for where, text in prose.items()
        for m in re.findall(r"\\[(\[].{0,20}|\$[^$]{0,40}\\[A-Za-z]+|\$\$", text)
    ]
    assert not raw, f"search snippets with raw TeX: {raw[:5]}"
    assert not [where for where, text in prose.items() if "¶" in text], (
        "search titles with a heading's ¶"
    )
    assert not [d["location"] for d in en["docs"] if "\u200b" in d["title"] + d["text"]], (
        "zero-width spaces in en"
    )


def test_each_edition_has_its_own_404_page(site):
    assert '<html lang="zh"' in (site / "404.html").read_text()
    assert '<html lang="en"' in (site / "en" / "404.html").read_text()


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_included_code_is_titled_with_its_file(lang):
    """A block of included code says which file it comes from (```python
    title="qwen/embedding.py")."""
    untitled = []
    for page in sorted((DOCS / lang).rglob("*.md")):
        lines = page.read_text().split("\n")
        for i, line in enumerate(lines[:-1]):
            include = re.match(r'\s*--8<--\s+"([^":]+)', lines[i + 1])
            if (
                include
                and re.match(r"\s*```python", line)
                and f'title="{include.group(1)}"' not in line
            ):
                untitled.append(
                    f"{page.relative_to(DOCS)}:{i + 1}: {line.strip()} (include {include.group(1)})"
                )
    assert not untitled, "\n".join(untitled)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_what_the_chapter_runs_is_one_box(lang):
    """{{ runs(...) }} expands into a box with its own title: it stands alone on its line, said
    once."""
    bad = [
        f"{p.relative_to(DOCS)}: {line.strip()}"
        for p in sorted((DOCS / lang).rglob("*.md"))
        for line in p.read_text().split("\n")
        if "{{ runs(" in line and not re.fullmatch(r"\{\{ runs\([^)]*\) \}\}", line.strip())
    ]
    assert not bad, "\n".join(bad)


ZH_SAMPLE = """第一行说到这里，
第二行接着说（见第 14 章）：
它的 `Linear` 也一样。**粗体**收尾，
**下一行**开头是粗体。English at the end
中文开头，接在英文后面。中文结尾
English at the start.

- 列表项，
  续行。
- 下一项

```python
s = "代码里，"
t = "不合并"
```

!!! note "提示"
    框里的话，
    接着说。

## 标题
正文

| 列 | 列 |
|---|---|
| 表格，
| 不合并 |

    缩进的代码，
    不合并

行尾两个空格是硬换行  
不合并

> 引用的第一行，
> 接着说。
> > 更深一层，
> 不合并
"""  # noqa: W291 (two trailing spaces: a Markdown hard break the test needs)


def _zh_page(markdown, lang="zh"):
    from types import SimpleNamespace

    from book.hooks import on_page_markdown

    page = SimpleNamespace(file=SimpleNamespace(src_uri=f"{lang}/sample.md"), meta={})
    return on_page_markdown(
        markdown, page, SimpleNamespace(repo_url="https://example.invalid/book"), None
    )


def test_zh_line_breaks_between_chinese_characters_are_joined():
    """A soft line break between two CJK characters renders as a visible space ("运行）： 它的"):
    the zh edition joins those lines, and leaves code, lists, boxes' edges, headings, tables, hard
    breaks and English alone."""
    out = _zh_page(ZH_SAMPLE)
    assert (
        "第一行说到这里，第二行接着说（见第 14 章）：它的 `Linear` 也一样。**粗体**收尾，"
        "**下一行**开头是粗体。" in out
    )
    assert (
        "English at the end\n中文开头，接在英文后面。中文结尾\nEnglish at the start." in out
    )  # English-CJK kept
    assert "- 列表项，续行。\n- 下一项" in out  # a list item's lines join, items do not
    assert 's = "代码里，"\nt = "不合并"' in out  # fenced code
    assert "    框里的话，接着说。\n" in out  # inside a box, at its indent
    assert "## 标题\n正文" in out and "| 表格，\n| 不合并 |" in out  # headings, tables
    assert "    缩进的代码，\n    不合并" in out  # indented code
    assert "硬换行  \n不合并" in out  # a hard break
    assert (
        "> 引用的第一行，接着说。\n> > 更深一层，\n> 不合并" in out
    )  # a quote's lines, at one depth
    assert _zh_page(ZH_SAMPLE, "en").startswith(ZH_SAMPLE)  # the English edition is left as written


def test_zh_provenance_names_the_model_in_chinese():
    """The zh edition shows the run's model in Chinese: every recorded label that is English prose
    has a Chinese rendering; plain model names (Qwen/Qwen3.5-0.8B) are shown as they are. The
    English edition keeps the label."""
    import json

    from book.pages import model_label
    from book.pages import provenance_note as _provenance_note

    bench = json.loads((DOCS / "outputs" / "bench_08b.json").read_text())
    assert bench["model"] == "Qwen3.5-0.8B shapes, random bf16 weights"
    zh, en = _provenance_note(bench, "zh"), _provenance_note(bench, "en")
    assert "Qwen3.5-0.8B 的形状，随机 bf16 权重" in zh and "shapes" not in zh
    assert "Qwen3.5-0.8B shapes, random bf16 weights" in en
    untranslated = {}
    for path in sorted((DOCS / "outputs").glob("*.json")):
        model = json.loads(path.read_text())["model"]
        label = model_label({"model": model}, "zh")
        if label == model and not re.fullmatch(r"[\w./-]+", model):
            untranslated[path.name] = model
        assert model_label({"model": model}, "en") == model
    assert not untranslated, (
        f"model labels with no Chinese rendering (book/pages.py MODEL_ZH): {untranslated}"
    )
    assert model_label({"model": "Qwen/Qwen3.5-0.8B"}, "zh") == "Qwen/Qwen3.5-0.8B"


def test_zh_pages_show_no_space_between_chinese_lines(site):
    """In the built zh pages no paragraph keeps a line break between two Chinese characters: the
    chapters are joined as they are built, the lessons' markdown cells must be written joined
    (mkdocs-jupyter renders them without the book's hooks; book.cjk.join_cjk_lines joins a cell's
    lines)."""
    from book.cjk import CJK

    gaps = {}
    for page in PAGES:
        article = _html(site, "zh", page).split("<article", 1)[-1].split("</article>")[0]
        prose = re.sub(r"<pre.*?</pre>", "", article, flags=re.S)
        found = re.findall(f".{{0,10}}[{CJK}]\\s*\\n\\s*[{CJK}].{{0,10}}", prose)
        if found:
            gaps[page] = found[:3]
    assert not gaps, gaps


# ------------------------------------------------------------------------------ the bibliography
ARXIV = re.compile(r"arxiv\.org/(?:abs|pdf)/(\d{4}\.\d{4,5})")


def _cited_pages(lang):
    """{arXiv id: {pages citing it}} over the edition's pages and lessons, bibliography excluded."""
    cites = {}
    texts = {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted((DOCS / lang).glob("*.md"))
        if p.name != "bibliography.md"
    }
    for p in sorted((DOCS / lang / "lessons").glob("*.ipynb")):
        cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
        texts["lessons/" + p.name] = "\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
        )
    for name, text in texts.items():
        for m in ARXIV.finditer(text):
            cites.setdefault(m.group(1), set()).add(name)
    return cites


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_bibliography_lists_every_paper_a_page_cites_and_where(lang):
    """Every arXiv paper a page or lesson links is in the bibliography, whose entry links back to
    exactly the pages that cite it; the bibliography lists nothing no page cites."""
    bib = (DOCS / lang / "bibliography.md").read_text(encoding="utf-8")
    listed = {}
    for entry in re.split(r"\n(?=- )", bib):
        pages = set(re.findall(r"\]\(((?:lessons/)?[\w-]+\.(?:md|ipynb))\)", entry))
        for arxiv_id in ARXIV.findall(entry):
            listed[arxiv_id] = pages
    cites = _cited_pages(lang)
    problems = [
        f"{i}: cited by {sorted(p)}, not in the bibliography"
        for i, p in cites.items()
        if i not in listed
    ]
    problems += [
        f"{i}: cited by {sorted(cites[i])}, the bibliography says {sorted(listed[i])}"
        for i in cites
        if i in listed and cites[i] != listed[i]
    ]
    problems += [f"{i}: in the bibliography, cited by no page" for i in listed if i not in cites]
    assert not problems, "\n".join(sorted(problems))


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_figure_opens_full_size_on_a_tap(site, lang):
    """A figure is small on a phone: each chapter figure is a link to its own SVG, which the site
    serves, so a tap opens it full size."""
    seen = 0
    for page in PAGES:
        html = _html(site, lang, page)
        folder = (site / ("en" if lang == "en" else "") / page.rsplit(".", 1)[0]).resolve()
        for src in re.findall(r'<img[^>]*src="([^"]*figures/[^"]+\.svg)"', html):
            seen += 1
            assert re.search(
                rf'<a href="{re.escape(src)}"[^>]*>\s*<img[^>]*src="{re.escape(src)}"', html
            ), f"{lang}/{page}: {src} is not a link to itself"
            assert (folder / src).resolve().is_file(), f"{lang}/{page}: {src} is not served"
    assert seen >= 25, f"only {seen} figures found in the {lang} edition"
