"""The pages' macros, text in and text out: {{ runs }}, {{ output }}, {{ value }}, {{ figure }},
{{ tree }}, the provenance notes under outputs and figures, and the {{ tiny }} / {{ official }}
blocks whose words follow the provenance of an output (CONTRIBUTING.md). book/hooks.py calls them
for the site, book/notebooks.py for the notebooks; a page is anything with .file.src_uri and
.meta."""

import html
import json
import re
from pathlib import Path, PurePosixPath

import yaml
from mkdocs.exceptions import PluginError

from book.checkpoint import TINY

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MACRO = re.compile(r"\{\{\s*(\w+)(?:\((.*?)\))?\s*\}\}")

TEXT = {
    "zh": {
        "runs_title": "本章运行",
        "runs": "`{script}`，实测 {seconds} 秒（{model}，{device}，torch {torch}）",
        "kernels": "{isa} 内核",
        "tiny": "微型测试模型",
        "output_title": "输出",
        "tiny_figure": "微型测试模型的随机权重画出的图，不代表 Qwen3.5-0.8B",
        "measured": "实测：`{script}` · {model} · {machine} · {threads} 线程 · {date} · "
        "torch {torch} · {dtype}",
        "unofficial": "不是官方权重",
        "unofficial_note": "这份输出来自 {model}，不是 Qwen/Qwen3.5-0.8B 的官方权重。",
        "tiny_note": "这份输出来自**微型测试模型**（形状与官方一致但极小、权重随机），"
        "不是 Qwen3.5-0.8B。下载官方权重后运行 `make regen`，"
        "这里就换成真模型的结果。",
        "provenance": "来源：`{script}` · {model} · 权重 sha256 `{sha}` · torch {torch} · "
        "{device} · {dtype} · {seconds} 秒",
        "legend": "+ 本章新增 · ~ 本章修改 · 其余来自前面各章",
        "edit": "发现错误，或有更好的讲法？[在 GitHub 上编辑本页]({edit}) · [报告问题]({issue})",
    },
    "en": {
        "runs_title": "What this chapter runs",
        "runs": "`{script}`, measured {seconds} s ({model}, {device}, torch {torch})",
        "kernels": "{isa} kernels",
        "tiny": "tiny test model",
        "output_title": "Output",
        "tiny_figure": "drawn from the tiny test model's random weights, not Qwen3.5-0.8B",
        "measured": "Measured: `{script}` · {model} · {machine} · {threads} threads · {date} · "
        "torch {torch} · {dtype}",
        "unofficial": "not the official weights",
        "unofficial_note": "This output comes from {model}, "
        "not from the official Qwen/Qwen3.5-0.8B weights.",
        "tiny_note": "This output comes from the **tiny test model** "
        "(the official layout, tiny sizes, random weights), "
        "not from Qwen3.5-0.8B. Download the official weights and run `make regen` to see "
        "the real model's output here.",
        "provenance": "Provenance: `{script}` · {model} · weights sha256 `{sha}` · torch {torch} · "
        "{device} · {dtype} · {seconds} s",
        "legend": "+ new in this chapter · ~ changed in this chapter · "
        "the rest come from earlier chapters",
        "edit": "Found a mistake or a better way to say it? [Edit this page on GitHub]({edit}) · "
        "[Report an issue]({issue})",
    },
}


def lang_of(page):
    return (
        PurePosixPath(page.file.src_uri).parts[0]
        if page.file.src_uri.startswith(("zh/", "en/"))
        else "zh"
    )


def provenance(name):
    path = DOCS / "outputs" / f"{name}.json"
    if not path.is_file():
        raise PluginError(f"no output for {name}: run `python -m book.regen {name}`")
    return json.loads(path.read_text())


# The model labels runs record (scripts/bench.py, book/regen.py), in the Chinese edition's words. A
# label not listed here (a plain model name such as "Qwen/Qwen3.5-0.8B", or a folder and its sha256)
# is shown as recorded; the tiny test model is named by each edition's TEXT["tiny"].
MODEL_ZH = {
    "Qwen3.5-0.8B shapes, random bf16 weights": "Qwen3.5-0.8B 的形状，随机 bf16 权重",
    "Qwen/Qwen3.5-0.8B config.json (no weights)": "Qwen/Qwen3.5-0.8B 的 config.json（不含权重）",
    "tiny random reference models (tests/reference.py)": "微型随机参考模型（tests/reference.py）",
    "a small Qwen3.5-architecture model trained from scratch here": (
        "在这里从零训练的小型 Qwen3.5 结构模型"
    ),
    "the 0.8B shapes, random weights": "0.8B 的形状，随机权重",
    "a small Qwen3.5-architecture model trained from scratch here, with an MTP head": (
        "在这里从零训练的小型 Qwen3.5 结构模型，带一个 MTP 头"
    ),
    "random weights: a small Qwen3.5, the 0.8B DeltaNet layer's shapes, the 0.8B model": (
        "随机权重：一个小型 Qwen3.5、0.8B 的 DeltaNet 层的形状、0.8B 模型"
    ),
}


