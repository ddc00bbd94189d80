"""The chapter notebooks: generated from the pages, current, and runnable top to bottom on the tiny
test model."""

import io
import json
import math
import os
import re
import shutil
import site
import subprocess
import sys
import time
import tokenize
import types
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from IPython.display import SVG
from nbclient import NotebookClient

from book import notebooks, pages, tiny
from book.cores import available_cores
from book.notebooks import NOTEBOOKS, ROOT

PAGES = notebooks.chapter_pages()
RUN_SCRIPT = re.compile(r"%%bash\npython scripts/ch\d\d_\w+\.py")
CHAPTERS = sorted({name for _, name in PAGES})
# a chapter script's listing cell (its "Run it" section, the snippet markers dropped): its source
LISTINGS = {
    "\n".join(
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if not notebooks.MARKER.fullmatch(line)
    ).strip(): path.name
    for path in (ROOT / "scripts").glob("ch[0-9][0-9]_*.py")
}
# per notebook (about 5 to 40 s each on an idle core; generous for a busy CI runner)
MAX_SECONDS = 240


@pytest.fixture(scope="module")
def generated():
    return notebooks.build_all()


def without_comments(source):
    """A cell's code as Python runs it (shell escapes and cell magics as IPython turns them into
    calls), its comments dropped: what the editions may say differently."""
    code = TransformerManager().transform_cell(source)
    try:
        tokens = tokenize.generate_tokens(io.StringIO(code).readline)
        code = tokenize.untokenize(t for t in tokens if t.type != tokenize.COMMENT)
    except (tokenize.TokenError, SyntaxError):
        pass
    return "\n".join(line.rstrip() for line in code.splitlines() if line.strip())


def code_of(text, lang=None):
    """The code cells, without their comments; with lang, the edition's language argument (the
    checks' messages, a lesson's setup) and the strings it prints read as zh."""
    cells = [
        without_comments(c.source)
        for c in nbformat.reads(text, as_version=4).cells
        if c.cell_type == "code"
    ]
    if lang:
        cells = [re.sub(rf'\blang="{lang}"', 'lang="zh"', c) for c in cells]
        cells = [c.replace(f'setup("{lang}")', 'setup("zh")') for c in cells]  # a lesson's
        for key in ("download_else", "figure_book"):
            cells = [c.replace(notebooks.TEXT[lang][key], notebooks.TEXT["zh"][key]) for c in cells]
        cells = [re.sub(rf'_{lang}\.svg"', '_zh.svg"', c) for c in cells]  # the edition's figure
    return cells


def page_code(nb):
    """The code cells that come from the page: not the setup or the download cell."""
    return [c.source for c in nb.cells[2:] if c.cell_type == "code" and not is_download(c)]


def is_download(cell):
    return cell.cell_type == "code" and "\nDOWNLOAD = False\n" in cell.source


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
    assert page_code(nb) == ["print(1)"]
    assert (
        "```bash\nhf download x\n```" in nb.cells[-2].source
        and "needs the hub" in nb.cells[-2].source
    )


CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("lang", notebooks.LANGS)
def test_every_notebook_offers_the_download_as_a_cell_that_waits(lang, generated):
    """A cell that downloads the official weights when the reader sets DOWNLOAD = True (in Colab,
    say); "Run all" leaves it alone. Chapter 1 has it where the page shows the commands, the other
    chapters right under the setup cell."""
    for path, text in generated.items():
        if path.parent.name != lang:
            continue
        nb = nbformat.reads(text, as_version=4)
        cells = [c for c in nb.cells if is_download(c)]
        assert len(cells) == 1, path
        at = next(i for i, c in enumerate(nb.cells) if c is cells[0])
        if path.stem == "01-weights":
            intro = nb.cells[at - 1].source  # under the page's words
            assert "1.75 GB" in intro and intro != notebooks.TEXT[lang]["download_intro"]
        else:
            assert at == 3 and nb.cells[2].source == notebooks.TEXT[lang]["download_intro"]
        comments = [line for line in cells[0].source.splitlines() if line.startswith("# ")]
        assert all(bool(CJK.search(line)) == (lang == "zh") for line in comments[:4]), comments
        assert "CI cannot reach" not in text  # the reason the page gives its tests


