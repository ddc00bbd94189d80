"""Stage 4's checks: chapters 13 to 16 (speed, loading, decoding, int8)."""

import math

import torch

from book.exercises.base import _close, _on, _t, exercise


# --------------------------------------------------------------------------------------- chapter 13
@exercise("13.1")
def check_ch13_decode_ceiling(decode_ceiling):
    """decode_ceiling(params, bytes_per_weight, gb_per_s, gflop_per_s, batch) -> tokens/s of `batch`
    sequences decoded together: each step reads every weight once and does 2 FLOP per weight per
    sequence."""
    problems = []
    for params, b, gbps, gflops, batch in (
        (752_393_024, 2, 20.0, 100.0, 1),
        (752_393_024, 2, 20.0, 100.0, 2),
        (752_393_024, 2, 20.0, 100.0, 16),
        (752_393_024, 1, 20.0, 100.0, 2),
        (752_393_024, 4, 20.0, 100.0, 64),
        (1_000_000, 1, 1.0, 50.0, 3),
    ):
        want = min(batch * gbps * 1e9 / (params * b), gflops * 1e9 / (2 * params))
        got = float(decode_ceiling(params, b, gbps, gflops, batch))
        if not math.isclose(got, want, rel_tol=1e-6):
            problems.append(
                _t(
                    f"{params:,} 个权重、每个 {b} 字节、{gbps} GB/s、{gflops} GFLOP/s、{batch} "
                    f"条序列：应为 {want:.2f} 词元/秒，得到 {got:.2f}（读一遍权重服务 {batch} "
                    "条序列，但算力封顶）",
                    f"{params:,} weights of {b} bytes, {gbps} GB/s, {gflops} GFLOP/s, {batch} "
                    f"sequences: want {want:.2f} tokens/s, got {got:.2f} (one read of the weights "
                    f"serves {batch} sequences, up to what the arithmetic allows)",
                )
            )
    return problems


@exercise("13.2")
def check_ch13_ridge_batch(ridge_batch):
    """ridge_batch(bytes_per_weight, gb_per_s, gflop_per_s) -> the batch at which a matmul stops
    waiting for its weights and starts waiting for its arithmetic."""
    problems = []
    for b, gbps, gflops in (
        (2, 20.0, 100.0),
        (1, 20.0, 100.0),
        (4, 20.0, 100.0),
        (2, 50.0, 1000.0),
        (0.5, 10.0, 400.0),
    ):
        want = gflops * b / (2 * gbps)  # B sequences: 2 B FLOP per b bytes of weight
        got = float(ridge_batch(b, gbps, gflops))
        if not math.isclose(got, want, rel_tol=1e-6):
            problems.append(
                _t(
                    f"每个权重 {b} 字节、{gbps} GB/s、{gflops} GFLOP/s：拐点应在 B = {want:g}，"
                    f"得到 {got:g}（B 条序列时，每读 {b} 字节权重做 2B 次浮点运算）",
                    f"{b} bytes per weight, {gbps} GB/s, {gflops} GFLOP/s: the ridge is at B "
                    f"= {want:g}, got {got:g} (with B sequences, {b} bytes of weight read serve 2B "
                    "FLOP)",
                )
            )
    return problems


# --------------------------------------------------------------------------------------- chapter 14
COPIES = [
    "w.to(torch.bfloat16)",
    "w.to(torch.float32)",
    "w.T",
    "w.T.contiguous()",
    "w.contiguous()",
    "w.reshape(24)",
    "w.T.reshape(24)",
    "w[1:3].reshape(12)",
    "w[:, :3].reshape(12)",
]


@exercise("14.1")
def check_ch14_copies(copies):
    """copies() -> {expression: True when it copies the data of w, a contiguous bf16 [4, 6]
    tensor}."""
    said = copies()
    w = torch.randn(4, 6).bfloat16()
    problems = []
    missing = [e for e in COPIES if e not in said]
    if missing:
        return [_t(f"缺少：{', '.join(missing)}", f"missing: {', '.join(missing)}")]
    for expr in COPIES:
        t = eval(expr, {"torch": torch, "w": w})
        copied = t.untyped_storage().data_ptr() != w.untyped_storage().data_ptr()
        if bool(said[expr]) != copied:
            why = {
                True: _t(
                    "它复制了：元素没法按原来的存储、只改步长来表示",
                    "it copies: no strides over the old storage give its elements in this order",
                ),
                False: _t(
                    "它不复制：dtype 已经对了，或者只改了形状和步长（一个视图）",
                    "it does not copy: the dtype is already that, or only the shape and strides "
                    "change (a view)",
                ),
            }[copied]
            problems.append(f"{expr}: {why}")
    return problems


