"""Chapter 24's exercises: each check fails on the page's placeholder and on the typical wrong
answers of its topic, and passes with the solution."""

import pytest
import torch
import torch.nn.functional as F

from book.exercises import ch24 as ex
from book.solutions import ch24 as sol
from tests.test_exercises import placeholder, quiet

PAGE = "24-vision.md"


def _interp(table, h, w, **how):
    side = round(table.shape[0] ** 0.5)
    grid = F.interpolate(table.T.reshape(1, -1, side, side), size=(h, w), **how)
    return grid[0].permute(1, 2, 0)


def _nearest(table, h, w):  # nearest instead of bilinear
    return _interp(table, h, w, mode="nearest")


def _corners_off(table, h, w):  # align_corners=False: the corners miss the table's corners
    return _interp(table, h, w, mode="bilinear", align_corners=False)


def _swapped(table, h, w):  # h and w confused
    return sol.stretch(table, w, h)


def _cropped(table, h, w):  # the table cut to the grid instead of stretched
    side = round(table.shape[0] ** 0.5)
    return table.view(side, side, -1)[:h, :w]


def _one_mask(cu):  # every patch reads every patch of the batch
    return torch.ones(cu[-1], cu[-1], dtype=torch.bool)


def _causal(cu):  # a causal mask inside each image, as in the text model
    return sol.mask_of(cu).tril()


def _off_by_one(cu):  # the last patch of each image given to the next one
    n = cu[-1]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for a, b in zip(cu[:-1], cu[1:]):
        mask[a : b - 1, a : b - 1] = True
        mask[b - 1 : b + 1, b - 1 : b + 1] = True
    return mask[:n, :n]


def _no_bias(rows, weight, bias):
    return rows @ weight.flatten(1).T


def _time_first(rows, weight, bias):  # the kernel flattened [t][C][y][x]
    return rows @ weight.transpose(1, 2).flatten(1).T + bias


def _x_y_swapped(rows, weight, bias):
    return rows @ weight.transpose(3, 4).flatten(1).T + bias


def _not_transposed(rows, weight, bias):  # [N, K] @ [hidden, K]: raises
    return rows @ weight.flatten(1) + bias


CASES = [
    (ex.check_ch24_resample, sol.stretch, [_nearest, _corners_off, _swapped, _cropped]),
    (ex.check_ch24_image_mask, sol.mask_of, [_one_mask, _causal, _off_by_one]),
    (
        ex.check_ch24_patch_embed,
        sol.embed,
        [_no_bias, _time_first, _x_y_swapped, _not_transposed],
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
        ex.check_ch24_resample: [
            (_nearest, "nearest"),
            (_corners_off, "align_corners=False"),
            (_swapped, "swapped"),
            (_cropped, "not resized"),
        ],
        ex.check_ch24_image_mask: [
            (_one_mask, "one mask over all images"),
            (_causal, "causal"),
            (_off_by_one, "cu_seqlens[k + 1] - 1"),
        ],
        ex.check_ch24_patch_embed: [
            (_no_bias, "bias is missing"),
            (_time_first, "channel and frame are swapped"),
            (_x_y_swapped, "y and x are swapped"),
            (_not_transposed, "raised"),
        ],
    }
    for check, answers in said.items():
        for answer, words in answers:
            assert words in quiet(check, answer)[1], (check.__name__, words)
    assert "因果" in quiet(ex.check_ch24_image_mask, _causal, lang="zh")[1]
    assert "最近邻" in quiet(ex.check_ch24_resample, _nearest, lang="zh")[1]
