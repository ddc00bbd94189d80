"""Solutions to chapter 22's exercises (book/exercises/ch22.py checks them); the page shows each in
a collapsed block, included from the named sections below."""

# fmt: off

# --8<-- [start:ch22_accept]
def accept(logits, guess):
    """[上一个词元, 猜测] 的 logits [2, V] -> 出来的词元 / the tokens that come out."""
    own = int(logits[0].argmax())                  # the model's token where the guess stands
    if own != guess:
        return [own]                               # wrong: row 1 read a wrong token, drop it
    return [guess, int(logits[1].argmax())]        # right: and the token after it, for free
# --8<-- [end:ch22_accept]


# --8<-- [start:ch22_keep]
def keep_first(states, seen, n, width):
    """前 n 个词元之后的状态和卷积窗口 / state and conv window after the first n tokens."""
    return states[n - 1], seen[..., n:n + width].clone()   # window ends at the n-th new input
# --8<-- [end:ch22_keep]


# --8<-- [start:ch22_speedup]
def speedup(alpha, c1, c2, c_mtp):
    """相对贪心的速度 / speed against greedy: 1 + α tokens per c2 + c_mtp, against 1 per c1."""
    return (1 + alpha) * c1 / (c2 + c_mtp)
# --8<-- [end:ch22_speedup]


# --8<-- [start:ch22_rows]
def next_next(hidden, ids):
    """头的各行读什么、按什么打分 / what the head's rows read, and what they are scored on."""
    h = hidden[:, :-2]          # row i: the model's hidden state at position i
    reads = ids[:, 1:-1]        # and token i + 1, known once the model has predicted it
    targets = ids[:, 2:]        # scored on token i + 2
    return h, reads, targets
# --8<-- [end:ch22_rows]