@exercise("14.2")
def check_ch14_join(join):
    """join(weights) -> (w, names): one [sum of rows, in] weight, its rows in the order `names`; a
    view of the storage when the tensors lie back to back in it, else a copy."""

    def stored(order):
        """Tensors of 3 columns laid out back to back in one storage, in `order`."""
        rows = {"q": 2, "k": 3, "v": 1, "o": 2}
        buf = torch.arange(3.0 * sum(rows[n] for n in order)).view(-1, 3)
        out, at = {}, 0
        for n in order:
            out[n] = buf[at : at + rows[n]]
            at += rows[n]
        return buf, out

    problems = []
    # 1. back to back, in the storage order q, k, v (not the names' order), handed over as k, v, q
    buf, t = stored(["q", "k", "v"])
    w, names = join({"k": t["k"], "v": t["v"], "q": t["q"]})
    names = list(names)
    if sorted(names) != ["k", "q", "v"]:
        return [
            _t(
                f"names 应是这三个投影的名字，得到 {names}",
                f"names should name the three projections, got {names}",
            )
        ]
    if not torch.equal(torch.as_tensor(w), torch.cat([t[n] for n in names])):
        return [_t("w 的行与 names 的顺序对不上", "the rows of w do not follow the order of names")]
    if names != ["q", "k", "v"]:
        problems.append(
            _t(
                f"它们在存储里的顺序是 q、k、v，得到 {names}：名字或字典的顺序不是行在内存里的顺序",
                f"they lie in the storage as q, k, v, got {names}: neither the names' order nor "
                "the dict's is the order of the rows in memory",
            )
        )
    elif w.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
        problems.append(
            _t(
                "它们首尾相接：一个视图就够了，torch.cat 复制了一份",
                "they lie back to back: a view would do, torch.cat made a copy",
            )
        )
    # 2. o lies between q and k: q, k, v are not back to back, so they have to be copied
    buf, t = stored(["q", "o", "k", "v"])
    w, names = join({"q": t["q"], "k": t["k"], "v": t["v"]})
    names = list(names)
    if sorted(names) != ["k", "q", "v"] or not torch.equal(
        torch.as_tensor(w), torch.cat([t[n] for n in names])
    ):
        problems.append(
            _t(
                "o 夹在 q 和 k 之间：一个覆盖它们的视图会把 o 的行也带进来，这时要复制",
                "o lies between q and k: a view over them would take o's rows too; copy them here",
            )
        )
    return problems


# --------------------------------------------------------------------------------------- chapter 15
@exercise("15.1")
def check_ch15_grown_capacity(grown_capacity):
    """grown_capacity(capacity, needed) -> the room after growing: `capacity` if `needed` fits, else
    room for `needed` that grows geometrically (at least doubling), and not more than twice the
    larger of the two."""
    problems = []
    for capacity, needed in (
        (256, 100),
        (256, 256),
        (256, 257),
        (256, 1000),
        (1, 1),
        (64, 4096),
        (16, 17),
    ):
        got = int(grown_capacity(capacity, needed))
        if needed <= capacity:
            if got != capacity:
                problems.append(
                    _t(
                        f"容量 {capacity}、需要 {needed}：放得下就不用长，应为 {capacity}，"
                        f"得到 {got}",
                        f"capacity {capacity}, {needed} needed: it fits, so keep {capacity}, "
                        f"got {got}",
                    )
                )
        elif got < needed:
            problems.append(
                _t(
                    f"容量 {capacity}、需要 {needed}：得到 {got}，放不下",
                    f"capacity {capacity}, {needed} needed: {got} does not hold them",
                )
            )
        elif got < 2 * capacity:
            problems.append(
                _t(
                    f"容量 {capacity}、需要 {needed}：得到 {got}，没有至少翻倍：一次一个词元时，"
                    "几乎每个词元都要复制整个缓存",
                    f"capacity {capacity}, {needed} needed: {got} is less than double: a token at "
                    "a time, nearly every token would copy the whole cache",
                )
            )
        elif got > 2 * max(capacity, needed):
            problems.append(
                _t(
                    f"容量 {capacity}、需要 {needed}：得到 {got}，"
                    "留得太多了（超过两者中较大者的两倍）",
                    f"capacity {capacity}, {needed} needed: {got} sets aside too much (over twice "
                    "the larger of the two)",
                )
            )
    if problems:
        return problems
    room, grew = 16, 0
    for n in range(1, 10_001):  # one token at a time
        new = int(grown_capacity(room, n))
        grew, room = grew + (new != room), new
    if grew > 12:
        problems.append(
            _t(
                f"一次一个词元到 10,000 个：长了 {grew} 次，每次都复制整个缓存",
                f"a token at a time up to 10,000: it grew {grew} times, each a copy of the whole "
                "cache",
            )
        )
    return problems


