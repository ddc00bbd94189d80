"""Chapter 26's exercises: each check fails on the page's placeholder and on the typical wrong
answers of its topic, and passes with the solution."""

import pytest
import torch

from book.exercises import ch26 as ex
from book.solutions import ch26 as sol
from tests.test_exercises import placeholder, quiet

PAGE = "26-image-chat.md"


def _patches(h, w, p, m, lo, hi):  # the 2 x 2 merge forgotten: patches, not tokens
    return sol.tokens(h, w, p, m, lo, hi) * m * m


def _no_budget(h, w, p, m, lo, hi):  # the nearest multiples, whatever the area
    f = p * m
    return (round(h / f) * f // p) * (round(w / f) * f // p) // (m * m)


def _floor(h, w, p, m, lo, hi):  # rounds down instead of to the nearest
    return sol.tokens(h // (p * m) * p * m, w // (p * m) * p * m, p, m, lo, hi)


def _in_place(x, ids, pad, features):  # writes into the caller's embeddings
    x[ids == pad] = features
    return x


def _swapped(x, ids, pad, features):  # the images' order reversed
    out, mask = x.clone(), ids == pad
    runs = []
    flat = mask.flatten().tolist()
    for i, m in enumerate(flat):  # the length of each run of pads, in order
        if m and (i == 0 or not flat[i - 1] or i % ids.shape[1] == 0):
            runs.append(0)
        if m:
            runs[-1] += 1
    out[mask] = torch.cat(list(features.split(runs))[::-1])
    return out


def _off_by_one(x, ids, pad, features):  # one position too far
    out = x.clone()
    out[torch.roll(ids == pad, 1, dims=1)] = features
    return out


def _batch_of_one(x, ids, pad, features):  # the pads of the first prompt, for every prompt
    out = x.clone()
    where = (ids[0] == pad).nonzero().flatten()
    out[:, where] = features[: len(where)]
    return out


def _no_refusal(x, ids, pad, features):  # places what fits, says nothing
    out, mask = x.clone(), ids == pad
    n = min(int(mask.sum()), features.shape[0])
    out[mask.cumsum(-1).le(n) & mask] = features[:n]
    return out


CASES = [
    (ex.check_ch26_tokens, sol.tokens, [_patches, _no_budget, _floor]),
    (
        ex.check_ch26_place,
        sol.place,
        [_in_place, _swapped, _off_by_one, _batch_of_one, _no_refusal],
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
        ex.check_ch26_tokens: [
            (_patches, "divide by 4"),
            (_no_budget, "leaves the budget"),
            (_floor, "rounds down"),
        ],
        ex.check_ch26_place: [
            (_in_place, "input x was changed"),
            (_swapped, "out of order"),
            (_off_by_one, "off by one"),
            (_batch_of_one, "a batch"),
            (_no_refusal, "must be refused"),
        ],
    }
    for check, answers in said.items():
        for answer, words in answers:
            assert words in quiet(check, answer)[1], (check.__name__, words)
    assert "合并器" in quiet(ex.check_ch26_tokens, _patches, lang="zh")[1]
