"""The lesson notebooks: stored as a clean run, the same code in both editions, exercises solvable
and checked."""

import importlib.util
import inspect
import math
import re

import nbformat
import numpy as np
import pytest
import torch

from book import lessons
from book.lessons import (
    TODO,
    check_cached_attention,
    check_causal_attention,
    check_embed_and_project,
    check_grouped_attention,
    check_lookup,
    check_pull_together,
    check_rotate_pairs,
    check_shift_matrix,
    check_wavelengths,
)
from book.nbexec import LESSONS, ROOT, execute, notebooks
from book.solutions import attention as attention_solution
from book.solutions import embedding as solution
from book.solutions import positional as positional_solution

LANGS = ("zh", "en")
NAMES = ("embedding", "positional", "attention")
NOTEBOOKS = {lang: ROOT / "docs" / lang / "lessons" / "embedding.ipynb" for lang in LANGS}
PASSED = {"zh": "作业 {} 通过", "en": "Exercise {} passed"}
NOT_SOLVED = {"zh": "作业 {}：还没做", "en": "Exercise {}: not solved yet"}


def said(capsys):
    """What the checks printed, as one line: they break long verdicts to the width of the page's
    output box."""
    return " ".join(capsys.readouterr().out.split())


SIMILARITY = re.compile(
    r"^(.*): within-group (-?[\d.]+), cross-group (-?[\d.]+), nearest neighbour in own group "
    r"(\d+)/(\d+)",
    re.M,
)
MAX_SECONDS = 180
SOLUTIONS_URL = (
    "https://github.com/transformer-by-hand/transformer-by-hand/blob/main/book/solutions/{}.py"
)


def path_of(name, lang):
    return ROOT / "docs" / lang / "lessons" / f"{name}.ipynb"


def skip_if_same_code_as_zh(name, lang):
    """An English lesson whose code cells are its Chinese twin's (but for the checks' message
    language) need not run solved in the full tier too: the Chinese one does (as for the chapter
    notebooks, tests/test_notebooks.py)."""
    from tests.test_notebooks import code_of

    def code(language):
        return code_of(path_of(name, language).read_text(encoding="utf-8"), language)

    if lang != "zh" and code(lang) == code("zh"):
        pytest.skip(
            f"the same code cells as zh/lessons/{name}.ipynb (but for the checks' "
            "message language), which runs with the solutions"
        )


def read(lang, name="embedding"):
    return nbformat.read(path_of(name, lang), as_version=4)


def text_of(nb):
    """Everything the code cells printed, in order."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def placeholders(lang="en", name="embedding"):
    """The reader's functions, exactly as the notebook holds them (with their TODOs)."""
    namespace = {"torch": torch, "nn": torch.nn, "math": math, "TODO": TODO}
    for cell in read(lang, name).cells:
        if "exercise" in cell.metadata.get("tags", []):
            exec(cell.source, namespace)
    return namespace


@pytest.fixture(scope="module")
def minilm():
    return lessons.load_minilm()[0]


@pytest.fixture(scope="module", autouse=True)
def english():
    lessons.setup("en")


def test_nbexec_runs_every_lesson_of_both_editions_and_takes_a_lesson_by_name():
    assert {(p.parent.parent.name, p.stem) for p in LESSONS} == {
        (lang, name) for lang in LANGS for name in NAMES
    }
    assert sorted(notebooks(["positional"])) == sorted(
        path_of("positional", lang) for lang in LANGS
    )
    with pytest.raises(
        SystemExit,
        match="no lesson called 'rope': the lessons are attention, embedding, positional",
    ):
        notebooks(["rope"])


# ---------------------------------------------------------------- each check can fail, and can pass
def test_exercise_1_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(
    capsys,
):
    assert check_lookup(placeholders()["lookup"]) is False
    assert "not solved yet" in said(capsys)
    assert check_lookup(lambda table, ids: table[ids.flatten()]) is False  # loses the shape of ids
    # the first rows, not the picked ones
    assert check_lookup(lambda table, ids: table[: ids.numel()]) is False
    assert check_lookup(solution.lookup) is True


def test_exercise_2_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(
    capsys,
):
    assert check_pull_together(placeholders()["pull_together"]) is False
    assert "not solved yet" in said(capsys)
    # the hint's trap: vectors swap
    swap = lambda embedding: solution.pull_together(embedding, lr=0.5)
    assert check_pull_together(swap) is False
    assert check_pull_together(solution.pull_together) is True


