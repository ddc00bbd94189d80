"""Chapter 22's exercises: the greedy acceptance rule of a verify step, keeping the first n tokens
of a step's DeltaNet states and conv window, the speed-up at an acceptance rate, the rows of the
next-next-token loss."""

import torch

from book.exercises import TODO, Unsolved, _close, _t, exercise  # noqa: F401

__all__ = ["TODO", "check_ch22_accept", "check_ch22_keep", "check_ch22_speedup", "check_ch22_rows"]


def _tokens(got):
    got = got.tolist() if torch.is_tensor(got) else got
    if isinstance(got, int):
        return [got]
    return [int(t) for t in got]


@exercise("22.1")
def check_ch22_accept(accept):
    """accept(logits [2, V], guess) -> the tokens a verify step of [last token, guess] gives."""
    gen = torch.Generator().manual_seed(28)
    V = 50
    for case in range(12):
        logits = torch.randn(2, V, generator=gen)
        own, after = int(logits[0].argmax()), int(logits[1].argmax())
        right = case % 2 == 1
        if right:
            guess = own
        elif case % 4 == 0 and after != own:  # a wrong guess that row 1 picks: row 0 judges
            guess = after
        else:
            guess = (own + 1 + case) % V
        want = [own, after] if right else [own]
        got = _tokens(accept(logits.clone(), guess))
        if got == want:
            continue
        what = _t(
            f"猜测 {guess}，第 0 行的 argmax {own}，第 1 行的 argmax {after}："
            f"应得 {want}，得到 {got}",
            f"guess {guess}, argmax of row 0 {own}, of row 1 {after}: "
            f"should give {want}, got {got}",
        )
        if not right and got[:1] == [guess]:
            hint = _t(
                "猜测要和第 0 行的 argmax 比：第 0 行读的是上一个词元，说的是猜测那个位置该是什么",
                "compare the guess with row 0's argmax: row 0 reads the last token and says what "
                "belongs where the guess stands",
            )
        elif not right and len(got) == 2:
            hint = _t(
                "猜错了只出一个词元（模型自己的第 0 行）：第 1 行是在错的猜测之后算的，作废",
                "a wrong guess gives one token (the model's own, row 0): row 1 was computed after "
                "the wrong guess and is thrown away",
            )
        elif right and len(got) == 1:
            hint = _t(
                "猜对了有两个词元：猜测本身，再加第 1 行的 argmax，白送的那一个",
                "a right guess gives two tokens: the guess, and row 1's argmax, the free one",
            )
        else:
            hint = _t(
                "第 0 行的 argmax 等于猜测时出 [猜测, 第 1 行的 argmax]，"
                "否则只出 [第 0 行的 argmax]",
                "row 0's argmax equal to the guess: [guess, row 1's argmax]; else [row 0's argmax]",
            )
        return [what, hint]
    return []


@exercise("22.2")
def check_ch22_keep(keep_first):
    """keep_first(states, seen, n, width) -> (state, conv) after the first n of a step's tokens:
    states[t] is the DeltaNet state after token t of the step; seen [B, C, width + T] the conv
    window before the step (width = conv_kernel - 1 columns) followed by the step's T inputs."""
    gen = torch.Generator().manual_seed(282)
    width = 3
    for T, n in ((2, 1), (3, 1), (3, 2), (2, 2), (3, 3)):
        states = [torch.randn(1, 2, 4, 4, generator=gen) for _ in range(T)]
        seen = torch.arange(width + T, dtype=torch.float32).expand(1, 5, width + T).clone()
        seen += 100 * torch.arange(5.0)[None, :, None]
        got = keep_first([s.clone() for s in states], seen.clone(), n, width)
        state, conv = got
        state, conv = torch.as_tensor(state), torch.as_tensor(conv)
        case = _t(f"一步 {T} 个词元，留前 {n} 个", f"a step of {T} tokens, keeping the first {n}")
        if not _close(state, states[n - 1]):
            if _close(state, states[-1]):
                hint = _t(
                    "这是整步最后一个词元之后的状态：留 n 个，要第 n 个词元之后的 states[n - 1]",
                    "that is the state after the step's last token: keeping n, take the state "
                    "after token n, states[n - 1]",
                )
            else:
                hint = _t("状态应为 states[n - 1]", "the state should be states[n - 1]")
            return [case, hint]
        want = seen[..., n : n + width]
        if not _close(conv, want):
            cols = conv[0, 0].tolist() if conv.dim() == 3 else conv.tolist()
            if n < T and _close(conv, seen[..., -width:]):
                hint = _t(
                    "这是整步之后的窗口（seen 的最后几列）：被丢掉的词元的输入还在里面",
                    "that is the window after the whole step (seen's last columns): it still "
                    "holds the inputs of the tokens dropped",
                )
            elif conv.shape == want.shape and (
                _close(conv, seen[..., n - 1 : n - 1 + width])
                or (
                    n + 1 + width <= seen.shape[-1]
                    and _close(conv, seen[..., n + 1 : n + 1 + width])
                )
            ):
                hint = _t(
                    f"窗口错开了一列（得到第 {cols} 列）：前 n 个词元之后，窗口是 seen 里第 n 到 "
                    f"n + width - 1 列，刚好以第 n 个新输入结尾",
                    f"the window is one column off (got columns {cols}): after n tokens it is "
                    f"columns n to n + width - 1 of seen, ending with the n-th new input",
                )
            else:
                hint = _t(
                    f"卷积窗口应为 seen[..., n:n + width]（{width} 列）",
                    f"the conv window should be seen[..., n:n + width] ({width} columns)",
                )
            return [case, hint]
    return []


