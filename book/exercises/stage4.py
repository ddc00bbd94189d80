"""Training's checks: chapters 17 to 21 (loss, gradients, backward, LoRA, from scratch)."""

import math

import torch
import torch.nn.functional as F

from book.exercises.base import _close, _on, _shape_problem, _t, exercise


# ---------------------------------------------------------------------------- ch17
@exercise("17.1")
def check_ch17_masked_perplexity(masked_perplexity):
    """masked_perplexity(nll, mask) -> exp(mean loss over the scored tokens): nll [B, T] is the
    loss of position t predicting token t + 1, mask [B, T] says which tokens are targets."""
    gen = torch.Generator().manual_seed(17)
    nll = torch.rand(3, 8, generator=gen, dtype=torch.float64) * 6
    mask = torch.zeros(3, 8, dtype=torch.bool)
    mask[0, 2:] = True  # a short prompt, a long answer
    mask[1, 6:] = True  # a long prompt, a two-token answer
    mask[2, 0:5] = True  # an answer from the first token (nothing predicts it), then padding
    scored = mask[:, 1:]  # token t + 1 is predicted at position t
    want = math.exp(nll[:, :-1][scored].mean().item())
    got = float(masked_perplexity(nll.clone(), mask.clone()))
    if math.isclose(got, want, rel_tol=1e-6):
        return []
    if math.isclose(got, math.exp(nll[mask].mean().item()), rel_tol=1e-6):
        return [
            _t(
                "忘了错位：位置 t 的损失预测的是第 t + 1 个词元，要用 mask[:, 1:] 对齐",
                "the shift is forgotten: position t's loss predicts token t + 1, so it is "
                "scored where mask[:, 1:] is True",
            )
        ]
    per_seq = torch.stack([nll[b, :-1][scored[b]].mean() for b in range(3)]).mean()
    if math.isclose(got, math.exp(per_seq.item()), rel_tol=1e-6):
        return [
            _t(
                "先按句子求平均会让短答案和长答案一样重：应对所有被计分的词元一起求平均",
                "averaging per sequence first weighs a two-token answer like a long one: "
                "average over every scored token at once",
            )
        ]
    if math.isclose(
        got, math.exp(nll[:, :-1][scored].sum().item() / mask.sum().item()), rel_tol=1e-6
    ):
        return [
            _t(
                "分母多算了一个：第一个词元就是目标时，没有位置预测它，要除以 mask[:, 1:] 的个数",
                "one too many in the denominator: when the very first token is a target nothing "
                "predicts it; divide by the count of mask[:, 1:]",
            )
        ]
    return [
        _t(f"困惑度应为 {want:.4f}，得到 {got:.4f}", f"want perplexity {want:.4f}, got {got:.4f}")
    ]