def test_exercise_3_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(
    capsys, minilm
):
    words = [
        "cat",
        "dog",
        "elephant",
        "tiger",
        "china",
        "japan",
        "france",
        "germany",
        "pizza",
        "sushi",
        "bread",
        "noodle",
        "computer",
        "laptop",
        "phone",
        "tablet",
    ]
    assert check_embed_and_project(placeholders()["embed_and_project"], minilm, words) is False
    assert "not solved yet" in said(capsys)
    noise = lambda model, ws: (
        np.random.default_rng(0).normal(size=(len(ws), 384)),
        np.zeros((len(ws), 2)),
    )
    assert check_embed_and_project(noise, minilm, words) is False
    # the right vectors, but a map that is not made from them: random points, two raw dims
    scatter = lambda model, ws: (
        model.encode(ws, normalize_embeddings=True),
        np.random.default_rng(0).normal(size=(len(ws), 2)),
    )
    assert check_embed_and_project(scatter, minilm, words) is False
    assert "neighbours" in said(capsys)
    two_dims = lambda model, ws: (lambda v: (v, v[:, :2]))(
        model.encode(ws, normalize_embeddings=True)
    )
    assert check_embed_and_project(two_dims, minilm, words) is False
    assert check_embed_and_project(solution.embed_and_project, minilm, words) is True


# -------------------------------------------------------- hints and verdicts in the page's language
CJK = re.compile(r"[\u4e00-\u9fff]")
TODO_CALL = re.compile(r"\bTODO\(\s*(\"[^\"]*\")\s*(?:,\s*(\"[^\"]*\")\s*)?,?\s*\)")


@pytest.mark.parametrize("name", NAMES)
def test_every_placeholder_carries_a_chinese_and_an_english_hint(name):
    cells = [c for c in read("en", name).cells if "exercise" in c.metadata.get("tags", [])]
    calls = [m for c in cells for m in TODO_CALL.finditer(c.source)]
    assert len(calls) >= len(cells) == 3, f"{name}: every exercise holds a TODO"
    for m in calls:
        zh, en = m.group(1), m.group(2)
        assert en is not None, f'{name}: TODO({zh}) has one hint: give TODO("中文", "English")'
        assert CJK.search(zh) and not CJK.search(en), f"{name}: TODO({zh}, {en})"


def test_a_chinese_notebook_says_not_solved_with_its_hint_in_chinese(capsys):
    """The same placeholder in both editions; its verdict and hint in the notebook's language."""
    shift_matrix = placeholders("zh", "positional")["shift_matrix"]
    try:
        lessons.setup("zh")
        assert check_shift_matrix(shift_matrix) is False
        zh = said(capsys)
    finally:
        lessons.setup("en")
    assert check_shift_matrix(shift_matrix) is False
    en = said(capsys)
    assert zh.startswith("作业 1：还没做（提示：") and CJK.search(zh.split("提示：", 1)[1]), zh
    assert en.startswith("Exercise 1: not solved yet (hint: a block-diagonal matrix"), en
    # a TODO with one hint shows it in both editions
    assert check_lookup(lambda table, ids: TODO("table[ids]")) is False
    assert "(hint: table[ids])" in said(capsys)


# ------------------------------------------------------------------ running outside a clone (Colab)
FIND_SPEC = importlib.util.find_spec


def setup_cell(name, lang="en"):
    code = [c for c in read(lang, name).cells if c.cell_type == "code"]
    assert "from book" not in code[0].source, "the first code cell sets up before any import"
    return code[0].source


def run_setup(source, monkeypatch, book_importable):
    """Run a setup cell with subprocess.run recorded (nothing is cloned or installed); the commands
    it ran, and the ROOT it settled on."""
    import importlib.util
    import subprocess
    import sys

    ran = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kwargs: ran.append(list(args)))
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a: FIND_SPEC(n, *a) if book_importable or n != "book" else None,
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("BOOK_REPO", raising=False)
    namespace = {}
    exec(compile(source, "<setup cell>", "exec"), namespace)
    return ran, namespace["ROOT"]