def model_label(p, lang):
    """The run's model as the edition shows it: the recorded label, or its Chinese rendering in the
    zh edition."""
    if p["model"] == TINY:
        return TEXT[lang]["tiny"]
    return MODEL_ZH.get(p["model"], p["model"]) if lang == "zh" else p["model"]


# ATen's CPU capabilities (book/regen.py records the one a run's values came from), as a reader
# knows the instruction sets; "DEFAULT" is its scalar loops, which the libraries ran with SSE4
ISA = {"DEFAULT": "SSE4", "AVX2": "AVX2", "AVX512": "AVX-512"}


def device_label(p, lang):
    """The run's device, with the kernels its values came from where the provenance records them:
    cpu (x86_64, 1 thread, AVX2 kernels)."""
    kernels = p.get("kernels")
    if not kernels or not p["device"].endswith(")"):
        return p["device"]
    isa = ISA.get(kernels["aten"], kernels["aten"])
    return f"{p['device'][:-1]}, {TEXT[lang]['kernels'].format(isa=isa)})"


def _fmt(p, lang):
    return {
        "script": p["script"],
        "seconds": p["seconds"],
        "device": device_label(p, lang),
        "torch": p["torch"],
        "dtype": p["dtype"],
        "sha": p["weights_sha256"][:12],
        "model": model_label(p, lang),
    }


def chapters():
    """{page file name: front matter} for every page of the default edition, read straight from
    disk."""
    pages = {}
    for md in sorted((DOCS / "zh").rglob("*.md")):
        text = md.read_text()
        if text.startswith("---\n"):
            pages[md.relative_to(DOCS / "zh").as_posix()] = (
                yaml.safe_load(text.split("---\n", 2)[1]) or {}
            )
    return pages


def tree(meta):
    """The repository's files as of this chapter: earlier chapters' files, + new ones, ~ changed
    ones."""
    here = meta["chapter"]
    new, changed = set(meta.get("new", [])), set(meta.get("changed", []))
    files = sorted(
        {
            f
            for m in chapters().values()
            if "chapter" in m and m["chapter"] <= here
            for f in m.get("new", [])
        },
        key=lambda f: (f.count("/"), f.split("/")[0], f),
    )
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
    """Is position `pos` of a markdown line inside an inline code span (an odd number of backticks
    before it)?"""
    return line[:pos].count("`") % 2 == 1


def macro(page, lang, match, in_code_span=False):
    name, args = match.group(1), match.group(2)
    args = [a.strip().strip("'\"") for a in args.split(",", 1)] if args else []
    t = TEXT[lang]
    if name == "runs":  # a box of its own: the macro stands alone on its line
        line = t["runs"].format(**_fmt(provenance(args[0]), lang))
        return f'!!! abstract "{t["runs_title"]}"\n    {line}\n'
    if name == "value":
        values = provenance(args[0])["values"]
        if len(args) < 2 or args[1] not in values:
            raise PluginError(
                f"{page.file.src_uri}: {args[0]} recorded no value {args[1:]!r} "
                f"(has {sorted(values)})"
            )
        if in_code_span:  # inside `…` markdown shows text as it is: only a backtick breaks it
            if "`" in str(values[args[1]]):
                raise PluginError(
                    f"{page.file.src_uri}: {args[0]}'s {args[1]} contains a backtick; "
                    f"take the value out of the code span"
                )
            return str(values[args[1]])
        return as_text(values[args[1]])
    if name == "output":
        p = provenance(args[0])
        return output_block(
            (DOCS / "outputs" / f"{args[0]}.txt").read_text(), p, lang
        ) + provenance_note(p, lang)
    if name == "figure":
        fig = f"figures/{args[0]}_{lang}.svg"
        if not (DOCS / fig).is_file():
            raise PluginError(f"{page.file.src_uri}: no figure {fig}: run `python -m book.regen`")
        up = "../" * (len(PurePosixPath(page.file.src_uri).parts) - 1)
        alt = as_text(args[1] if len(args) > 1 else args[0]).replace("[", "\\[").replace("]", "\\]")
        # the image links to itself: on a phone a tap opens the SVG full size, to zoom in
        return f"[![{alt}]({up}{fig})]({up}{fig})\n\n" + provenance_note(
            figure_provenance(args[0]), lang, figure=True
        )
    if name == "tree":
        if "chapter" not in page.meta:
            raise PluginError(
                f"{page.file.src_uri}: {{{{ tree }}}} needs `chapter:` in the front matter"
            )
        return f"```text\n{tree(page.meta)}\n```\n\n<small>{t['legend']}</small>"
    raise PluginError(f"{page.file.src_uri}: unknown macro {match.group(0)}")