@exercise("22.3")
def check_ch22_speedup(speedup):
    """speedup(alpha, c1, c2, c_mtp) -> tokens per second against greedy decoding, with one guess
    per call accepted at rate alpha; c1, c2: a 1- and a 2-token call, c_mtp: one guess."""
    for alpha, c1, c2, cm in (
        (0.0, 1.0, 1.2, 0.3),
        (0.7, 200.0, 230.0, 60.0),
        (0.5, 1.0, 1.3, 0.3),
        (1.0, 10.0, 12.0, 3.0),
        (0.3, 2.0, 2.2, 0.5),
    ):
        want = (1 + alpha) * c1 / (c2 + cm)
        got = float(speedup(alpha, c1, c2, cm))
        if abs(got - want) <= 1e-9 * max(1.0, abs(want)):
            continue
        case = _t(
            f"α = {alpha}, c1 = {c1}, c2 = {c2}, c_mtp = {cm}",
            f"α = {alpha}, c1 = {c1}, c2 = {c2}, c_mtp = {cm}",
        )
        if abs(got - (1 + alpha) * c1 / c2) < 1e-9 * max(1.0, want):
            hint = _t(
                "猜测本身也要时间：每次调用还要加上 MTP 头的 c_mtp",
                "the guess costs time too: add the MTP head's c_mtp to every call",
            )
        elif abs(got - (1 + alpha) * c2 / (c1 + cm)) < 1e-9 * max(1.0, want) or abs(
            got - (1 + alpha) / (c1 + cm) * c2
        ) < 1e-9 * max(1.0, want):
            hint = _t(
                "代价比倒过来了：贪心每个词元花 c1，投机每次调用花 c2 + c_mtp",
                "the cost ratio is upside down: greedy pays c1 a token, speculation "
                "c2 + c_mtp a call",
            )
        else:
            hint = _t(
                "每次调用出 1 + α 个词元，花 c2 + c_mtp；贪心每个词元花 c1",
                "each call gives 1 + α tokens for c2 + c_mtp; greedy pays c1 a token",
            )
        return [
            case
            + _t(f"：应为 {want:.4g}，得到 {got:.4g}", f": should be {want:.4g}, got {got:.4g}"),
            hint,
        ]
    return []


@exercise("22.4")
def check_ch22_rows(next_next):
    """next_next(hidden [B, T, d], ids [B, T]) -> (h, reads, targets): the hidden states the head's
    rows read, the token ids whose embeddings they read, the ids they are scored on; T - 2 rows."""
    gen = torch.Generator().manual_seed(224)
    for B, T in ((1, 6), (2, 9), (3, 4)):
        ids = torch.randint(0, 1000, (B, T), generator=gen)
        # hidden state t of sequence b carries its position, so a slice can be read back
        hidden = (torch.arange(T, dtype=torch.float32) + 100 * torch.arange(B)[:, None])[..., None]
        hidden = hidden.expand(B, T, 4).clone()
        got = next_next(hidden.clone(), ids.clone())
        h, reads, targets = (torch.as_tensor(x) for x in got)
        case = _t(f"{B} 个窗口、每个 {T} 个词元", f"{B} windows of {T} tokens")
        rows = T - 2
        if h.shape[:2] != (B, rows) or reads.shape != (B, rows) or targets.shape != (B, rows):
            return [
                case
                + _t(
                    f"：h、reads、targets 应为 [{B}, {rows}, …]、[{B}, {rows}]、[{B}, {rows}]，"
                    f"得到 {list(h.shape)}、{list(reads.shape)}、{list(targets.shape)}",
                    f": h, reads, targets should be [{B}, {rows}, …], [{B}, {rows}], "
                    f"[{B}, {rows}]; got {list(h.shape)}, {list(reads.shape)}, "
                    f"{list(targets.shape)}",
                ),
                _t(
                    "窗口里最后两个位置后面没有第 i + 2 个词元：只有 T - 2 行",
                    "the last two positions have no token i + 2 in the window: T - 2 rows",
                ),
            ]
        if not torch.equal(targets, ids[:, 2:]):
            if torch.equal(targets, ids[:, 1:-1]):
                hint = _t(
                    "这是模型自己的目标，下一个词元；头猜的是再下一个：第 i + 2 个",
                    "that is the model's own target, the next token; the head guesses the one "
                    "after: token i + 2",
                )
            else:
                hint = _t("第 i 行按第 i + 2 个词元打分", "row i is scored on token i + 2")
            return [case, hint]
        if not torch.equal(reads, ids[:, 1:-1]):
            if torch.equal(reads, ids[:, :-2]):
                hint = _t(
                    "这是第 i 个词元本身，隐藏状态已经读过它了；头读的是第 i + 1 个词元，"
                    "也就是模型刚预测、现在已知的那个",
                    "that is token i itself, which the hidden state has already read; the head "
                    "reads token i + 1, the one the model just predicted and is now known",
                )
            else:
                hint = _t(
                    "第 i 行读第 i + 1 个词元的嵌入", "row i reads the embedding of token i + 1"
                )
            return [case, hint]
        if not torch.equal(h, hidden[:, :-2]):
            if h.shape == hidden[:, 1:-1].shape and torch.equal(h, hidden[:, 1:-1]):
                hint = _t(
                    "晚了一个位置：第 i 行读第 i 个位置的隐藏状态，模型在那里读了第 i 个词元、"
                    "预测了第 i + 1 个",
                    "one place late: row i reads the hidden state at position i, where the model "
                    "read token i and predicted token i + 1",
                )
            else:
                hint = _t("h 应为 hidden[:, :-2]", "h should be hidden[:, :-2]")
            return [case, hint]
    return []