@pytest.mark.parametrize("name", NAMES)
def test_the_setup_cell_clones_and_installs_the_book_only_where_book_cannot_be_imported(
    name, monkeypatch, tmp_path
):
    source = setup_cell(name)
    assert source == setup_cell(name, "zh")
    repo_url = re.search(r"^repo_url: (\S+)", (ROOT / "mkdocs.yml").read_text(), re.M).group(1)

    monkeypatch.chdir(path_of(name, "en").parent)  # inside the clone: nothing to do
    assert run_setup(source, monkeypatch, book_importable=True) == ([], ROOT)

    monkeypatch.chdir(tmp_path)  # Colab: no clone around, no `book` to import
    ran, root = run_setup(source, monkeypatch, book_importable=False)
    assert root == tmp_path / "transformer-by-hand"
    assert ran[0] == ["git", "clone", "--depth", "1", repo_url, str(root)]
    assert ran[1][1:6] == ["-m", "pip", "install", "-q", "-e"] and ran[1][6] == str(root)
    assert len(ran) == 2

    (tmp_path / "transformer-by-hand").mkdir()  # run again: the clone is there, installed once more
    ran, _ = run_setup(source, monkeypatch, book_importable=False)
    assert [args[1:4] for args in ran] == [["-m", "pip", "install"]]

    ran, root = run_setup(source, monkeypatch, book_importable=True)  # installed, not a clone
    assert ran == [] and root == ROOT


# ------------------------------------------------------------------- the positional lesson's checks
def test_positional_exercise_1_check_fails_on_the_placeholder_and_the_backwards_rotation(capsys):
    assert check_shift_matrix(placeholders(name="positional")["shift_matrix"]) is False
    assert "not solved yet" in said(capsys)
    # the (cos, sin) rotation on (sin, cos)
    backwards = lambda k, dim: positional_solution.shift_matrix(k, dim).T
    assert check_shift_matrix(backwards) is False
    assert "its transpose is right" in said(capsys)
    assert check_shift_matrix(lambda k, dim: torch.eye(dim)) is False
    assert check_shift_matrix(positional_solution.shift_matrix) is True


def test_positional_exercise_2_check_fails_on_the_placeholder_neighbour_pairs_and_the_wrong_direction(  # noqa: E501 (a test name says what it checks)
    capsys,
):
    assert check_rotate_pairs(placeholders(name="positional")["rotate_pairs"]) is False
    assert "not solved yet" in said(capsys)

    def neighbours(x, angle):  # RoFormer's pairing (2i, 2i+1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack(
            [x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], -1
        ).flatten(-2)

    assert check_rotate_pairs(neighbours) is False
    assert "neighbouring dims" in said(capsys)
    assert check_rotate_pairs(lambda x, angle: positional_solution.rotate_pairs(x, -angle)) is False
    assert "wrong way" in said(capsys)
    assert check_rotate_pairs(positional_solution.rotate_pairs) is True


def test_positional_exercise_3_check_fails_on_the_placeholder_head_dim_in_the_exponent_and_no_2pi(
    capsys,
):
    assert check_wavelengths(placeholders(name="positional")["wavelengths"]) is False
    assert "not solved yet" in said(capsys)
    over_head_dim = lambda h, f, theta: 2 * math.pi * theta ** (torch.arange(0, int(h * f), 2) / h)
    assert check_wavelengths(over_head_dim) is False
    assert "not head_dim" in said(capsys)
    no_turn = lambda h, f, theta: positional_solution.wavelengths(h, f, theta) / (2 * math.pi)
    assert check_wavelengths(no_turn) is False
    assert "2π" in said(capsys)
    assert (
        check_wavelengths(lambda h, f, theta: positional_solution.wavelengths(h, 1.0, theta))
        is False
    )
    assert check_wavelengths(positional_solution.wavelengths) is True


def test_positional_solutions_agree_with_the_books_rope():
    """The exercise answers are the book's own code seen from another side: chapter 4's
    qwen/rope.py."""
    from qwen.rope import RotaryEmbedding, apply_rope

    rope = RotaryEmbedding(256, 0.25, 1e7)
    assert torch.allclose(
        positional_solution.wavelengths(256, 0.25, 1e7).float(),
        2 * math.pi / rope.inv_freq,
        rtol=1e-5,
    )
    x = torch.randn(3, 64)
    angle = torch.arange(3.0)[:, None] * rope.inv_freq  # [3 positions, 32 pairs]
    cos, sin = rope(torch.arange(3))
    assert torch.allclose(
        positional_solution.rotate_pairs(x, angle), apply_rope(x, cos, sin), atol=1e-5
    )


