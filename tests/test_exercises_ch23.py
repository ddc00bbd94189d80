"""Chapter 23's exercises: each check fails on the page's placeholder and on the typical wrong
answers of its topic, and passes with the solution."""

import math

import pytest
import torch

from book.exercises import ch23 as ex
from book.solutions import ch23 as sol
from tests.test_exercises import placeholder, quiet

PAGE = "23-pixels.md"


def _row_order(pixels, p, t=2, m=2):  # patches row by row: the merger would join a 1 x 4 strip
    C, H, W = pixels.shape
    x = pixels.reshape(C, H // p, p, W // p, p).permute(1, 3, 0, 2, 4)  # [h, w, C, p, p]
    x = x.unsqueeze(3).expand(H // p, W // p, C, t, p, p)
    return x.reshape(-1, C * t * p * p)


def _time_first(pixels, p, t=2, m=2):  # a row [t][C][p][p] instead of [C][t][p][p]
    rows = sol.cut(pixels, p, t, m)
    return rows.view(-1, 3, t, p * p).transpose(1, 2).reshape(rows.shape)


def _h_w_swapped(pixels, p, t=2, m=2):  # h and w confused: right only on a square grid
    C, H, W = pixels.shape
    h, w = W // p, H // p
    x = pixels.reshape(C, h // m, m, p, w // m, m, p).permute(1, 4, 2, 5, 0, 3, 6)
    return x.unsqueeze(5).expand(*x.shape[:5], t, p, p).reshape(h * w, C * t * p * p)


def _one_frame(pixels, p, t=2, m=2):  # the still image not doubled
    return sol.cut(pixels, p, 1, m)


CASES = [
    (
        ex.check_ch23_smart_resize,
        sol.resize,
        [
            lambda h, w, f, lo, hi: (h // f * f, w // f * f),  # rounds down
            lambda h, w, f, lo, hi: (round(h / f) * f, round(w / f) * f),  # ignores the budget
            lambda h, w, f, lo, hi: sol.resize(w, h, f, lo, hi),  # width first
            # half way rounds up, not to the even number as round() and the processor do
            lambda h, w, f, lo, hi: (
                sol.resize(h, w, f, lo, hi)
                if (math.floor(h / f + 0.5) * f) * (math.floor(w / f + 0.5) * f) > hi
                or (math.floor(h / f + 0.5) * f) * (math.floor(w / f + 0.5) * f) < lo
                else (math.floor(h / f + 0.5) * f, math.floor(w / f + 0.5) * f)
            ),
        ],
    ),
    (ex.check_ch23_patches, sol.cut, [_row_order, _time_first, _h_w_swapped, _one_frame]),
    (
        ex.check_ch23_normalize,
        sol.normalize,
        [
            lambda x, mean, std: x.float() / 255,  # only rescaled
            lambda x, mean, std: sol.normalize(x, std, mean),  # mean and std swapped
            lambda x, mean, std: x.float() / 127.5 - 1,  # right for 0.5 / 0.5 only
            lambda x, mean, std: (x.float() / 255 - torch.tensor(mean)) / torch.tensor(std),
        ],
    ),
]


@pytest.mark.parametrize("check, solution, wrong", CASES, ids=[c[0].__name__ for c in CASES])
def test_check_fails_on_the_placeholder_and_wrong_answers_and_passes_the_solution(
    check, solution, wrong
):
    result, printed = quiet(check, placeholder(PAGE, solution.__name__))
    assert result is False and "not solved yet" in printed
    for answer in wrong:
        result, printed = quiet(check, answer)
        assert result is False and "not right yet" in printed, printed
    result, printed = quiet(check, solution, lang="zh")
    assert result is True and "通过" in printed, printed


def test_the_hints_name_the_case_that_failed():
    said = {
        ex.check_ch23_smart_resize: [
            (CASES[0][2][0], "rounds down"),
            (CASES[0][2][1], "below min_pixels"),
            (CASES[0][2][2], "swapped"),
            (CASES[0][2][3], "even number"),
        ],
        ex.check_ch23_patches: [
            (_row_order, "row order"),
            (_time_first, "channel first"),
            (_h_w_swapped, "block by block"),
            (_one_frame, "2 equal frames"),
        ],
        ex.check_ch23_normalize: [
            (CASES[2][2][0], "only rescaled"),
            (CASES[2][2][1], "swapped"),
            (CASES[2][2][2], "0.5 only"),
        ],
    }
    for check, answers in said.items():
        for answer, words in answers:
            assert words in quiet(check, answer)[1], (check.__name__, words)
    assert "逐行" in quiet(ex.check_ch23_patches, _row_order, lang="zh")[1]
