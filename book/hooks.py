"""mkdocs hooks: the page macros of CONTRIBUTING.md, edit/report links, and notebooks under static-i18n."""
import json
import re
from pathlib import Path, PurePosixPath

import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MACRO = re.compile(r"\{\{\s*(\w+)(?:\((.*?)\))?\s*\}\}")

TEXT = {
    "zh": {
        "runs": "运行 `{script}`，实测 {seconds} 秒（{model}，{device}，torch {torch}）",
        "tiny": "微型测试模型",
        "tiny_note": "这份输出来自**微型测试模型**（形状与官方一致但极小、权重随机），不是 Qwen3.5-0.8B。"
                     "下载官方权重后运行 `python -m book.regen`，这里就换成真模型的结果。",
        "provenance": "来源：`{script}` · {model} · 权重 sha256 `{sha}` · torch {torch} · {device} · {dtype} · {seconds} 秒",
        "legend": "+ 本章新增 · ~ 本章修改 · 其余来自前面各章",
        "edit": "发现错误，或有更好的讲法？[在 GitHub 上编辑本页]({edit}) · [报告问题]({issue})",
    },
    "en": {
        "runs": "Runs `{script}`, measured {seconds} s ({model}, {device}, torch {torch})",
        "tiny": "tiny test model",
        "tiny_note": "This output comes from the **tiny test model** (the official layout, tiny sizes, random weights), "
                     "not from Qwen3.5-0.8B. Download the official weights and run `python -m book.regen` to see "
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


def _fmt(p, lang):
    t = TEXT[lang]
    return {"script": p["script"], "seconds": p["seconds"], "device": p["device"], "torch": p["torch"],
            "dtype": p["dtype"], "sha": p["weights_sha256"][:12],
            "model": t["tiny"] if p["model"] == "tiny test model" else p["model"]}


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


def _macro(page, lang, match):
    name, args = match.group(1), match.group(2)
    args = [a.strip().strip("'\"") for a in args.split(",", 1)] if args else []
    t = TEXT[lang]
    if name == "runs":
        return t["runs"].format(**_fmt(_provenance(args[0]), lang))
    if name == "value":
        values = _provenance(args[0])["values"]
        if args[1] not in values:
            raise PluginError(f"{page.file.src_uri}: {args[0]} recorded no value {args[1]!r} (has {sorted(values)})")
        return str(values[args[1]])
    if name == "output":
        p = _provenance(args[0])
        text = (DOCS / "outputs" / f"{args[0]}.txt").read_text()
        block = f"```text\n{text.rstrip()}\n```\n\n<small>{t['provenance'].format(**_fmt(p, lang))}</small>\n"
        if p["model"] == "tiny test model":
            block += f"\n!!! warning \"{t['tiny']}\"\n    {t['tiny_note']}\n"
        return block
    if name == "figure":
        fig = f"figures/{args[0]}_{lang}.svg"
        if not (DOCS / fig).is_file():
            raise PluginError(f"{page.file.src_uri}: no figure {fig}: run `python -m book.regen`")
        up = "../" * (len(PurePosixPath(page.file.src_uri).parts) - 1)
        return f"![{args[1] if len(args) > 1 else args[0]}]({up}{fig})"
    if name == "tree":
        if "chapter" not in page.meta:
            raise PluginError(f"{page.file.src_uri}: {{{{ tree }}}} needs `chapter:` in the front matter")
        return f"```text\n{tree(page.meta)}\n```\n\n<small>{t['legend']}</small>"
    raise PluginError(f"{page.file.src_uri}: unknown macro {match.group(0)}")


def on_page_markdown(markdown, page, config, files):
    lang = _lang(page)
    if page.file.src_uri.endswith(".ipynb"):
        return markdown
    out, in_code = [], False
    for line in markdown.split("\n"):            # macros outside code blocks only
        if line.lstrip().startswith("```"):
            in_code = not in_code
        out.append(line if in_code else MACRO.sub(lambda m: _macro(page, lang, m), line))
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