# -------------------------------------------------------------------- the attention lesson's checks
def attend(q, k, v, scale=None, shift=0, mask_after=False):
    """A wrong (or right) answer to the attention exercises: query i reads keys up to
    S - T + i + shift, scores scaled by scale(d) (default 1/sqrt(d)), masked before or after
    softmax."""
    T, d = q.shape[-2:]
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) * (d**-0.5 if scale is None else scale(d))
    hidden = torch.ones(T, S, dtype=torch.bool).triu(S - T + shift + 1)
    if mask_after:
        return scores.softmax(dim=-1).masked_fill(hidden, 0.0) @ v
    return scores.masked_fill(hidden, float("-inf")).softmax(dim=-1) @ v


ATTENTION_MISTAKES = {  # a plausible wrong answer, and the words of the check's hint
    "no scale": (lambda q, k, v: attend(q, k, v, scale=lambda d: 1.0), "not divided by √d"),
    "scale 1/d": (lambda q, k, v: attend(q, k, v, scale=lambda d: 1 / d), "divide by √d"),
    "mask after softmax": (lambda q, k, v: attend(q, k, v, mask_after=True), "after softmax"),
    "diagonal masked": (lambda q, k, v: attend(q, k, v, shift=-1), "must at least see itself"),
    "one token ahead": (lambda q, k, v: attend(q, k, v, shift=1), "off by one"),
    "no mask": (lambda q, k, v: attend(q, k, v, shift=10**6), "no causal mask"),
}


@pytest.mark.parametrize("mistake", ATTENTION_MISTAKES)
def test_attention_exercise_1_check_names_each_mistake(mistake, capsys):
    wrong, hint = ATTENTION_MISTAKES[mistake]
    assert check_causal_attention(wrong) is False
    assert hint in said(capsys)


def test_attention_exercise_1_check_fails_on_the_placeholder_and_passes_the_solution(capsys):
    import torch.nn.functional as F

    assert check_causal_attention(placeholders(name="attention")["causal_attention"]) is False
    assert "not solved yet" in said(capsys)
    assert check_causal_attention(attention_solution.causal_attention) is True
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert check_causal_attention(sdpa) is True


def test_attention_exercise_2_check_rejects_repeat_for_repeat_interleave(capsys):
    from qwen.weights import Config

    cfg = Config.load(ROOT / "book" / "data" / "qwen3.5-0.8b")
    heads = (cfg.num_attention_heads, cfg.num_key_value_heads)
    grouped = placeholders(name="attention")["grouped_attention"]
    assert check_grouped_attention(grouped, *heads) is False
    assert "not solved yet" in said(capsys)

    def tiled(q, k, v):  # KV head j % n_kv, not j // group
        group = q.shape[-3] // k.shape[-3]
        k, v = (x.repeat(*[1] * (x.dim() - 3), group, 1, 1) for x in (k, v))
        return attention_solution.causal_attention(q, k, v)

    assert check_grouped_attention(tiled, *heads) is False
    assert "(repeat: 0, 1, 0, 1" in said(capsys)
    first_only = lambda q, k, v: attention_solution.grouped_attention(q, k[..., :1, :, :], v)
    with pytest.raises(RuntimeError):  # a shape error reaches the reader as it is
        check_grouped_attention(first_only, *heads)
    no_mask = lambda q, k, v: attention_solution.grouped_attention(q, k, v) * 0 + 1
    assert check_grouped_attention(no_mask, *heads) is False
    assert "differs from the right result" in said(capsys)
    assert check_grouped_attention(attention_solution.grouped_attention, *heads) is True


def test_attention_exercise_3_check_rejects_the_unshifted_mask(capsys):
    assert check_cached_attention(placeholders(name="attention")["cached_attention"]) is False
    assert "not solved yet" in said(capsys)
    unshifted = lambda q, k, v: attend(q, k, v, shift=q.shape[-2] - k.shape[-2])
    assert check_cached_attention(unshifted) is False
    assert "the mask is not shifted" in said(capsys)
    for mistake in ("no scale", "mask after softmax", "one token ahead"):
        wrong, hint = ATTENTION_MISTAKES[mistake]
        assert check_cached_attention(wrong) is False
        assert hint in said(capsys)
    with pytest.raises(RuntimeError):  # exercise 1's [T, T] mask does not fit T < S
        check_cached_attention(attention_solution.causal_attention)
    assert check_cached_attention(attention_solution.cached_attention) is True


