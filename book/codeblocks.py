"""Run every ```python and ```bash block of both editions (once where both have the same code),
after expanding the --8<-- snippets they include.

    python -m book.codeblocks [--jobs N] [pytest args]

The pages are shared out among N pytest processes (default: one per core), each on one thread; a
page's blocks stay together and in order, in one process.

pytest-codeblocks does not expand snippets, so each page is first expanded with pymdownx's own
snippet preprocessor into a scratch copy of docs/; fences like ```python title="x" become plain
```python so that they run too. The blocks run from the repository root, with $QWEN_MODEL at the
tiny test model.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import markdown
from pymdownx.snippets import SnippetExtension

from book import tiny
from book.cores import available_cores

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(\s*```+)(python|bash|sh)\b[^\n`]*$")


# a "Run it" block that runs a chapter script: `python -m book.regen --check` runs the same script
# (tests/test_book.py), so the code-block run leaves it out rather than run the chapter twice
RUN_SCRIPT = re.compile(r"^\s*```+bash\s*\n\s*python scripts/ch\d\d_\w+\.py\s*\n\s*```+\s*$", re.M)
SKIP_RUN = '<!--pytest.mark.skip(reason="python -m book.regen --check runs this chapter script")-->'
# and the listing of a whole chapter script (its "Run it" section) is the same script once more
LISTING = re.compile(r'^\s*```+python\s+title="(scripts/ch\d\d_\w+\.py)"\s*$')


BLOCK = re.compile(r"^([ \t]*```+)(?:python|bash|sh)\b[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)


def code_of(text):
    """The python and bash blocks of a page, the checks' language argument read as zh."""
    return [re.sub(r'\blang="en"', 'lang="zh"', m.group(2)) for m in BLOCK.finditer(text)]


def skip_listings(lines):
    """The page's lines with SKIP_RUN before each block that lists a whole chapter script."""
    out = []
    for i, line in enumerate(lines):
        m = LISTING.match(line)
        if m and i + 1 < len(lines) and lines[i + 1].strip() == f'--8<-- "{m.group(1)}"':
            out.append(SKIP_RUN)
        out.append(line)
    return out


def expand(src, dest, once=False):
    """Copy every page of docs/ to dest with snippets expanded and fence info strings reduced to the
    language. once=True (the test run): an English page whose blocks are its Chinese twin's (but for
    the checks' language) is left out, as the same code would run twice (tests/test_site.py holds
    the editions' code equal), and so is a block that only runs or lists a whole chapter script
    (regen --check runs it)."""
    md = markdown.Markdown(
        extensions=[
            SnippetExtension(base_path=[str(ROOT)], check_paths=True, dedent_subsections=True)
        ]
    )
    snippets = md.preprocessors["snippet"]
    pages, expanded = sorted(src.rglob("*.md")), {}
    for page in pages:
        lines = page.read_text().split("\n")
        if once:
            lines = skip_listings(lines)
        expanded[page.relative_to(src)] = snippets.run(lines)
    written = []
    for rel, lines in expanded.items():
        twin = expanded.get(Path("zh", *rel.parts[1:])) if rel.parts[0] == "en" else None
        if once and twin is not None and code_of("\n".join(lines)) == code_of("\n".join(twin)):
            continue
        written.append(rel)
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join(FENCE.sub(r"\1\2", line) for line in lines) + "\n"
        if once:
            text = RUN_SCRIPT.sub(lambda m: SKIP_RUN + "\n" + m.group(0), text)
        out.write_text(text)
    return written


# Blocks run in one Python per process, page after page; a reader starts each page in a fresh one.
# So the global state a page may change (autograd switched off, as chapters 1-16 do) is reset when
# the next page begins, whichever pages share a process.
FRESH_PAGE = """
import pytest

_page = [None]


def pytest_runtest_setup(item):
    if item.path != _page[0]:
        _page[0] = item.path
        import torch

        torch.set_grad_enabled(True)
"""


def split_jobs(argv):
    """(jobs, the other arguments): `--jobs N` taken out of argv; default one per core."""
    argv, jobs = list(argv), None
    if "--jobs" in argv:
        i = argv.index("--jobs")
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if not value.isdigit() or int(value) < 1:
            raise SystemExit(f"--jobs must be a whole number of processes >= 1, not {value!r}")
        jobs = int(value)
        del argv[i : i + 2]
    return jobs or available_cores(), argv


def shares(pages, jobs):
    """The pages dealt out to `jobs` processes in turn (each stage's chapters spread out)."""
    return [s for s in (pages[i::jobs] for i in range(jobs)) if s]


def killed(code, who, pages):
    """What to print for a pytest process that a signal ended (returncode -signal)."""
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = " (most likely the machine ran out of memory)" if -code == signal.SIGKILL else ""
    return f"\n{who} was killed by {name}{why} while running one of these pages: " + ", ".join(
        str(p) for p in pages
    )


def main(argv=None):
    jobs, argv = split_jobs(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="codeblocks-") as tmp:
        pages = expand(ROOT / "docs", Path(tmp) / "docs", once=True)
        (Path(tmp) / "conftest.py").write_text(FRESH_PAGE)
        print(
            f"expanded {len(pages)} pages into {tmp} (English pages whose code is their Chinese "
            "twin's are run once, as the Chinese page)"
        )
        env = {
            **os.environ,
            "QWEN_MODEL": str(tiny.path()),
            "HF_HUB_OFFLINE": "1",
            "MPLBACKEND": "Agg",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        if jobs > 1:  # each process on one thread: the cores are shared among the processes
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        groups = shares(sorted(pages), jobs)
        procs = []
        for i, group in enumerate(groups):
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
                *(str(Path(tmp) / "docs" / rel) for rel in group),
                *argv,
            ]
            out = {"BOOK_OUT": str(Path(tmp) / f"out{i}")}
            if len(groups) == 1:
                procs.append(subprocess.Popen(cmd, cwd=ROOT, env={**env, **out}))
            else:
                procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=ROOT,
                        env={**env, **out},
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                    )
                )
        if len(procs) == 1:
            code = procs[0].wait()
            if code < 0:
                print(killed(code, "the process", groups[0]))
            return code if code >= 0 else 1
        outputs = [p.communicate()[0] for p in procs]
        totals = {}
        for text in outputs:  # each process's report whole, then one summary line for all
            lines = text.rstrip().splitlines()
            counts = re.findall(
                r"(\d+) (passed|failed|skipped|errors?)", lines[-1] if lines else ""
            )
            print("\n".join(lines[:-1] if counts else lines))  # a killed process has no summary
            for n, what in counts:
                totals[what] = totals.get(what, 0) + int(n)
        codes = [p.returncode for p in procs]
        for i, (code, group) in enumerate(zip(codes, groups)):
            if code < 0:  # killed: its report stops mid-line, so say which process and why
                print(killed(code, f"process {i + 1} of {len(procs)}", group))
        print(
            ", ".join(f"{n} {what}" for what, n in totals.items()) + f" in {len(procs)} processes"
        )
        return next((c if c > 0 else 1 for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