@exercise("17.2")
def check_ch17_loss_ignore(loss):
    """loss(logits, targets) -> the mean of logsumexp(logits) - logits[target] over the targets
    that are not -100; logits [N, V] may be large."""
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(12, 50, generator=gen) * 40 + 60  # e^z overflows fp32 beyond 88
    targets = torch.randint(0, 50, (12,), generator=gen)
    targets[::3] = -100
    targets[1] = targets[5] = 0  # token id 0 is a real token, not an ignored one
    want = F.cross_entropy(logits.double(), targets).item()
    got = float(loss(logits.clone(), targets.clone()))
    if got != got or abs(got) == float("inf"):
        return [
            _t(
                "得到 nan 或 inf：e^z 在 fp32 里溢出了，用 logsumexp（先减去最大值）",
                "nan or inf: e^z overflows in fp32; use logsumexp (subtract the max first)",
            )
        ]
    kept = targets != -100
    if math.isclose(got, want * kept.sum().item() / len(targets), rel_tol=1e-4):
        return [
            _t(
                "被忽略的位置也算进了分母：只除以被计分的目标个数",
                "the ignored positions are counted in the mean: divide by the scored targets only",
            )
        ]
    if not math.isclose(got, want, rel_tol=1e-4):
        scored0 = targets > 0
        wrong0 = F.cross_entropy(logits[scored0].double(), targets[scored0]).item()
        if math.isclose(got, wrong0, rel_tol=1e-4):
            return [
                _t(
                    "目标为 0 的位置被丢掉了：0 是一个真正的 token id，只有 -100 才忽略",
                    "the targets equal to token id 0 were dropped: 0 is a real token id, only "
                    "-100 is ignored",
                )
            ]
        return [_t(f"损失应为 {want:.4f}，得到 {got:.4f}", f"want loss {want:.4f}, got {got:.4f}")]
    # bf16 logits, as a bf16 model returns them: logsumexp in bf16 is off in the third digit
    low = (torch.randn(12, 50, generator=gen) * 4).bfloat16()
    want = F.cross_entropy(low.double(), targets).item()
    got = torch.as_tensor(_on("bf16 logits", loss, low.clone(), targets.clone()))
    if not math.isclose(float(got), want, rel_tol=1e-4):
        return [
            _t(
                f"bf16 的 logits：损失应为 {want:.5f}，得到 {float(got):.5f}：先转成 fp32"
                "（或 fp64）再算 logsumexp，bf16 只有 3 位有效数字",
                f"bf16 logits: want loss {want:.5f}, got {float(got):.5f}: move them to fp32 "
                "(or fp64) before the logsumexp, bf16 keeps about 3 significant digits",
            )
        ]
    return []


# ---------------------------------------------------------------------------- ch18
class _LiveSaved:
    """Count the tensors autograd keeps for a backward that are alive at once (the peak)."""

    def __init__(self):
        self.now = self.peak = 0

    def _pack(self, t):
        return _Held(t, self)

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda held: held.t)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)


class _Held:
    def __init__(self, t, live):
        self.t, self.live = t, live
        live.now += 1
        live.peak = max(live.peak, live.now)

    def __del__(self):
        self.live.now -= 1


@exercise("18.1")
def check_ch18_rmsnorm_grad(weight_grad):
    """weight_grad(x, w, dy) -> dL/dw of y = x / rms(x) * (1 + w), rows x [N, d], given dL/dy."""
    from qwen.norm import RMSNorm

    gen = torch.Generator().manual_seed(18)
    for N, d in ((5, 8), (1, 3), (7, 16)):
        x = torch.randn(N, d, generator=gen, dtype=torch.float64) * 3
        if N == 7:
            x[2] *= 3e-4  # a row whose mean square is near eps: eps belongs under the root
        norm = RMSNorm(d).double()
        with torch.no_grad():
            norm.weight.copy_(torch.randn(d, generator=gen, dtype=torch.float64) * 0.5)
        dy = torch.randn(N, d, generator=gen, dtype=torch.float64)
        (norm(x) * dy).sum().backward()
        want = norm.weight.grad
        got = torch.as_tensor(
            _on(f"x [{N}, {d}]", weight_grad, x.clone(), norm.weight.detach().clone(), dy.clone())
        )
        if got.shape != want.shape:
            return [
                _t(
                    f"dw 的形状应为 [{d}]：各行的贡献要加起来",
                    f"dw should have shape [{d}]: add up the rows' contributions",
                )
            ]
        if not _close(got, want, atol=1e-5, rtol=1e-4):  # the norm computes in fp32
            if N == 7:
                return [
                    _t(
                        f"N={N}, d={d}：第 2 行的均方接近 eps，只有它不对时说明 eps 不在开方里："
                        "rsqrt(mean(x²) + 1e-6)",
                        f"N={N}, d={d}: row 2's mean square is near eps; eps goes under the "
                        "root, rsqrt(mean(x²) + 1e-6)",
                    )
                ]
            return [
                _t(
                    f"N={N}, d={d}：与 autograd 的梯度不同"
                    "（dw = Σ_行 dy · x / rms(x)，没有 1 + w）",
                    f"N={N}, d={d}: not autograd's gradient (dw = sum over rows of "
                    "dy * x / rms(x), with no 1 + w)",
                )
            ]
    return []