def test_attention_solutions_agree_with_the_books_attention():
    """The exercises' answers are chapter 5's Attention.attend (grouped heads, the cache's offset)
    seen from another side."""
    from qwen.attention import Attention

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 3, 16, generator=g)  # the 3 newest tokens of 7
    k, v = torch.randn(1, 2, 7, 16, generator=g), torch.randn(1, 2, 7, 16, generator=g)
    book = Attention.attend(None, q, k, v)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    assert torch.allclose(attention_solution.cached_attention(q, k, v), book, atol=1e-6)
    assert torch.allclose(
        attention_solution.grouped_attention(q, k[:, :, :3], v[:, :, :3]),
        Attention.attend(None, q, k[:, :, :3], v[:, :, :3]),
        atol=1e-6,
    )


# ----------------------------------------------------------------------------- the stored notebooks
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lang", LANGS)
def test_stored_notebook_is_one_clean_run_with_the_exercises_unsolved(lang, name):
    nb = read(lang, name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        "run `python -m book.nbexec`"
    )
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o.text for o in outputs if o.get("name") == "stderr"], (
        "a warning (missing glyph?) reached the page"
    )
    assert any("image/png" in o.get("data", {}) for o in outputs)
    printed = text_of(nb)
    for n in (1, 2, 3):
        assert NOT_SOLVED[lang].format(n) in printed
    if name == "embedding":
        # the page credits its sources
        assert "corpus: " in printed and "model: all-MiniLM-L6-v2" in printed


@pytest.mark.parametrize("name", NAMES)
def test_editions_share_their_code_and_differ_in_prose(name):
    zh, en = read("zh", name), read("en", name)
    assert [c.cell_type for c in zh.cells] == [c.cell_type for c in en.cells]
    for a, b in zip(zh.cells, en.cells):
        if a.cell_type == "code":
            assert a.source.replace('setup("zh")', 'setup("en")') == b.source
            assert a.metadata.get("tags") == b.metadata.get("tags")
        else:
            assert a.source != b.source, f"untranslated cell: {a.source[:60]}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lang", LANGS)
def test_each_exercise_is_followed_by_its_folded_solution_the_same_code_as_the_solutions_file(
    lang, name
):
    """Solutions are out of sight but reachable: a collapsed block after the check, and a link to
    the file."""
    module = importlib.import_module(f"book.solutions.{name}")
    cells = read(lang, name).cells
    exercises = [i for i, c in enumerate(cells) if "exercise" in c.metadata.get("tags", [])]
    assert len(exercises) == 3
    for i in exercises:
        fn = re.search(r"^def (\w+)\(", cells[i].source, re.M).group(1)
        check, folded = cells[i + 1], cells[i + 2]
        assert check.cell_type == "code" and "check_" in check.source
        assert folded.cell_type == "markdown" and folded.source.startswith("<details><summary>")
        shown = re.search(r"```python\n(.*?)\n```", folded.source, re.S).group(1)
        assert shown == inspect.getsource(getattr(module, fn)).rstrip("\n"), (
            f"{fn}: the folded solution is stale"
        )
        assert SOLUTIONS_URL.format(name) in folded.source


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lang", LANGS)
def test_relative_links_in_the_lessons_lead_to_pages_of_the_same_edition(lang, name):
    links = re.findall(
        r"\]\(((?![a-z]+:)[^)#]+)(?:#[^)]*)?\)",
        "\n".join(c.source for c in read(lang, name).cells if c.cell_type == "markdown"),
    )
    assert links, "a lesson links the chapters it builds on"
    for link in links:
        assert (path_of(name, lang).parent / link).resolve().is_file(), (
            f"{lang}/{name}: {link} leads nowhere"
        )


def test_embedding_lesson_links_chapter_2_and_the_next_lesson():
    for lang in LANGS:
        prose = "\n".join(c.source for c in read(lang).cells if c.cell_type == "markdown")
        assert "(../02-embedding.md)" in prose and "(positional.ipynb)" in prose