def test_the_download_cell_runs_the_download_script_only_when_asked():
    cell = next(
        c
        for c in nbformat.read(notebooks.notebook_path("zh", "01-weights.md"), 4).cells
        if is_download(c)
    )
    code = TransformerManager().transform_cell(cell.source)  # Python, once IPython reads `!`
    for asked in (False, True):
        shell, env = [], {"QWEN_MODEL": "/tiny"}
        ipython = types.SimpleNamespace(system=shell.append)
        scope = {
            "get_ipython": lambda ipython=ipython: ipython,
            "os": types.SimpleNamespace(environ=env),
            "find_model": lambda env=env: env.get("QWEN_MODEL", "models/Qwen3.5-0.8B"),
        }
        exec(code.replace("DOWNLOAD = False", f"DOWNLOAD = {asked}"), scope)
        assert shell == (["python scripts/download.py"] if asked else [])
        # then find_model() finds what it downloaded, not the tiny model
        assert ("QWEN_MODEL" in env) == (not asked)


def test_a_chinese_notebook_gives_no_english_reason():
    for path in sorted((NOTEBOOKS / "zh").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for reason in re.findall(r"（这个命令在这里不运行：(.*?)）", cell.source):
                assert CJK.search(reason), (path.name, reason)


def test_an_admonition_is_opened_up_so_its_code_runs():
    nb = notebooks.build(
        "en",
        "x.md",
        '---\nchapter: 1\n---\n# 1. X\n\n!!! tip "Try"\n    Here:\n\n'
        "    ```python\n    x = 1\n    ```\n",
    )
    assert page_code(nb) == ["x = 1"]
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
    code = page_code(nb)
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


def same_code_as_twin(name, lang):
    """An English notebook whose code cells are its Chinese twin's (but for the checks' message
    language) need not run: the Chinese one does."""
    path, twin = notebooks.notebook_path(lang, name), notebooks.notebook_path("zh", name)
    return lang != "zh" and code_of(path.read_text(encoding="utf-8"), lang) == code_of(
        twin.read_text(encoding="utf-8")
    )


# One notebook in one fresh Python: read, execute (its kernel inherits this process's environment),
# write what it printed, even when a cell fails; print the seconds.
RUN_ONE = """
import sys, time
import nbformat
from nbclient import NotebookClient
src, dst, cwd = sys.argv[1:4]
nb = nbformat.read(src, as_version=4)
client = NotebookClient(
    nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": cwd}}
)
start = time.perf_counter()
try:
    client.execute()
finally:
    nbformat.write(nb, dst)
print(time.perf_counter() - start)
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Every chapter notebook that must run, executed on the tiny model, one per core at a time
    (each kernel on one thread): {(name, lang): (executed notebook, seconds, error text)}."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = [
        (n, lang) for n in CHAPTERS for lang in notebooks.LANGS if not same_code_as_twin(n, lang)
    ]
    base = tmp_path_factory.mktemp("executed")

    def run(key):
        name, lang = key
        path = notebooks.notebook_path(lang, name)
        nb = nbformat.read(path, as_version=4)
        # the chapter script itself, its listing and its run: `regen --check` runs it (test_book.py)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            if RUN_SCRIPT.fullmatch(cell.source.strip()):
                cell.source = (
                    f"# {cell.source.splitlines()[-1]}: run by python -m book.regen --check"
                )
            elif cell.source.strip() in LISTINGS:
                cell.source = (
                    f"# {LISTINGS[cell.source.strip()]}: run by python -m book.regen --check"
                )
        work = base / f"{lang}-{Path(name).stem}"
        work.mkdir()
        src, dst = work / "in.ipynb", work / "out.ipynb"
        nbformat.write(nb, src)
        proc = subprocess.run(
            [sys.executable, "-c", RUN_ONE, str(src), str(dst), str(path.parent)],
            env=run_env(work / "out"),
            capture_output=True,
            text=True,
        )
        done = nbformat.read(dst, as_version=4) if dst.is_file() else None
        error = "" if proc.returncode == 0 else proc.stderr[-4000:]
        seconds = float(proc.stdout.split()[-1]) if proc.returncode == 0 else math.nan
        return key, (done, seconds, error)

    with ThreadPoolExecutor(max_workers=available_cores()) as pool:
        return dict(pool.map(run, wanted))


@pytest.mark.parametrize("lang", notebooks.LANGS)
@pytest.mark.parametrize("name", CHAPTERS)
def test_the_notebook_runs_top_to_bottom_on_the_tiny_model(name, lang, request):
    path, twin = notebooks.notebook_path(lang, name), notebooks.notebook_path("zh", name)
    if same_code_as_twin(name, lang):
        pytest.skip(
            f"the same code cells as zh/{twin.name} (but for the checks' message language), which "
            "runs"
        )
    nb, seconds, error = request.getfixturevalue("executed")[(name, lang)]
    assert not error, f"{path.name}:\n{error}"
    setup = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    # it found the repository and the tiny model
    assert "weights:" in setup and str(tiny.path()) in setup
    assert seconds < MAX_SECONDS, f"{path.name} took {seconds:.0f} s"
    # the script's cells did not run here (regen --check ran the script): each figure cell shows
    # the book's figure and says so (that it shows the run's own: the reader's-edit test below)
    for cell in figure_cells(nb):
        svg = [
            o["data"]["image/svg+xml"] for o in cell.outputs if "image/svg+xml" in o.get("data", {})
        ]
        assert len(svg) == 1 and "<svg" in svg[0], cell.source
        assert notebooks.TEXT[lang]["figure_book"] in printed(cell)


def run_env(out):
    """The environment a chapter notebook runs in: the tiny model, its scripts writing under
    `out`, one thread."""
    return {
        **os.environ,
        "QWEN_MODEL": str(tiny.path()),
        "HF_HUB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "BOOK_OUT": str(out),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }


def execute(nb, path, out, allow_errors=False):
    """Run a notebook in place on the tiny model, its scripts writing under `out`; the seconds."""
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute(env=run_env(out))
    return time.perf_counter() - start


def printed(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream")


def figure_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and "display(SVG(" in c.source]


# ------------------------------------------------------------------------- the reader's own code
def use_mine_of_setup():
    """use_mine, as the first cell defines it."""
    setup = notebooks.SETUP
    source = setup[setup.index("def use_mine") : setup.index("\n\n\nfrom qwen.weights")]
    scope = {"sys": sys}
    exec(source, scope)
    return scope["use_mine"]


def test_use_mine_replaces_the_definition_where_the_package_holds_it():
    """In the module, and in every qwen module that imported it already; nowhere else; and again
    when the reader runs the cells a second time."""
    use_mine = use_mine_of_setup()

    def X():  # the repository's
        return "theirs"

    home, user, elsewhere = (types.ModuleType(n) for n in ("qwen._t_home", "qwen._t_user", "_t"))
    for m in (home, user, elsewhere):
        m.X = X
    user.Y = X  # imported under another name: not a `from qwen._t_home import X`
    names = ["qwen._t_home", "qwen._t_user", "_t"]
    sys.modules.update(zip(names, (home, user, elsewhere)))
    try:
        first = types.FunctionType(X.__code__, {}, "X")
        use_mine(home, first)
        assert home.X is first and user.X is first
        assert elsewhere.X is X and user.Y is X
        second = types.FunctionType(X.__code__, {}, "X")  # the cell run again, edited
        use_mine(home, second)
        assert home.X is second and user.X is second
    finally:
        for n in names:
            del sys.modules[n]


@pytest.mark.parametrize("lang", notebooks.LANGS)
def test_the_readers_rmsnorm_is_handed_to_the_package_before_the_script_runs(lang, generated):
    nb = nbformat.reads(generated[notebooks.notebook_path(lang, "03-norm.md")], as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    defines = next(
        i for i, c in enumerate(code) if c.startswith("import torch") and "class RMSNorm(" in c
    )
    hands = code[defines + 1]
    assert "import qwen.norm\n" in hands and "\nuse_mine(qwen.norm, RMSNorm)" in hands
    assert "qwen/model.py" in hands  # it says where the package uses it
    script = code.index((ROOT / "scripts" / "ch03_norm.py").read_text().strip())
    assert defines + 1 < script
    comment = "\n".join(line for line in hands.splitlines() if line.startswith("#"))
    assert bool(re.search(r"[\u4e00-\u9fff]", comment)) == (lang == "zh")


def test_a_class_shown_in_parts_is_handed_over_whole():
    """Chapter 5 shows Attention's __init__, then its other methods on their own: they go back into
    the notebook's class before the class goes to the package."""
    nb = nbformat.read(notebooks.notebook_path("en", "05-attention.md"), as_version=4)
    hands = next(c.source for c in nb.cells if "use_mine(qwen.attention" in c.source)
    for method in ("forward", "project", "attend"):
        assert f"\nAttention.{method} = {method}\n" in hands
    assert hands.index("Attention.forward =") < hands.index("use_mine(qwen.attention, Attention)")


def test_only_the_repositorys_code_is_handed_over():
    """An exercise's attempt (a TODO), or a function of the same name written differently, is not
    the package's code: it stays in the notebook."""
    page = "---\nchapter: 3\n---\n# 3. X\n\n```python\n{}\n```\n\n```python\nprint(1)\n```\n"
    theirs = (ROOT / "qwen" / "norm.py").read_text().split("# --8<-- [end:rmsnorm]")[0]
    same = notebooks.build("en", "x.md", page.format(theirs))
    assert any("use_mine(qwen.norm, RMSNorm)" in c.source for c in same.cells)
    changed = notebooks.build("en", "x.md", page.format(theirs.replace("1 + self", "2 + self")))
    assert not any(
        "use_mine(" in c.source and "def use_mine" not in c.source for c in changed.cells
    )


@pytest.mark.parametrize("name", ["03-norm.md"])
def test_the_notebook_runs_top_to_bottom_with_the_readers_edit(name, tmp_path):
    """Drop the `1 +` from the notebook's RMSNorm, as a reader might: the chapter's script, and
    the whole model qwen/model.py builds, change with it."""
    path = notebooks.notebook_path("en", name)
    probe = nbformat.v4.new_code_cell(
        "from qwen.model import from_pretrained\n"
        "model = from_pretrained(find_model())\n"
        'print("model norms are the notebook\'s:", type(model.norm) is RMSNorm,\n'
        "      type(model.layers[0].input_layernorm) is RMSNorm)\n"
        "logits = model(torch.tensor([[1, 2, 3]]))[0, -1, :3]\n"
        'print("logits:", [f"{v:.4f}" for v in logits.tolist()])'
    )
    runs = {}
    for edited in (False, True):
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "code" and "class RMSNorm(" in c.source)
        assert "(x32 * (1 + self.weight.float()))" in cell.source
        if edited:
            cell.source = cell.source.replace("(1 + self.weight.float())", "self.weight.float()")
        nb.cells.append(probe)
        out = tmp_path / ("edited" if edited else "as-shown")
        execute(nb, path, out, allow_errors=edited)
        failed = [
            c.source
            for c in nb.cells
            if any(o["output_type"] == "error" for o in c.get("outputs", []))
        ]
        # the page's own check of a fresh norm (rms 1 at w = 0) catches the edit at once
        assert failed == (
            [c.source for c in nb.cells if "torch.ones(3), atol" in c.source] if edited else []
        )
        script = next(c for c in nb.cells if c.source == notebooks.SCRIPTS["scripts/ch03_norm.py"])
        runs[edited] = printed(script).splitlines(), printed(nb.cells[-1]).splitlines()
        # the figure shown is the one this run wrote
        shown = figure_cells(nb)[0].outputs[0]["data"]["image/svg+xml"]
        drawn = SVG(filename=str(out / "figures" / "ch03_norm_scales_en.svg")).data
        assert shown == drawn
    (script, model), (script_edited, model_edited) = runs[False], runs[True]
    for lines in (script + model, script_edited + model_edited):  # shown by pytest -s
        print("\n".join(lines))
    assert script[0] == script_edited[0]  # the embeddings: before any norm
    key = "after layer 0's input_layernorm"
    changed = [a for a, b in zip(script, script_edited) if a != b]
    assert any(key in line for line in changed), changed
    assert model[0] == model_edited[0] == "model norms are the notebook's: True True"
    assert model[1] != model_edited[1], model  # the whole model ran the reader's norm


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
