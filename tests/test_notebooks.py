"""The chapter notebooks: generated from the pages, current, and runnable top to bottom on the tiny
test model."""

import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from book import notebooks, pages, tiny
from book.notebooks import NOTEBOOKS, ROOT

PAGES = notebooks.chapter_pages()
RUN_SCRIPT = re.compile(r"%%bash\npython scripts/ch\d\d_\w+\.py")
CHAPTERS = sorted({name for _, name in PAGES})
# per notebook (about 5 to 40 s each on an idle core; generous for a busy CI runner)
MAX_SECONDS = 240


@pytest.fixture(scope="module")
def generated():
    return notebooks.build_all()


def code_of(text, lang=None):
    """The code cells; with lang, the edition's language argument (the checks' messages) read as
    zh."""
    cells = [c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code"]
    return [re.sub(rf'\blang="{lang}"', 'lang="zh"', c) for c in cells] if lang else cells


def test_every_chapter_page_of_both_editions_has_a_notebook(generated):
    assert {p.relative_to(NOTEBOOKS).as_posix() for p in generated} == {
        f"{lang}/{Path(name).stem}.ipynb" for lang in notebooks.LANGS for name in CHAPTERS
    }
    assert len(CHAPTERS) >= 12


def test_the_committed_notebooks_are_current(generated):
    stale = [
        p.relative_to(ROOT).as_posix()
        for p, text in generated.items()
        if not p.is_file() or p.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"out of date with their pages: {stale}; run `python -m book.notebooks`"
    assert notebooks.main(["--check"]) == 0


def test_regenerating_is_byte_stable(generated):
    assert notebooks.build_all() == generated


@pytest.mark.parametrize("name", ["02-embedding.md"])
def test_a_notebook_holds_the_pages_prose_code_and_stored_output(name, generated):
    for lang in notebooks.LANGS:
        nb = nbformat.reads(generated[notebooks.notebook_path(lang, name)], as_version=4)
        page = (ROOT / "docs" / lang / name).read_text(encoding="utf-8")
        title = next(line for line in page.splitlines() if line.startswith("# "))
        assert nb.cells[0].source.startswith(title)
        assert (
            "colab.research.google.com/github/transformer-by-hand/transformer-by-hand/blob/main/notebooks/"
            f"{lang}/02-embedding.ipynb" in nb.cells[0].source
        )
        assert '"git", "clone"' in nb.cells[1].source and "find_model" in nb.cells[1].source
        sources = "\n".join(c.source for c in nb.cells)
        assert "{{" not in sources and "--8<--" not in sources  # macros and snippets expanded
        assert (ROOT / "qwen" / "embedding.py").read_text().strip() in sources
        stored = (ROOT / "docs" / "outputs" / "ch02_embedding.txt").read_text()
        script = (ROOT / "scripts" / "ch02_embedding.py").read_text().strip()
        runs = [c for c in nb.cells if c.cell_type == "code" and c.source == script]
        # the script's cell shows its output
        assert len(runs) == 1 and runs[0].outputs[0]["text"] == stored
        # run once
        assert not any("%%bash" in c.source and "ch02_embedding.py" in c.source for c in nb.cells)


def test_a_skipped_block_stays_text():
    nb = notebooks.build(
        "en",
        "x.md",
        "---\nchapter: 1\n---\n# 1. X\n\n"
        '<!--pytest.mark.skip(reason="needs the hub")-->\n```bash\nhf download x\n```\n'
        '\n```python title="a.py"\nprint(1)\n```\n',
    )
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code[1:] == ["print(1)"]
    assert (
        "```bash\nhf download x\n```" in nb.cells[-2].source
        and "needs the hub" in nb.cells[-2].source
    )


def test_an_admonition_is_opened_up_so_its_code_runs():
    nb = notebooks.build(
        "en",
        "x.md",
        '---\nchapter: 1\n---\n# 1. X\n\n!!! tip "Try"\n    Here:\n\n'
        "    ```python\n    x = 1\n    ```\n",
    )
    assert [c.source for c in nb.cells if c.cell_type == "code"][1:] == ["x = 1"]
    assert "**Try**" in nb.cells[-2].source and "Here:" in nb.cells[-2].source


def test_a_collapsed_solution_stays_collapsed_and_is_not_run():
    """ "Run all" runs the reader's attempt; the solution under it is a collapsed text cell (the
    page tests run the solutions)."""
    nb = notebooks.build(
        "en",
        "x.md",
        '---\nchapter: 1\n---\n# 1. X\n\n```python\ny = TODO("a hint")\n```\n\n'
        '??? success "Solution"\n    Here:\n\n    ```python\n    y = 1\n    ```\n\nAfter.\n',
    )
    code = [c.source for c in nb.cells if c.cell_type == "code"][1:]
    assert code == ['y = TODO("a hint")']
    solution = nb.cells[-2]
    assert solution.cell_type == "markdown" and solution.source.startswith(
        "<details><summary><b>Solution</b></summary>"
    )
    assert "```python\ny = 1\n```" in solution.source and solution.source.endswith("</details>")
    assert nb.cells[-1].source == "After."


@pytest.mark.parametrize("lang", notebooks.LANGS)
def test_no_chapter_notebook_runs_a_solution(lang, generated):
    for path, text in generated.items():
        if path.parent.name != lang:
            continue
        nb = nbformat.reads(text, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert "--8<--" not in cell.source and "<details>" not in cell.source
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        solutions = [c for c in nb.cells if c.source.startswith("<details>")]
        # every exercise's check is called once in code (the attempt) and once in a collapsed cell
        for cell in solutions:
            for call in re.findall(r"^(check_\w+)\(", cell.source, re.M):
                assert code.count(f"\n{call}(") + code.startswith(f"{call}(") == 1, (path, call)


def test_a_prose_admonition_becomes_a_quote():
    nb = notebooks.build(
        "en", "x.md", '---\nchapter: 1\n---\n# 1. X\n\n!!! note "Why"\n    Because.\n\nAfter.\n'
    )
    assert "> **Why**\n>\n> Because." in nb.cells[-1].source and "After." in nb.cells[-1].source


def test_the_output_follows_its_script_with_where_it_comes_from(generated):
    nb = nbformat.reads(generated[notebooks.notebook_path("en", "02-embedding.md")], as_version=4)
    i = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.outputs)
    after = nb.cells[i + 1].source
    assert "python scripts/ch02_embedding.py" in after and "scripts/ch02_embedding.py" in after
    if pages.provenance("ch02_embedding")["model"] == "tiny test model":
        assert "tiny test model" in after  # the label the page carries, carried over


@pytest.mark.parametrize("lang", notebooks.LANGS)
@pytest.mark.parametrize("name", CHAPTERS)
def test_the_notebook_runs_top_to_bottom_on_the_tiny_model(name, lang, tmp_path):
    path, twin = notebooks.notebook_path(lang, name), notebooks.notebook_path("zh", name)
    if lang != "zh" and code_of(path.read_text(encoding="utf-8"), lang) == code_of(
        twin.read_text(encoding="utf-8")
    ):
        pytest.skip(
            f"the same code cells as zh/{twin.name} (but for the checks' message language), which "
            "runs"
        )
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # the chapter script itself: `regen --check` runs it (test_book.py)
        if cell.cell_type == "code" and RUN_SCRIPT.fullmatch(cell.source.strip()):
            cell.source = f"# {cell.source.splitlines()[-1]}: run by python -m book.regen --check"
    env = {
        **os.environ,
        "QWEN_MODEL": str(tiny.path()),
        "HF_HUB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "BOOK_OUT": str(tmp_path),
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute(env=env)
    seconds = time.perf_counter() - start
    setup = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    # it found the repository and the tiny model
    assert "weights:" in setup and str(tiny.path()) in setup
    assert seconds < MAX_SECONDS, f"{path.name} took {seconds:.0f} s"


COLAB_CHECK = """
import json, qwen
print("COLAB:" + json.dumps({"cwd": os.getcwd(), "root": str(ROOT), "qwen": qwen.__file__}))
"""


def test_the_first_cell_clones_and_installs_the_book_as_in_colab(tmp_path):
    """The first cell run outside any clone, as in Colab: it clones this repository (a local clone
    stands in for GitHub) and installs it into a fresh environment (offline: the packages it names
    come from the test environment), then works from the clone, where `import qwen` finds the
    installed checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the book")
    setup = nbformat.read(notebooks.notebook_path("en", CHAPTERS[0]), as_version=4).cells[1].source
    assert '"git", "clone"' in setup and "BOOK_REPO" in setup

    # a throwaway environment that sees this one's packages (a path line, so its editable install is
    # not active)
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(own, "book-test-parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    colab = tmp_path / "content"  # Colab's working folder: no clone above it
    colab.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env.update(
        BOOK_REPO=ROOT.as_uri(),
        BOOK_PIP_OPTIONS="--no-index --no-deps --no-build-isolation",
        QWEN_MODEL=str(tiny.path()),
        HF_HUB_OFFLINE="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}",
    )
    run = subprocess.run(
        [str(python), "-c", setup + COLAB_CHECK],
        cwd=colab,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    clone = colab / notebooks._repo()[1]  # the folder the first cell clones into
    state = json.loads(run.stdout.split("COLAB:")[1].splitlines()[0])
    assert (clone / ".git").is_dir() and (clone / "qwen" / "weights.py").is_file()
    # the chapter's relative paths start here
    assert state["cwd"] == state["root"] == str(clone.resolve())
    assert Path(state["qwen"]).resolve().is_relative_to(clone.resolve())
    assert f"weights: {tiny.path()}" in run.stdout

    # the install itself: a new interpreter, anywhere, imports qwen and book from the clone
    where = subprocess.run(
        [str(python), "-c", "import qwen, book; print(qwen.__file__); print(book.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    assert all(Path(f).resolve().is_relative_to(clone.resolve()) for f in where.stdout.split()), (
        where.stdout
    )