def test_embedding_prose_on_chance_agrees_with_the_printed_numbers():
    """The prose says the untrained map is no better than a random neighbour; the printed numbers
    must say so too."""
    printed = text_of(read("en"))
    hits = int(
        re.search(r"before training: .* nearest neighbour in own group (\d+)/20", printed).group(1)
    )
    chance = float(
        re.search(r"a neighbour picked at random: in own group ([\d.]+)/20", printed).group(1)
    )
    assert chance == round(20 * 4 / 19, 1)
    assert hits <= chance


def test_positional_prose_numbers_are_the_printed_ones():
    """The numbers the positional lesson's prose quotes, read back from its stored run."""
    for lang in LANGS:
        printed = text_of(read(lang, "positional"))
        assert "b's outputs are a's outputs, reordered: True" in printed
        assert "the same output at '.': True" in printed  # causal, no positions: a bag
        assert "with sinusoidal positions, the same output at '.': False" in printed
        assert "with RoPE, the same output at '.': False" in printed
        assert "pair 31 47,117" in printed  # "about 47,000 tokens"
        right = {
            m[1]: float(m[2])
            for m in re.finditer(
                r"the same 8 digits at positions (\d+-\d+) \([^)]*\): ([\d.]+)% right", printed
            )
        }
        no_positions = float(re.search(r"positions=False .* digits right ([\d.]+)%", printed)[1])
        # "the same model, the same 8 digits: positions 8-15 get most digits wrong, worse than the
        # model that never had positions"
        assert right["0-7"] > 99 and right["8-15"] < min(50, no_positions)
        moved = (
            re.search(r"how far each of the 16 position rows moved:\s*\[([^\]]*)\]", printed)
            .group(1)
            .split()
        )
        # rows 8-15: 0
        assert [float(m) for m in moved[8:]] == [0.0] * 8 and min(float(m) for m in moved[:8]) > 0
        assert "rotated: 64 of 256 dims = 32 pairs; passed through unchanged: 192 dims" in printed
        assert " 0 of 32 pairs turn less than once in 262,144 tokens" in printed  # theta 1e4
        assert "10 of 32 pairs turn less than once in 262,144 tokens" in printed  # theta 1e7
        assert "last 192 identical: True" in printed
        diagonal = float(
            re.search(r"along any one diagonal .* at most ([\d.e+-]+)", printed).group(1)
        )
        assert diagonal < 1e-3  # "only fp32 rounding"


# ------------------------------------------------------------------------- the whole lesson, solved
@pytest.mark.parametrize("lang", LANGS)
def test_lesson_runs_with_the_solutions_in_time_and_every_check_passes(lang):
    skip_if_same_code_as_zh("embedding", lang)
    nb, seconds = execute(NOTEBOOKS[lang], solutions=True)
    printed = text_of(nb)
    similarities = {
        m[1].strip(): (float(m[2]), float(m[3]), f"{m[4]}/{m[5]}")
        for m in SIMILARITY.finditer(printed)
    }
    print(f"\n{lang}: {seconds:.0f} s")
    for name, (within, cross, hits) in similarities.items():
        print(
            f"  {name}: within-group {within:.2f}, cross-group {cross:.2f}, nearest neighbour in "
            f"own group {hits}"
        )
    assert seconds < MAX_SECONDS
    for n in (1, 2, 3):
        assert PASSED[lang].format(n) in printed
    assert set(similarities) == {"before training", "after training", "all-MiniLM-L6-v2"}
    for name in ("after training", "all-MiniLM-L6-v2"):
        within, cross, _ = similarities[name]
        assert within > cross + 0.1, f"{name}: the groups did not separate"


def solved_run(name, lang):
    """Run lesson `name` with its solutions filled in: in time, and its three checks pass. Returns
    what it printed."""
    skip_if_same_code_as_zh(name, lang)
    nb, seconds = execute(path_of(name, lang), solutions=True)
    printed = text_of(nb)
    print(f"\n{lang}: {seconds:.0f} s")
    assert seconds < MAX_SECONDS
    for n in (1, 2, 3):
        assert PASSED[lang].format(n) in printed
    return printed