@exercise("15.2")
def check_ch15_conv_state(conv_state):
    """conv_state(window, k) -> the last k columns of window (along its last dim), in storage of
    their own."""
    gen = torch.Generator().manual_seed(3)
    problems = []
    for shape, dtype in (
        ((1, 192, 1003), torch.float32),
        ((1, 1, 1003), torch.float32),
        ((2, 8, 50), torch.bfloat16),
    ):
        window, k = torch.randn(shape, generator=gen).to(dtype), 3
        got = conv_state(window, k)
        if not isinstance(got, torch.Tensor) or not torch.equal(got, window[..., -k:]):
            return [
                _t(
                    f"{list(shape)}：应是窗口最后 {k} 列的值",
                    f"{list(shape)}: want the values of the window's last {k} columns",
                )
            ]
        held = got.untyped_storage().nbytes()
        if held != got.nbytes:
            problems.append(
                _t(
                    f"{list(shape)}：这 {got.nbytes:,} 字节让 {held:,} 字节的存储一直活着："
                    "切片是整个窗口的视图（.contiguous() 和 .to() 遇到已经连续、dtype "
                    "已对的张量时也不复制）",
                    f"{list(shape)}: these {got.nbytes:,} bytes keep a storage of {held:,} bytes "
                    "alive: a slice is a view of the whole window (and .contiguous() and .to() "
                    "copy nothing when the tensor is contiguous already and of that dtype)",
                )
            )
    return problems