@exercise("18.2")
def check_ch18_mlp_bytes(mlp_bytes):
    """mlp_bytes(T, dim, hidden) -> the bytes autograd keeps for the backward of one SwiGLU MLP
    on fp32 x [1, T, dim] (its weights not counted), as qwen.train.SavedBytes counts them."""
    from qwen.mlp import MLP
    from qwen.train import SavedBytes

    for T, dim, hidden in ((3, 4, 6), (10, 8, 24), (7, 16, 5)):
        mlp = MLP(dim, hidden)
        x = torch.randn(1, T, dim, requires_grad=True)
        with SavedBytes(mlp) as saved:
            mlp(x)
        got = int(mlp_bytes(T, dim, hidden))
        if got != saved.bytes:
            return [
                _t(
                    f"T={T}, dim={dim}, hidden={hidden}：应为 {saved.bytes:,} 字节，得到 {got:,}"
                    "（x 被 gate 和 up 共用、只存一份；SiLU 存它的输入，乘法存两个因子，"
                    "down 存它的输入；fp32 每个数 4 字节）",
                    f"T={T}, dim={dim}, hidden={hidden}: want {saved.bytes:,} bytes, got "
                    f"{got:,} (x is shared by gate and up, kept once; SiLU keeps its input, "
                    "the product both factors, down its input; fp32 is 4 bytes a number)",
                )
            ]
    return []