@pytest.mark.parametrize("lang", LANGS)
def test_positional_lesson_runs_with_the_solutions_in_time_and_every_check_passes(lang):
    printed = solved_run("positional", lang)
    assert re.search(
        r"Qwen3\.5-0\.8B: 32 pairs, from 6\.28 to 37,969,0\d\d tokens per turn; 10 slower than the "
        r"262,144-token context",
        printed,
    )  # the reader's float64 or float32


def test_attention_prose_numbers_are_the_printed_ones():
    """What the attention lesson's prose says, read back from its stored run."""
    for lang in LANGS:
        printed = text_of(read(lang, "attention"))
        cosine = dict(re.findall(r"(\w+ · \w+)\s+=\s+\d+\s+cosine ([\d.]+)", printed))
        # "kitten closest to cat by both measures"
        assert float(cosine["cat · kitten"]) > float(cosine["cat · dog"]) > 0.5
        assert float(cosine["cat · algorithm"]) < 0.1
        weight = dict(re.findall(r"(\w+): score\s+\d+\s+weight ([\d.]+)", printed))
        assert max(weight, key=lambda w: float(weight[w])) == "kitten"
        assert float(weight["algorithm"]) < 0.01 and float(weight["theorem"]) < 0.01
        # Var(q·k) = d, Var(q·k / sqrt d) = 1
        for d, raw, scaled in re.findall(
            r"d = +(\d+): variance of q·k +([\d.]+) +of .* ([\d.]+)", printed
        ):
            assert abs(float(raw) / int(d) - 1) < 0.05 and abs(float(scaled) - 1) < 0.05
        rows = re.findall(
            r"d = +(\d+): largest weight ([\d.]+) -> ([\d.]+) +Jacobian size ([\d.]+) -> ([\d.]+)",
            printed,
        )
        top_raw, top, grad_raw, grad = (np.array([float(r[i]) for r in rows]) for i in (1, 2, 3, 4))
        assert [int(r[0]) for r in rows] == [4, 16, 64, 256, 1024]
        # unscaled: towards one-hot, the Jacobian towards 0; scaled: flat
        assert np.all(np.diff(top_raw) > 0) and top_raw[-1] > 0.9
        assert np.all(np.diff(grad_raw[1:]) < 0) and grad_raw[-1] < grad_raw[0] / 4
        assert np.ptp(top) < 0.02 and np.ptp(grad) < 0.02
        assert "head_dim 256, so the scores are multiplied by 256**-0.5 = 0.0625" in printed
        assert "[[1.    0.    0.    0.    0.    0.   ]" in printed  # the first token reads itself
        assert "row sums: [1. 1. 1. 1. 1. 1.]" in printed
        assert "last word changed: outputs 0-4 unchanged: True | output 5 changed: True" in printed
        assert "last word changed: outputs 0-4 unchanged: False" in printed  # mask after softmax
        assert "one head at a time == all heads at once: True" in printed
        # "8 query heads share 2 KV heads", "floor(j / 4)", "4 times smaller"
        assert (
            "8 query heads, 2 KV heads, head_dim 256: each KV head serves 4 query heads" in printed
        )
        assert "repeat_interleave == qwen.attention.Attention.attend: True" in printed
        right = re.search(
            r"with repeat, the query heads whose output is still right: \[(.*)\]", printed
        )
        assert len(right.group(1).split(",")) == 4  # "half the query heads" read the wrong one
        assert "24 new tokens, with and without a cache" in printed
        assert "the cache now holds K [1, 2, 31, 256]" in printed  # an 8-token prompt, 23 steps
        counted = re.findall(
            r"multiply-adds with(?:out)? a cache: +([\d,]+) \(counted by torch: ([\d,]+)\)", printed
        )
        assert len(counted) == 2 and all(a == b for a, b in counted)
        # "exactly L times the cached step"
        for n, without, cached in re.findall(
            r"token +([\d,]+): +([\d.]+) G .*, ([\d.]+) G with one", printed
        ):
            assert abs(float(without) / float(cached) / int(n.replace(",", "")) - 1) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_attention_lesson_runs_with_the_solutions_in_time_and_every_check_passes(lang):
    printed = solved_run("attention", lang)
    assert "your causal_attention on the sentence of section 3 == out: True" in printed
    assert "your grouped_attention on section 5's heads == Attention.attend: True" in printed
    assert "token by token with a growing cache == all at once: True" in printed
