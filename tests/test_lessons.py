"""The lesson notebooks: stored as a clean run, the same code in both editions, exercises solvable and checked."""
import re

import nbformat
import numpy as np
import pytest
import torch

from book import lessons
from book.lessons import TODO, check_embed_and_project, check_lookup, check_pull_together
from book.nbexec import ROOT, execute
from book.solutions import embedding as solution

NOTEBOOKS = {lang: ROOT / "docs" / lang / "lessons" / "embedding.ipynb" for lang in ("zh", "en")}
PASSED = {"zh": "作业 {} 通过", "en": "Exercise {} passed"}
NOT_SOLVED = {"zh": "作业 {}：还没做", "en": "Exercise {}: not solved yet"}
SIMILARITY = re.compile(r"^(.*): within-group (-?[\d.]+), cross-group (-?[\d.]+), nearest neighbour in own group (\d+)/(\d+)",
                        re.M)
MAX_SECONDS = 180


def read(lang):
    return nbformat.read(NOTEBOOKS[lang], as_version=4)


def text_of(nb):
    """Everything the code cells printed, in order."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def placeholders(lang="en"):
    """The reader's functions, exactly as the notebook holds them (with their TODOs)."""
    namespace = {"torch": torch, "nn": torch.nn, "TODO": TODO}
    for cell in read(lang).cells:
        if "exercise" in cell.metadata.get("tags", []):
            exec(cell.source, namespace)
    return namespace


@pytest.fixture(scope="module")
def minilm():
    return lessons.load_minilm()[0]


@pytest.fixture(scope="module", autouse=True)
def english():
    lessons.setup("en")


# ------------------------------------------------------------------------------- each check can fail, and can pass
def test_exercise_1_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(capsys):
    assert check_lookup(placeholders()["lookup"]) is False
    assert "not solved yet" in capsys.readouterr().out
    assert check_lookup(lambda table, ids: table[ids.flatten()]) is False       # loses the shape of ids
    assert check_lookup(lambda table, ids: table[: ids.numel()]) is False       # the first rows, not the picked ones
    assert check_lookup(solution.lookup) is True


def test_exercise_2_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(capsys):
    assert check_pull_together(placeholders()["pull_together"]) is False
    assert "not solved yet" in capsys.readouterr().out
    swap = lambda embedding: solution.pull_together(embedding, lr=0.5)         # the hint's trap: vectors swap
    assert check_pull_together(swap) is False
    assert check_pull_together(solution.pull_together) is True


def test_exercise_3_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(capsys, minilm):
    words = ["cat", "dog", "elephant", "tiger", "china", "japan", "france", "germany",
             "pizza", "sushi", "bread", "noodle", "computer", "laptop", "phone", "tablet"]
    assert check_embed_and_project(placeholders()["embed_and_project"], minilm, words) is False
    assert "not solved yet" in capsys.readouterr().out
    noise = lambda model, ws: (np.random.default_rng(0).normal(size=(len(ws), 384)), np.zeros((len(ws), 2)))
    assert check_embed_and_project(noise, minilm, words) is False
    assert check_embed_and_project(solution.embed_and_project, minilm, words) is True


# ------------------------------------------------------------------------------- the stored notebooks
@pytest.mark.parametrize("lang", NOTEBOOKS)
def test_stored_notebook_is_one_clean_run_with_the_exercises_unsolved(lang):
    nb = read(lang)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run `python -m book.nbexec`"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o.text for o in outputs if o.get("name") == "stderr"], "a warning (missing glyph?) reached the page"
    assert any("image/png" in o.get("data", {}) for o in outputs)
    printed = text_of(nb)
    for n in (1, 2, 3):
        assert NOT_SOLVED[lang].format(n) in printed
    assert "corpus: " in printed and "model: all-MiniLM-L6-v2" in printed       # the page credits its sources


def test_editions_share_their_code_and_differ_in_prose():
    zh, en = read("zh"), read("en")
    assert [c.cell_type for c in zh.cells] == [c.cell_type for c in en.cells]
    for a, b in zip(zh.cells, en.cells):
        if a.cell_type == "code":
            assert a.source.replace('setup("zh")', 'setup("en")') == b.source
            assert a.metadata.get("tags") == b.metadata.get("tags")
        else:
            assert a.source != b.source, f"untranslated cell: {a.source[:60]}"


# ------------------------------------------------------------------------------- the whole lesson, solved
@pytest.mark.parametrize("lang", NOTEBOOKS)
def test_lesson_runs_with_the_solutions_in_time_and_every_check_passes(lang):
    nb, seconds = execute(NOTEBOOKS[lang], solutions=True)
    printed = text_of(nb)
    similarities = {m[1].strip(): (float(m[2]), float(m[3]), f"{m[4]}/{m[5]}") for m in SIMILARITY.finditer(printed)}
    print(f"\n{lang}: {seconds:.0f} s")
    for name, (within, cross, hits) in similarities.items():
        print(f"  {name}: within-group {within:.2f}, cross-group {cross:.2f}, nearest neighbour in own group {hits}")
    assert seconds < MAX_SECONDS
    for n in (1, 2, 3):
        assert PASSED[lang].format(n) in printed
    assert set(similarities) == {"before training", "after training", "all-MiniLM-L6-v2"}
    for name in ("after training", "all-MiniLM-L6-v2"):
        within, cross, _ = similarities[name]
        assert within > cross + 0.1, f"{name}: the groups did not separate"