@exercise("18.3")
def check_ch18_accumulate(accumulate):
    """accumulate(model, loss_fn, micro_batches): leave in each p.grad the gradient of the mean
    loss over all the micro-batches (equal sizes), one backward per micro-batch."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    batches = [torch.randn(4, 5, generator=gen, dtype=torch.float64) for _ in range(3)]
    whole = torch.nn.Linear(5, 2).double()
    parts = torch.nn.Linear(5, 2).double()
    parts.load_state_dict(whole.state_dict())

    def loss_fn(model, x):
        return (model(x) ** 2).mean()

    loss_fn(whole, torch.cat(batches)).backward()
    one = _LiveSaved()
    with one:  # what one micro-batch keeps for its backward
        loss_fn(parts, batches[0]).backward()
    parts.zero_grad(set_to_none=True)
    live = _LiveSaved()
    with live:
        accumulate(parts, loss_fn, batches)
    for (name, p), q in zip(whole.named_parameters(), parts.parameters()):
        if q.grad is None:
            return [_t(f"{name} 没有梯度", f"{name} has no gradient")]
        if _close(q.grad, p.grad * len(batches)):
            return [
                _t(
                    "梯度大了 k 倍：每个小批次的损失要除以小批次个数",
                    "the gradient is k times too large: divide each micro-batch's loss by "
                    "the number of micro-batches",
                )
            ]
        if not _close(q.grad, p.grad, atol=1e-10, rtol=1e-8):
            return [
                _t(
                    f"{name} 的梯度不等于整批平均损失的梯度（梯度要累加，不要中途清零）",
                    f"{name}: not the gradient of the whole batch's mean loss (let the "
                    "gradients add up; do not zero them in between)",
                )
            ]
    if live.peak > one.peak:
        return [
            _t(
                f"梯度对了，但同时存着 {live.peak} 个反向要用的张量，一个小批次只要 {one.peak} 个："
                "每个小批次算完损失就 backward，别把几个损失加起来最后一起 backward"
                "（那样所有小批次的激活同时活着，省不了内存）",
                f"the gradient is right, but {live.peak} tensors saved for the backward were "
                f"alive at once, where one micro-batch needs {one.peak}: call backward on each "
                "micro-batch's loss right away, do not sum the losses and backward once (that "
                "keeps every micro-batch's activations alive, saving no memory)",
            )
        ]
    return []


# ---------------------------------------------------------------------------- ch19
@exercise("19.1")
def check_ch19_solve_backward(solve_backward):
    """solve_backward(M, U, dU) -> (dX, dM) for U = M^{-1} X, M unit lower triangular [.., C, C]:
    dX = M^{-T} dU, dM = -dX U^T below the diagonal only (the ones and zeros of M are fixed)."""
    gen = torch.Generator().manual_seed(19)
    C, d = 6, 3
    A = (torch.randn(2, C, C, generator=gen, dtype=torch.float64) * 0.3).tril(-1)
    X = torch.randn(2, C, d, generator=gen, dtype=torch.float64, requires_grad=True)
    A.requires_grad_()
    M = A + torch.eye(C, dtype=torch.float64)
    U = torch.linalg.solve_triangular(M, X, upper=False)
    dU = torch.randn(2, C, d, generator=gen, dtype=torch.float64)
    want_dX, want_dA = torch.autograd.grad(U, (X, A), dU)
    want_dA = want_dA.tril(-1)  # only A's strictly lower part is free; the rest of M is fixed
    got = solve_backward(M.detach(), U.detach(), dU)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return [_t("应返回 (dX, dM) 两个张量", "return two tensors, (dX, dM)")]
    dX, dM = (torch.as_tensor(t).double() for t in got)
    problems = [
        p for p in (_shape_problem(dX, want_dX, "dX"), _shape_problem(dM, want_dA, "dM")) if p
    ]
    if problems:
        return problems
    if not _close(dX, want_dX, atol=1e-9, rtol=1e-9):
        wrong_way = torch.linalg.solve_triangular(M.detach(), dU, upper=False)
        return [
            _t(
                "dX 应解 Mᵀ dX = dU（转置的、上三角的方程）"
                + ("：你解的是 M dX = dU，忘了转置" if _close(dX, wrong_way) else ""),
                "dX solves M^T dX = dU (the transposed, upper triangular system)"
                + (
                    ": yours solves M dX = dU, the transpose is missing"
                    if _close(dX, wrong_way)
                    else ""
                ),
            )
        ]
    if dM.triu().abs().max() > 1e-12:
        return [
            _t(
                "dM 在对角线和上三角必须是 0：M 的 1 和 0 是固定的，不是可学的数",
                "dM must be 0 on and above the diagonal: M's ones and zeros are fixed, not inputs",
            )
        ]
    if _close(dM, -want_dA, atol=1e-9, rtol=1e-9):
        return [_t("dM 的符号反了：dM = -dX Uᵀ", "dM has the wrong sign: dM = -dX U^T")]
    if not _close(dM, want_dA, atol=1e-9, rtol=1e-9):
        return [
            _t(
                "dM 的值不对：dM = -dX Uᵀ（取严格下三角）",
                "wrong values in dM: dM = -dX U^T (its strictly lower part)",
            )
        ]
    # one matrix, no batch dimension: M [C, C]; M.T or transpose(1, 2) only fit one of the ranks
    M1, U1, dU1 = M[0].detach(), U[0].detach(), dU[0]
    got1 = _on("M [C, C]", solve_backward, M1, U1, dU1)
    if not (
        isinstance(got1, (tuple, list))
        and len(got1) == 2
        and _close(torch.as_tensor(got1[0]).double(), want_dX[0], atol=1e-9, rtol=1e-9)
        and _close(torch.as_tensor(got1[1]).double(), want_dA[0], atol=1e-9, rtol=1e-9)
    ):
        return [
            _t(
                "不带批维度的 M [C, C] 不对：用 transpose(-1, -2)（或 .mT）转置最后两维，"
                "不用 .T 或 transpose(1, 2)",
                "wrong on an unbatched M [C, C]: transpose the last two dims with "
                "transpose(-1, -2) (or .mT), not .T or transpose(1, 2)",
            )
        ]
    return []


@exercise("19.2")
def check_ch19_cumsum_backward(cumsum_backward):
    """cumsum_backward(d_gamma) -> dg for gamma = g.cumsum(-1): dg_s = sum of d_gamma_i, i >= s."""
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(3, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    d_gamma = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    (want,) = torch.autograd.grad(g.cumsum(-1), g, d_gamma)
    got = torch.as_tensor(cumsum_backward(d_gamma)).double()
    problem = _shape_problem(got, want, "dg")
    if problem:
        return [problem]
    if _close(got, want, atol=1e-12, rtol=1e-9):
        for shape in ((7,), (2, 3, 5)):  # one sequence; heads and batch in front
            d = torch.randn(shape, generator=gen, dtype=torch.float64)
            g1 = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
            (want1,) = torch.autograd.grad(g1.cumsum(-1), g1, d)
            got1 = torch.as_tensor(_on(f"d_gamma {list(shape)}", cumsum_backward, d)).double()
            if not _close(got1, want1, atol=1e-12, rtol=1e-9):
                return [
                    _t(
                        f"形状 {list(shape)} 的 d_gamma 不对：沿最后一维（dim=-1）翻转和累加，"
                        "别写死 dim=1",
                        f"wrong for d_gamma of shape {list(shape)}: flip and cumsum along the "
                        "last dim (dim=-1), do not hard-code dim=1",
                    )
                ]
        return []
    if _close(got, d_gamma.cumsum(-1)):
        return [
            _t(
                "这是正向的累加：g_s 出现在 s 之后所有的 γ_i 里，梯度要从末尾往前加",
                "that is the forward cumsum: g_s enters every gamma_i with i >= s, so its gradient "
                "sums from the end backwards",
            )
        ]
    if _close(got, d_gamma.flip(-1).cumsum(-1)):
        return [_t("翻转、累加之后还要再翻转回来", "flip, cumsum, and flip back")]
    return [
        _t("dg 的值不对：dg_s = Σ_{i≥s} dγ_i", "wrong values: dg_s = sum over i >= s of d_gamma_i")
    ]


@exercise("19.3")
def check_ch19_bytes_per_chunk(bytes_per_chunk):
    """bytes_per_chunk(C, dk, dv, itemsize) -> the bytes the hand-written forward keeps for one
    chunk of one head: the chunk's inputs q, k, v, g, beta and the state entering it."""
    problems = []
    for C, dk, dv, size in ((64, 128, 128, 4), (64, 128, 128, 2), (32, 16, 24, 4), (64, 8, 48, 8)):
        want = size * (C * (2 * dk + dv + 2) + dk * dv)
        got = bytes_per_chunk(C, dk, dv, size)
        if got != want:
            hint = ""
            if got == size * C * (2 * dk + dv + 2):
                hint = _t(
                    "：漏了进入这一块的状态 dk × dv", ": the state entering the chunk is missing"
                )
            elif got == size * (C * (2 * dk + dv) + dk * dv):
                hint = _t(
                    "：漏了 g 和 beta（每步各一个数）",
                    ": g and beta (one number a step each) are missing",
                )
            elif got >= want + size * C * C:
                hint = _t(
                    "：C × C 的中间量是反向时重算的，不保存",
                    ": the C x C intermediates are recomputed in the backward, not kept",
                )
            problems.append(
                _t(
                    f"C={C}, dk={dk}, dv={dv}, 每个数 {size} 字节：应是 {want:,}，得到 {got}{hint}",
                    f"C={C}, dk={dk}, dv={dv}, {size} bytes a number: {want:,}, got {got}{hint}",
                )
            )
    return problems


