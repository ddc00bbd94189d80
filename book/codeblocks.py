"""Run every ```python and ```bash block of both editions, after expanding the --8<-- snippets they
include.

    python -m book.codeblocks [pytest args]

pytest-codeblocks does not expand snippets, so each page is first expanded with pymdownx's own
snippet preprocessor into a scratch copy of docs/; fences like ```python title="x" become plain
```python so that they run too. The blocks run from the repository root, with $QWEN_MODEL at the
tiny test model.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import markdown
from pymdownx.snippets import SnippetExtension

from book import tiny

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(\s*```+)(python|bash|sh)\b[^\n`]*$")


def expand(src, dest):
    """Copy every page of docs/ to dest with snippets expanded and fence info strings reduced to the
    language."""
    md = markdown.Markdown(
        extensions=[
            SnippetExtension(base_path=[str(ROOT)], check_paths=True, dedent_subsections=True)
        ]
    )
    snippets = md.preprocessors["snippet"]
    pages = sorted(src.rglob("*.md"))
    for page in pages:
        lines = snippets.run(page.read_text().split("\n"))
        out = dest / page.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(FENCE.sub(r"\1\2", line) for line in lines) + "\n")
    return pages


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with tempfile.TemporaryDirectory(prefix="codeblocks-") as tmp:
        pages = expand(ROOT / "docs", Path(tmp) / "docs")
        print(f"expanded {len(pages)} pages into {tmp}")
        env = {
            **os.environ,
            "QWEN_MODEL": str(tiny.path()),
            "BOOK_OUT": str(Path(tmp) / "out"),
            "HF_HUB_OFFLINE": "1",
            "MPLBACKEND": "Agg",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "--codeblocks",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-q",
            "--rootdir",
            tmp,
            str(Path(tmp) / "docs"),
            *argv,
        ]
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
