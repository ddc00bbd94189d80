"""The site: both editions have the same pages and code, every repository file belongs to a chapter, and
`mkdocs build --strict` (notebooks executed) is clean with the language switcher landing on the twin page."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from book.hooks import MACRO, chapters

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS / "zh").as_posix() for p in (DOCS / "zh").rglob("*") if p.suffix in (".md", ".ipynb"))


def test_every_page_exists_in_both_editions():
    en = sorted(p.relative_to(DOCS / "en").as_posix() for p in (DOCS / "en").rglob("*") if p.suffix in (".md", ".ipynb"))
    assert PAGES == en, f"only in zh: {set(PAGES) - set(en)}; only in en: {set(en) - set(PAGES)}"


def _parts(text):
    """What must be equal in both editions: front matter, included code, and the outputs/figures used."""
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
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # BaseLoader: skip !ENV tags
    en = next(lang for lang in next(p for p in config["plugins"] if "i18n" in p)["i18n"]["languages"]
              if lang["locale"] == "en")
    sections = [next(iter(item)) for item in config["nav"] if isinstance(item, dict)]
    missing = [s for s in sections if s not in en["nav_translations"]]
    assert not missing, f"nav titles with no English translation: {missing}"
    listed = re.findall(r"([\w/.-]+\.(?:md|ipynb))", (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1])
    assert sorted(listed) == PAGES, "every page is in the nav, and the nav names only pages that exist"


def test_every_file_belongs_to_one_chapter():
    owners = {}
    for page, meta in chapters().items():
        for f in meta.get("new", []):
            owners.setdefault(f, []).append(page)
    files = sorted(p.relative_to(ROOT).as_posix() for d in ("qwen", "scripts") for p in (ROOT / d).glob("*.py"))
    assert [f for f in files if f not in owners] == [], "files no chapter introduces"
    assert {f: o for f, o in owners.items() if len(o) > 1} == {}, "files introduced twice"
    assert [f for f in owners if not (ROOT / f).is_file()] == [], "chapters list files that do not exist"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "BOOK_EXECUTE_NOTEBOOKS": "true", "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    print(f"mkdocs build --strict (notebooks executed): {time.perf_counter() - start:.1f} s")
    assert proc.returncode == 0, proc.stderr[-5000:]
    return out


def _html(site, lang, page):
    stem = page.rsplit(".", 1)[0]
    folder = site / ("en" if lang == "en" else "") / ("" if stem == "index" else stem)
    return (folder / "index.html").read_text()


@pytest.mark.parametrize("page", PAGES)
def test_built_page_in_both_editions_with_switcher_to_its_twin(site, page):
    zh, en = _html(site, "zh", page), _html(site, "en", page)
    assert '<html lang="zh"' in zh and '<html lang="en"' in en
    stem = page.rsplit(".", 1)[0]
    twin = "en/" if stem == "index" else f"en/{stem}/"
    assert re.search(rf'href="[^"]*{re.escape(twin)}"\s+hreflang="en"', zh), "the switcher does not land on the twin"
    assert "--8<--" not in zh and "{{" not in zh.split("<article", 1)[-1].split("</article>")[0]


def test_chinese_search_index_is_segmented(site):
    index = (site / "search" / "search_index.json").read_text()
    assert "\\u200b" in index or "\u200b" in index, "jieba did not segment the Chinese text"


def test_each_edition_searches_its_own_index(site):
    """One index per edition, in its own language: English pages never answer a Chinese search and the other way
    round, and no stemmer (Material searches words as prefixes, which never match a stem)."""
    import json

    zh = json.loads((site / "search" / "search_index.json").read_text())
    en = json.loads((site / "en" / "search" / "search_index.json").read_text())
    assert zh["config"]["lang"] == ["zh"] and en["config"]["lang"] == ["en"]
    assert "stemmer" not in zh["config"]["pipeline"] + en["config"]["pipeline"]
    assert not [d["location"] for d in zh["docs"] if d["location"].startswith("en/")], "English pages in zh search"
    assert {d["location"].split("/")[0] for d in zh["docs"]} >= {"02-embedding"}
    assert len({d["location"].split("#")[0] for d in en["docs"]}) == len({d["location"].split("#")[0] for d in zh["docs"]})
    raw = [d["location"] for d in zh["docs"] + en["docs"] if "\\(" in d["text"] or "\\[" in d["text"]]
    assert not raw, f"search snippets with raw TeX delimiters: {raw[:5]}"


def test_each_edition_has_its_own_404_page(site):
    assert '<html lang="zh"' in (site / "404.html").read_text()
    assert '<html lang="en"' in (site / "en" / "404.html").read_text()


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_included_code_is_titled_with_its_file(lang):
    """A block of included code says which file it comes from (```python title="qwen/embedding.py")."""
    untitled = []
    for page in sorted((DOCS / lang).rglob("*.md")):
        lines = page.read_text().split("\n")
        for i, line in enumerate(lines[:-1]):
            include = re.match(r'\s*--8<--\s+"([^":]+)', lines[i + 1])
            if include and re.match(r"\s*```python", line) and f'title="{include.group(1)}"' not in line:
                untitled.append(f"{page.relative_to(DOCS)}:{i + 1}: {line.strip()} (include {include.group(1)})")
    assert not untitled, "\n".join(untitled)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_what_the_chapter_runs_is_one_box(lang):
    """{{ runs(...) }} expands into a box with its own title: it stands alone on its line, said once."""
    bad = [f"{p.relative_to(DOCS)}: {line.strip()}" for p in sorted((DOCS / lang).rglob("*.md"))
           for line in p.read_text().split("\n") if "{{ runs(" in line and not re.fullmatch(r"\{\{ runs\([^)]*\) \}\}", line.strip())]
    assert not bad, "\n".join(bad)