# ---------------------------------------------------------------------------- ch20
@exercise("20.1")
def check_ch20_answer_mask(answer_mask):
    """answer_mask(ids, opening) -> [bool] per token: True on the answer and the <|im_end|> that
    ends it, False on the question and on the assistant's opening (its header and empty think
    block), which the template writes, not the model."""
    opening = [248045, 74455, 198, 248068, 271, 248069, 271]  # <|im_start|>assistant\n<think>...
    cases = [
        [248045, 846, 198, 3710, 369, 14791, 30, 248046, 198] + opening + [9, 8, 7, 248046],
        [248045, 846, 198, 5, 248046, 198] + opening + [248046],  # an empty answer: only the end
        [248045, 846, 198, *range(40, 60), 248046, 198] + opening + [*range(60, 90), 248046],
        # an answer that holds 271 and 198 (the opening's last tokens) itself
        [248045, 846, 198, 5, 248046, 198] + opening + [9, 271, 8, 198, 271, 7, 248046],
        # two turns: the first answer is history, only the last one is learned
        [248045, 846, 198, 5, 248046, 198]
        + opening
        + [9, 8, 248046, 198]
        + [248045, 846, 198, 6, 248046, 198]
        + opening
        + [7, 248046],
    ]
    n = len(opening)
    for ids in cases:
        # the first token after the last opening
        start = max(i + n for i in range(len(ids) - n + 1) if ids[i : i + n] == opening)
        want = [i >= start for i in range(len(ids))]
        got = [bool(x) for x in answer_mask(list(ids), list(opening))]
        if len(got) != len(ids):
            return [
                _t(
                    f"每个 token 一个布尔值：应有 {len(ids)} 个，得到 {len(got)} 个",
                    f"one bool per token: {len(ids)} of them, got {len(got)}",
                )
            ]
        if got == want:
            continue
        header = start - len(opening)
        case = _t(f"{len(ids)} 个 token 的对话", f"the {len(ids)}-token dialogue")
        if ids.count(opening[0]) > 3 and any(got[:header]):
            hint = _t(
                f"{case}有两轮回答：只学最后一轮，前面的回答是历史，和问题一样不算 loss",
                f"{case} holds two answers: only the last is learned, the earlier one is "
                "history, scored no more than the questions",
            )
        elif got == [not w for w in want]:
            hint = _t(
                "掩码反了：loss 要算的是回答，不是问题",
                "the mask is inverted: the loss scores the answer, not the question",
            )
        elif any(got[header:start]):
            hint = _t(
                "助手的开头（<|im_start|>assistant 和空的 think 块）是模板写的，不算 loss",
                "the assistant's opening (<|im_start|>assistant and the empty think "
                "block) is written by the template: no loss on it",
            )
        elif not got[-1] and got[start:-1] == want[start:-1]:
            hint = _t(
                "回答末尾的 <|im_end|> 也要学：模型要学会什么时候停",
                "the <|im_end|> after the answer is learned too: it is how the model "
                "learns to stop",
            )
        elif any(ids[i] == opening[-1] for i in range(start, len(ids))):
            hint = _t(
                f"{case}的回答里本身就有 {opening[-1]}（开头的最后一个 token）：要找整段开头，"
                "不是找某一个 token 最后出现的位置",
                f"in {case} the answer itself holds {opening[-1]} (the opening's last token): "
                "look for the whole opening, not the last place one token appears",
            )
        else:
            hint = _t(
                "True 从助手开头之后的第一个 token 起，一直到末尾",
                "True from the first token after the assistant's opening to the end",
            )
        return [hint]
    return []