# ---------------------------------------------------------------- outputs are text: they never
# become markup
SNIPPET = re.compile(r"(-{1,}8<-{1,})")  # pymdownx.snippets would include a file named after it


def as_text(value):
    """A recorded value as literal text in prose: no HTML, no markdown emphasis, no macro, no
    snippet."""
    text = html.escape(str(value), quote=False)
    text = re.sub(r"([\\`*_{}\[\]<>#|~])", r"\\\1", text)
    return SNIPPET.sub(lambda m: m.group(1).replace("8<", "8&lt;"), text)


def output_block(text, p, lang):
    """A printed output as a fenced text block, whatever it contains: the fence is longer than any
    run of backticks inside, so a ``` line cannot end it; inside a fence HTML and {{ }} are shown,
    not run. Its class `book-output` lets a long line wrap on a wide screen (extra.css), where
    a code block scrolls."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = "\n".join(
        ";" + line if SNIPPET.search(line) and line.lstrip().startswith(("-", ";")) else line
        for line in text.rstrip().split("\n")
    )
    title = TEXT[lang]["output_title"]
    return f'{fence}text {{.book-output title="{title}"}}\n{body}\n{fence}\n\n'


def figure_provenance(name):
    """The provenance of the run that drew figure `name` (the output whose json lists it)."""
    for path in sorted((DOCS / "outputs").glob("*.json")):
        p = json.loads(path.read_text())
        if name in p.get("figures", []):
            return p
    raise PluginError(f"no output lists the figure {name}: run `python -m book.regen`")


def is_tiny(p):
    return p["model"] == TINY


def provenance_note(p, lang, figure=False):
    t = TEXT[lang]
    note = f"<small>{t['provenance'].format(**_fmt(p, lang))}</small>\n"
    if p.get("measured"):
        measured = t["measured"].format(
            **_fmt(p, lang),
            machine=html.escape(str(p.get("machine", "?"))),
            threads=p.get("threads", "?"),
            date=p.get("date", "?"),
        )
        note = f"<small>{measured}</small>\n"
    if is_tiny(p) and figure:  # under a figure: a label, not a second warning box
        note = note.replace(
            "</small>", f' · <strong class="tiny-label">⚠ {t["tiny_figure"]}</strong></small>'
        )
    elif is_tiny(p):
        note += f'\n!!! warning "{t["tiny"]}"\n    {t["tiny_note"]}\n'
    elif not p.get("official", True) and not p.get("measured"):
        said = t["unofficial_note"].format(model=html.escape(model_label(p, lang)))
        note += f'\n!!! warning "{t["unofficial"]}"\n    {said}\n'
    return note


BLOCK = re.compile(r"^\s*\{\{\s*(tiny|official)\((.*?)\)\s*\}\}\s*$")
END = re.compile(r"^\s*\{\{\s*end\s*\}\}\s*$")


def conditional_blocks(lines, page):
    """Keep `{{ tiny("chNN") }} … {{ end }}` only while chNN's output is the tiny model's, and
    `{{ official("chNN") }} … {{ end }}` only once it is the official weights': interpretation
    follows provenance."""
    out, keep, opened = [], True, None
    for n, line in enumerate(lines, 1):
        m = BLOCK.match(line)
        if m:
            if opened:
                raise PluginError(
                    f"{page.file.src_uri}:{n}: {{{{ {m.group(1)} }}}} inside another block "
                    f"(line {opened})"
                )
            p = provenance(m.group(2).strip().strip("'\""))
            keep = (
                is_tiny(p) if m.group(1) == "tiny" else bool(p.get("official")) and not is_tiny(p)
            )
            opened = n
            continue
        if END.match(line):
            if not opened:
                raise PluginError(
                    f"{page.file.src_uri}:{n}: {{{{ end }}}} without an opening block"
                )
            keep, opened = True, None
            continue
        if keep:
            out.append(line)
    if opened:
        raise PluginError(f"{page.file.src_uri}:{opened}: block without {{{{ end }}}}")
    return out


def render(markdown, page):
    """A chapter page's markdown as the site shows it: blocks kept or dropped by provenance, the zh
    edition's line breaks between Chinese characters joined, the macros expanded outside code."""
    from book.cjk import join_cjk_lines

    lang = lang_of(page)
    lines = conditional_blocks(markdown.split("\n"), page)
    if lang == "zh":
        lines = join_cjk_lines(lines)
    out, in_code = [], False
    for line in lines:  # macros outside code blocks only
        if line.lstrip().startswith("```"):
            in_code = not in_code
        out.append(
            line
            if in_code
            else MACRO.sub(
                lambda m, line=line: macro(page, lang, m, in_span(line, m.start())), line
            )
        )
    return "\n".join(out)