# --------------------------------------------------------------------------------------- chapter 16
@exercise("16.1")
def check_ch16_quantize(quantize):
    """quantize(w) -> (q: int8 [rows, cols], scale: [rows]) with w ≈ q * scale[:, None]."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(6, 32, generator=gen) * torch.tensor([1e-3, 1e-2, 0.1, 1.0, 3.0, 10.0])[:, None]
    q, scale = quantize(w)
    q, scale = torch.as_tensor(q), torch.as_tensor(scale)
    if q.dtype != torch.int8 or q.shape != w.shape:
        return [
            _t(f"q 应是 int8、形状 {list(w.shape)}", f"q should be int8 with shape {list(w.shape)}")
        ]
    if scale.shape != (w.shape[0],):
        return [_t("每个输出通道（每行）一个尺度", "one scale per output channel (per row)")]
    err = (q.float() * scale[:, None].float() - w).abs().amax(1)
    bound = w.abs().amax(1) / 127 / 2 * 1.001 + 1e-12
    if (err > bound).any():
        return [
            _t(
                f"误差超过半格：第 {int((err > bound).nonzero()[0])} 行",
                f"error above half a step in row {int((err > bound).nonzero()[0])}",
            )
        ]
    return []


@exercise("16.2")
def check_ch16_head_saving(head_saving):
    """head_saving(params, head, bytes_before, bytes_after) -> the share of a decode step's bytes
    saved by storing only the head (the tied table, read whole once per step) in fewer bytes."""
    problems = []
    for params, head, b0, b1 in (
        (752_393_024, 254_279_680, 2, 1),
        (752_393_024, 254_279_680, 2, 0.625),
        (8_000_000, 6_000_000, 2, 1),
        (1000, 100, 4, 1),
    ):
        want = head * (b0 - b1) / (params * b0)
        got = float(head_saving(params, head, b0, b1))
        if not math.isclose(got, want, rel_tol=1e-6):
            problems.append(
                _t(
                    f"{params:,} 个权重、输出头 {head:,}、每个从 {b0} 字节变成 {b1}："
                    f"应省下 {want:.1%}，得到 {got:.1%}（省下的是输出头字节的一部分，"
                    "分母是原来读的全部字节；嵌入查表只读几行）",
                    f"{params:,} weights, a head of {head:,}, {b0} bytes each down to {b1}: "
                    f"want {want:.1%} saved, got {got:.1%} (a part of the head's bytes is saved, "
                    "out of all the bytes read before; the embedding lookup reads a few rows)",
                )
            )
    return problems


@exercise("16.3")
def check_ch16_round_activations(round_activations):
    """round_activations(x) -> (u, step, zero): x ≈ step * (u - zero), u whole numbers in [0,
    127]."""
    gen = torch.Generator().manual_seed(2)
    for x in (
        # min -1.3, max 1: -lo/step = 71.78 rounds up to 72 (floor or int() would give 71)
        torch.cat([torch.tensor([-1.3, 1.0]), torch.linspace(-1.3, 1.0, 30)]),
        torch.zeros(8),  # all zeros: the range is 0, the step must not be
        torch.randn(64, generator=gen),
        torch.rand(64, generator=gen) * 5,
        -torch.rand(64, generator=gen) * 0.01,
        torch.randn(64, generator=gen) * 100,
    ):
        case = _t(f"x 在 [{x.min():.3g}, {x.max():.3g}]", f"x in [{x.min():.3g}, {x.max():.3g}]")
        u, step, zero = (torch.as_tensor(t).double() for t in _on(case, round_activations, x))
        if not (torch.isfinite(u).all() and torch.isfinite(step) and torch.isfinite(zero)):
            return [
                _t(
                    f"{case}：出现 nan 或 inf：全零输入的范围是 0，"
                    "步长要有下限（clamp(min=1e-12)）",
                    f"{case}: nan or inf: an all-zero input has range 0, give the step a floor "
                    "(clamp(min=1e-12))",
                )
            ]
        if u.shape != x.shape or (u != u.round()).any() or u.min() < 0 or u.max() > 127:
            return [
                _t(
                    "u 应与 x 同形状，取 0 到 127 的整数",
                    "u should have x's shape, whole numbers from 0 to 127",
                )
            ]
        if zero != zero.round():
            return [
                _t(
                    "零点要是整数：这样 0 正好能表示出来",
                    "the zero point must be a whole number, so that 0 is exact",
                )
            ]
        exact = -x.min().clamp(max=0).double() / step
        if (zero - exact).abs() > 0.5 + 1e-6:
            return [
                _t(
                    f"{case}：零点 {zero.item():g} 离 -min/步长 = {exact.item():.2f} 超过半格："
                    "用 round，不是 floor 或 int()（它们截断）",
                    f"{case}: the zero point {zero.item():g} is more than half a step from "
                    f"-min/step = {exact.item():.2f}: round it, do not floor or int() it (they "
                    "truncate)",
                )
            ]
        want = (x.max().clamp(min=0) - x.min().clamp(max=0)).double() / 127
        if want == 0:  # all zeros: any small positive step will do
            if not 0 < step <= 1e-6:
                return [
                    _t(
                        f"{case}：范围是 0，步长应是一个很小的正数，得到 {step.item():g}",
                        f"{case}: the range is 0, the step should be a small positive number, "
                        f"got {step.item():g}",
                    )
                ]
        elif not _close(step, want, rtol=1e-3, atol=0):
            return [
                _t(
                    "步长是 (max(x, 0) - min(x, 0)) / 127：128 级（127 个台阶）覆盖包含 0 的范围",
                    "the step is (max(x, 0) - min(x, 0)) / 127: 128 levels (127 steps) over a "
                    "range that holds 0",
                )
            ]
        err = (step * (u - zero) - x.double()).abs().max()
        if err > step / 2 * 1.001:
            return [_t("有的值差了不止半个步长", "some values are off by more than half a step")]
    return []