@exercise("20.2")
def check_ch20_lora_params(lora_params):
    """lora_params(shapes, r) -> trainable parameters of rank-r LoRA on projections of the given
    [out, in] shapes: r * (in + out) each (A is [r, in], B is [out, r])."""
    cases = [
        ([(4096, 1024), (512, 1024), (512, 1024), (1024, 2048)], 8),
        ([(6144, 1024), (2048, 1024), (1024, 2048)], 16),
        ([(3, 5)], 1),
    ]
    for shapes, r in cases:
        want = sum(r * (o + i) for o, i in shapes)
        got = lora_params([tuple(s) for s in shapes], r)
        if got == want:
            continue
        if got == sum(r * o * i for o, i in shapes):
            hint = _t(
                "A 和 B 是分开存的两块：r×in 加 out×r，不是 r×in×out",
                "A and B are two matrices, r x in plus out x r, not r x in x out",
            )
        elif got == sum(o * i for o, i in shapes):
            hint = _t(
                "这是全量微调的参数数：LoRA 只训练 A 和 B",
                "that is a full fine-tune's count: LoRA trains only A and B",
            )
        elif got == sum(o * i + r * (o + i) for o, i in shapes):
            hint = _t("冻结的 W 不算可训练参数", "the frozen W is not trainable")
        elif got in (sum(r * i for o, i in shapes), sum(r * o for o, i in shapes)):
            hint = _t("A（r×in）和 B（out×r）都要算", "count both A (r x in) and B (out x r)")
        else:
            hint = _t(
                f"形状 {shapes}、r={r}：应为 {want:,}，得到 {got}",
                f"shapes {shapes}, r={r}: {want:,}, got {got}",
            )
        return [hint]
    return []


