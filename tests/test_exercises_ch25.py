"""Chapter 25's exercises: each check fails on the page's placeholder and on the typical wrong
answers of its topic, and passes with the solution."""

import pytest
import torch

from book.exercises import ch25 as ex
from book.solutions import ch25 as sol
from tests.test_exercises import placeholder, quiet

PAGE = "25-mrope.md"


def _blocks(sections):  # Qwen2-VL's layout: [t ... t, h ... h, w ... w]
    return [a for a, s in enumerate(sections) for _ in range(s)]


def _h_w_swapped(sections):  # j % 3 == 1 -> width, j % 3 == 2 -> height
    return [{1: 2, 2: 1}.get(a, a) for a in sol.axes(sections)]


def _no_limit(sections):  # j % 3 alone: right while the sections are nearly equal, not [24, 20, 20]
    return [j % 3 for j in range(sum(sections))]


def _from_the_count(ids, h, w, pad):  # text after the image continues from the token count
    out = sol.positions(ids, h, w, pad)
    end = ids.index(pad) + h * w
    out[:, end:] = torch.arange(end, len(ids))
    return out


def _rows_cols_swapped(ids, h, w, pad):  # height reads the column, width the row
    out = sol.positions(ids, h, w, pad)
    start = ids.index(pad)
    out[[1, 2], start : start + h * w] = out[[2, 1], start : start + h * w]
    return out


def _not_offset(ids, h, w, pad):  # the image's positions from 0, not from where it starts
    out = sol.positions(ids, h, w, pad)
    start = ids.index(pad)
    out[:, start : start + h * w] -= start
    return out


def _time_is_the_index(ids, h, w, pad):  # every image token a frame of its own
    out = sol.positions(ids, h, w, pad)
    start = ids.index(pad)
    out[0, start : start + h * w] = torch.arange(start, start + h * w)
    return out


CASES = [
    (ex.check_ch25_axes, sol.axes, [_blocks, _h_w_swapped, _no_limit]),
    (
        ex.check_ch25_positions,
        sol.positions,
        [_from_the_count, _rows_cols_swapped, _not_offset, _time_is_the_index],
    ),
    (
        ex.check_ch25_decode,
        sol.decode_position,
        [
            lambda p, past: past,  # the text-only position
            lambda p, past: p.max().item() + 1,  # never moves on
            lambda p, past: past - (p.max().item() + 1 - p.shape[1]),
        ],
    ),  # delta's sign flipped
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
        ex.check_ch25_axes: [
            (_blocks, "contiguous blocks"),
            (_h_w_swapped, "swapped"),
            (_no_limit, "below 3 × 20"),
        ],
        ex.check_ch25_positions: [
            (_from_the_count, "not from the token count"),
            (_rows_cols_swapped, "rows and columns are swapped"),
            (_not_offset, "not from 0"),
            (_time_is_the_index, "one frame"),
        ],
        ex.check_ch25_decode: [
            (CASES[2][2][0], "text-only position"),
            (CASES[2][2][1], "moves one further"),
            (CASES[2][2][2], "sign of delta"),
        ],
    }
    for check, answers in said.items():
        for answer, words in answers:
            assert words in quiet(check, answer)[1], (check.__name__, words)
    assert "分块" in quiet(ex.check_ch25_axes, _blocks, lang="zh")[1]
    assert "词元个数" in quiet(ex.check_ch25_positions, _from_the_count, lang="zh")[1]
