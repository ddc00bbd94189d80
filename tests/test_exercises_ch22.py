"""Chapter 22's exercises: each check fails on the page's placeholder and on the typical wrong
answers of its topic, and passes with the solution."""

import pytest

from book.exercises import ch22 as ex
from book.solutions import ch22 as sol
from tests.test_exercises import placeholder, quiet

PAGE = "22-mtp.md"


def _always_two(logits, guess):  # the bonus token even after a wrong guess
    return [int(logits[0].argmax()), int(logits[1].argmax())]


def _second_row(logits, guess):  # the guess judged by the row that read it
    if int(logits[1].argmax()) == guess:
        return [guess, int(logits[1].argmax())]
    return [int(logits[0].argmax())]


def _never_bonus(logits, guess):  # a right guess, but the free token forgotten
    return [int(logits[0].argmax())]


def _last_state(states, seen, n, width):  # the state after the whole step
    return states[-1], seen[..., n : n + width]


def _window_one_early(states, seen, n, width):  # the slice off by one
    return states[n - 1], seen[..., n - 1 : n - 1 + width]


def _window_of_the_step(states, seen, n, width):  # the last columns, as after the whole step
    return states[n - 1], seen[..., -width:]


def _next_target(hidden, ids):  # the model's own target, the next token
    return hidden[:, :-2], ids[:, 1:-1], ids[:, 1:-1]


def _token_itself(hidden, ids):  # the embedding of token i, which the hidden state has read
    return hidden[:, :-2], ids[:, :-2], ids[:, 2:]


def _hidden_late(hidden, ids):  # the hidden state one place late
    return hidden[:, 1:-1], ids[:, 1:-1], ids[:, 2:]


def _one_row_too_many(hidden, ids):  # T - 1 rows: the last one has no target
    return hidden[:, :-1], ids[:, 1:], ids[:, 1:]


CASES = [
    (ex.check_ch22_accept, sol.accept, [_always_two, _second_row, _never_bonus]),
    (ex.check_ch22_keep, sol.keep_first, [_last_state, _window_one_early, _window_of_the_step]),
    (
        ex.check_ch22_speedup,
        sol.speedup,
        [
            lambda a, c1, c2, cm: (1 + a) * c1 / c2,  # the guess is free
            lambda a, c1, c2, cm: (1 + a) * c2 / (c1 + cm),  # the ratio upside down
            lambda a, c1, c2, cm: 1 / (1 - a + 1e-9),  # a geometric series, no costs
        ],
    ),
    (
        ex.check_ch22_rows,
        sol.next_next,
        [_next_target, _token_itself, _hidden_late, _one_row_too_many],
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
        ex.check_ch22_accept: [
            (_always_two, "a wrong guess gives one token"),
            (_second_row, "compare the guess with row 0"),
            (_never_bonus, "the free one"),
        ],
        ex.check_ch22_keep: [
            (_last_state, "after the step's last token"),
            (_window_one_early, "one column off"),
            (_window_of_the_step, "after the whole step"),
        ],
        ex.check_ch22_speedup: [
            (CASES[2][2][0], "the guess costs time too"),
            (CASES[2][2][1], "upside down"),
        ],
        ex.check_ch22_rows: [
            (_next_target, "the model's own target"),
            (_token_itself, "token i itself"),
            (_hidden_late, "one place late"),
            (_one_row_too_many, "T - 2 rows"),
        ],
    }
    for check, answers in said.items():
        for answer, words in answers:
            assert words in quiet(check, answer)[1], (check.__name__, words)
    assert "作废" in quiet(ex.check_ch22_accept, _always_two, lang="zh")[1]
    assert "错开了一列" in quiet(ex.check_ch22_keep, _window_one_early, lang="zh")[1]
    assert "晚了一个位置" in quiet(ex.check_ch22_rows, _hidden_late, lang="zh")[1]