@exercise("20.3")
def check_ch20_merge(merge):
    """merge(W, A, B, alpha, r) -> W + (alpha / r) * B @ A: the weight that gives the LoRA
    module's outputs with a single matmul."""
    gen = torch.Generator().manual_seed(20)
    W = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    A = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    B = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    want = W + (16 / 2) * B @ A
    got = torch.as_tensor(merge(W.clone(), A.clone(), B.clone(), 16, 2)).double()
    problem = _shape_problem(got, want, "W'")
    if problem:
        return [problem]
    if _close(got, want, atol=1e-9, rtol=1e-9):
        x = torch.randn(3, 5, generator=gen, dtype=torch.float64)
        if _close(x @ got.T, x @ W.T + 8 * (x @ A.T) @ B.T, atol=1e-9, rtol=1e-9):
            # a scale that is not a whole number: alpha = 3, r = 2
            odd = torch.as_tensor(_on("alpha=3, r=2", merge, W.clone(), A.clone(), B.clone(), 3, 2))
            if _close(odd.double(), W + 1.5 * B @ A, atol=1e-9, rtol=1e-9):
                return []
            got = odd.double()
            if _close(got, W + B @ A):
                return [
                    _t(
                        "alpha=3、r=2 时不对：缩放 alpha / r = 1.5 不是整数，别用整除 //",
                        "wrong for alpha=3, r=2: the scale alpha / r = 1.5 is not a whole number, "
                        "do not use integer division //",
                    )
                ]
            return [_t("alpha=3、r=2 时 W' 不对", "W' is wrong for alpha=3, r=2")]
    if _close(got, W + B @ A):
        return [
            _t(
                "忘了缩放：合并的是 (alpha / r)·B·A，和 LoRA 前向里一样",
                "the scale is missing: merge (alpha / r) * B @ A, as the LoRA forward adds",
            )
        ]
    if _close(got, W + (2 / 16) * B @ A):
        return [_t("缩放是 alpha / r，不是 r / alpha", "the scale is alpha / r, not r / alpha")]
    if _close(got, W):
        return [_t("没有加上 B·A 的更新", "the update B @ A is not added")]
    return [_t("W' 应为 W + (alpha / r)·B·A", "W' should be W + (alpha / r) * B @ A")]


# ---------------------------------------------------------------------------- ch21
@exercise("21.1")
def check_ch21_lr_at(lr_at):
    """lr_at(step, total, peak, warmup, floor) -> the learning rate of 0-based step `step`."""
    from qwen.optim import lr_at as ref

    for total, peak, warmup, floor in ((100, 1e-3, 10, 0.1), (50, 3e-3, 1, 0.0), (20, 1.0, 5, 0.5)):
        for step in (0, warmup - 1, warmup, total // 2, total - 1):
            got, want = (
                float(lr_at(step, total, peak, warmup, floor)),
                ref(step, total, peak, warmup, floor),
            )
            if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12):
                where = _t(
                    "预热的第一步应已大于 0、第 warmup - 1 步到达峰值"
                    if step < warmup
                    else "最后一步应落在 floor × peak，不是 0",
                    "the first warm-up step is already above 0 and step warmup - 1 reaches the peak"
                    if step < warmup
                    else "the last step ends at floor * peak, not 0",
                )
                return [
                    _t(
                        f"total={total}、warmup={warmup}、floor={floor} 的第 {step} 步：应为 "
                        f"{want:.6g}，得到 {got:.6g}（{where}）",
                        f"step {step} of total={total}, warmup={warmup}, floor={floor}: want "
                        f"{want:.6g}, got {got:.6g} ({where})",
                    )
                ]
    return []


@exercise("21.2")
def check_ch21_bigram_perplexity(bigram_perplexity):
    """bigram_perplexity(train, test, vocab, k) -> the add-k bigram model's perplexity on test."""
    cases = (
        ([0, 1, 0, 1, 0, 2], [0, 1, 2, 0], 3, 0.5),
        ([0, 0, 1, 1, 2, 3, 0, 1], [1, 2, 3, 3, 0], 4, 0.1),
        ([2, 1, 2, 1, 2], [1, 2, 2], 3, 1.0),
    )
    for train, test, vocab, k in cases:
        counts = [[0] * vocab for _ in range(vocab)]
        for a, b in zip(train, train[1:]):
            counts[a][b] += 1
        nll = [
            -math.log((counts[a][b] + k) / (sum(counts[a]) + k * vocab))
            for a, b in zip(test, test[1:])
        ]
        want = math.exp(sum(nll) / len(nll))
        got = float(bigram_perplexity(train, test, vocab, k))
        if not math.isclose(got, want, rel_tol=1e-6):
            return [
                _t(
                    f"训练 {train}、测试 {test}、词表 {vocab}、k={k}：应为 {want:.4f}，得到 "
                    f"{got:.4f}（p(b|a) = (count(a,b) + k) / (count(a) + k·词表)；对测试里每一对"
                    "相邻词元取 −log p 的平均，再取 exp）",
                    f"train {train}, test {test}, vocab {vocab}, k={k}: want {want:.4f}, got "
                    f"{got:.4f} (p(b|a) = (count(a,b) + k) / (count(a) + k * vocab); the mean of "
                    "-log p over the test's neighbouring pairs, then exp)",
                )
            ]
    return []


@exercise("21.3")
def check_ch21_param_count(param_count):
    """param_count(cfg) -> how many parameters qwen.model.Qwen(cfg) holds, from the config alone."""
    from qwen.model import Qwen
    from qwen.pretrain import small_config

    configs = {
        "small_config(4096)": small_config(4096),
        "small_config(4096, all_attention=True)": small_config(4096, all_attention=True),
        "small_config(1000, layers=4, hidden=128)": small_config(1000, layers=4, hidden=128),
    }
    untied = small_config(512, layers=4, hidden=64, intermediate=96)
    untied.tie_word_embeddings = False
    configs["untied, 4 layers, hidden 64"] = untied
    for name, cfg in configs.items():
        with torch.device("meta"):
            want = sum(p.numel() for p in Qwen(cfg).parameters())
        got = int(param_count(cfg))
        if got != want:
            return [
                _t(
                    f"{name}：应有 {want:,} 个参数，得到 {got:,}（相差 {got - want:+,}；"
                    "查查 q_proj 的门控那一半、各层的两个 RMSNorm、DeltaNet 的 A_log/dt_bias/卷积，"
                    "以及绑定的输出头只算一次）",
                    f"{name}: want {want:,} parameters, got {got:,} (off by {got - want:+,}; "
                    "look at q_proj's gate half, each layer's two RMSNorms, DeltaNet's A_log, "
                    "dt_bias and conv, and a tied head counted once)",
                )
            ]
    return []
