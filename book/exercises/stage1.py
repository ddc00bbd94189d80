"""Stage 1 and 2's checks: chapters 1 to 9, from the weights to the whole model."""

import math

import torch
import torch.nn.functional as F

from book.exercises.base import _close, _on, _shape_problem, _t, exercise


# ---------------------------------------------------------------------------------------- chapter 1
@exercise("1.1")
def check_ch01_short_name(short_name):
    """short_name(checkpoint name) -> the name inside our modules, or None for a tensor we skip."""
    cases = {
        "model.language_model.layers.3.self_attn.q_proj.weight": "layers.3.self_attn.q_proj.weight",
        "model.language_model.embed_tokens.weight": "embed_tokens.weight",
        "model.visual.blocks.0.attn.qkv.weight": None,
        "mtp.layers.0.mlp.up_proj.weight": None,
        # a text-only checkpoint
        "model.layers.0.mlp.up_proj.weight": "layers.0.mlp.up_proj.weight",
        "lm_head.weight": "lm_head.weight",
    }
    problems = []
    for name, want in cases.items():
        got = short_name(name)
        if got != want:
            problems.append(f"{name} -> {got!r}, " + _t(f"应为 {want!r}", f"should be {want!r}"))
    return problems


@exercise("1.2")
def check_ch01_count(count_parameters):
    """count_parameters(state) counts each tensor of a state_dict(keep_vars=True) once, a tied one
    too."""
    from qwen.embedding import Embedding, LMHead

    def toy(tied):
        m = torch.nn.Module()
        m.embed_tokens = Embedding(10, 4)
        m.lm_head = LMHead(
            m.embed_tokens.weight if tied else torch.nn.Parameter(torch.empty(10, 4))
        )
        m.proj = torch.nn.Linear(4, 3, bias=False)
        return m.state_dict(keep_vars=True)

    problems = []
    for tied, want in ((True, 52), (False, 92)):
        got = count_parameters(toy(tied))
        if got != want:
            problems.append(
                _t(
                    f"{'绑定' if tied else '不绑定'}时应为 {want}，得到 {got}",
                    f"{'tied' if tied else 'untied'}: should be {want}, got {got}",
                )
            )
    if problems and count_parameters(toy(True)) == 92:
        problems.insert(
            0,
            _t(
                "绑定的表在 state_dict 里出现两次，只能算一次",
                "the tied table appears twice in the state_dict and must be counted once",
            ),
        )
    return problems


# ---------------------------------------------------------------------------------------- chapter 2
_E2 = torch.tensor([[1.0, 0.0], [10.0, 1.0], [1.0, 0.05], [0.0, 1.0], [-1.0, 0.0]])


@exercise("2.1")
def check_ch02_nearest(nearest):
    """nearest(E, i, k) -> the k rows closest to row i by cosine, closest first, row i itself left
    out."""
    problems = []
    got = [int(j) for j in torch.as_tensor(nearest(_E2.clone(), 0, 2)).flatten()]
    if got != [2, 1]:
        problems.append(
            _t(
                f"第 0 行的 2 个近邻应为 [2, 1]，得到 {got}",
                f"the 2 nearest to row 0 are [2, 1], got {got}",
            )
        )
        if got == [1, 2]:
            problems.append(
                _t(
                    "这是点积的排序：第 1 行很长，方向却没有第 2 行近；先把行归一化",
                    "that is the dot-product order: row 1 is long but points less the same way "
                    "than row 2; normalise the rows first",
                )
            )
        if got[:1] == [0]:
            problems.append(_t("第 0 行自己不算近邻", "row 0 itself is not a neighbour"))
    got = [int(j) for j in torch.as_tensor(nearest(_E2.clone(), 3, 1)).flatten()]
    if got != [1]:
        problems.append(
            _t(f"第 3 行最近的应为 [1]，得到 {got}", f"the nearest to row 3 is [1], got {got}")
        )
    # a row parallel to row 0: two rows at cosine 1, so row i is not always the first of the top k
    tie = torch.cat([_E2, torch.tensor([[3.0, 0.0]])])
    got = [int(j) for j in torch.as_tensor(nearest(tie.clone(), 5, 2)).flatten()]
    if not problems and got != [0, 2]:
        problems.append(
            _t(
                f"平行的两行（第 5 行 = 3 × 第 0 行，余弦都是 1）：第 5 行的 2 个近邻应为 [0, 2]，"
                f"得到 {got}；别指望第 i 行自己排在第一个再去掉它，要直接把它排除",
                f"two parallel rows (row 5 = 3 × row 0, both at cosine 1): the 2 nearest to row 5 "
                f"are [0, 2], got {got}; do not count on row i coming first and dropping it, "
                "leave it out explicitly",
            )
        )
    return problems


@exercise("2.2")
def check_ch02_own_row_wins(own_row_wins):
    """own_row_wins(E) -> bool per row: is the largest dot product of E[j] with the table at row j
    itself?"""
    E = torch.tensor([[1.0, 0.0], [3.0, 0.5], [0.0, 1.0], [0.0, -2.0]])
    want = [False, True, True, True]
    got = [bool(b) for b in torch.as_tensor(own_row_wins(E)).flatten()]
    if got == want:
        print(
            _t(
                "第 0 行输给了第 1 行：它更长（3.04 对 1），方向又接近（cos = 0.99）",
                "row 0 loses to row 1: longer (3.04 against 1) and close in direction (cos = 0.99)",
            )
        )
        return []
    problems = [_t(f"应为 {want}，得到 {got}", f"should be {want}, got {got}")]
    if all(got):
        problems.append(
            _t(
                "E_0·E_1 = 3 > E_0·E_0 = 1：别的行更长、方向又接近时，自己那行不一定赢",
                "E_0·E_1 = 3 > E_0·E_0 = 1: a longer row close in direction beats the row itself",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------- chapter 3
def _norm_case():
    g = torch.Generator().manual_seed(3)
    return torch.randn(4, 64, generator=g) * 5, torch.randn(64, generator=g) * 0.1


@exercise("3.1")
def check_ch03_rmsnorm(rmsnorm):
    """rmsnorm(x, w, eps) -> x / rms(x) * (1 + w), computed in fp32, returned in x's dtype."""
    from qwen.norm import RMSNorm

    x, w = _norm_case()
    x[3] *= 2e-4  # a row whose mean square is near eps: eps belongs under the root
    ref = RMSNorm(64)
    ref.weight.data = w
    want = ref(x)
    got = torch.as_tensor(rmsnorm(x, w, 1e-6))
    problems = [p for p in [_shape_problem(got, want, _t("输出", "the output"))] if p]
    if problems:
        return problems
    if not _close(got, want, atol=1e-4):
        rms = got[:3].float().pow(2).mean(-1).sqrt().mean().item()
        cos = F.cosine_similarity(got[:3].float(), want[:3], dim=-1).mean().item()
        problems.append(
            _t(
                f"和正确结果差太多：输出的均方根是 {rms:.3f}（应约为 1），余弦 {cos:.3f}",
                f"differs from the right result: the output's rms is {rms:.3f} (about 1 expected), "
                f"cosine {cos:.3f}",
            )
        )
        if rms < 0.3:
            problems.append(
                _t(
                    "尺度几乎全丢了：检查点存的是偏移 w，要乘 1 + w",
                    "the scale is nearly gone: the checkpoint stores the offset w, multiply by 1 "
                    "+ w",
                )
            )
        elif _close(got[:3], want[:3], atol=1e-4):
            problems.append(
                _t(
                    "只有均方接近 eps 的那一行不对：eps 加在开方之前，rsqrt(mean(x²) + eps)",
                    "only the row whose mean square is near eps is wrong: eps goes under the root, "
                    "rsqrt(mean(x²) + eps)",
                )
            )
        elif abs(rms - 1) < 0.05 and cos > 0.99:
            problems.append(
                _t(
                    "每一行单独求均方根（沿最后一维），不减均值",
                    "the rms is per row (along the last dim), with no mean subtracted",
                )
            )
        return problems
    x3 = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(33)) * 5
    ref = RMSNorm(64)
    ref.weight.data = w
    got3 = torch.as_tensor(_on("x [2, 3, 64]", rmsnorm, x3, w, 1e-6))
    if not _close(got3, ref(x3).detach(), atol=1e-4):
        return [
            _t(
                "[B, T, dim] 的输入（三维）不对：均方要沿最后一维（dim=-1）算，每个向量各算一次",
                "wrong on a [B, T, dim] input (3-D): take the mean square along the last dim "
                "(dim=-1), once per vector",
            )
        ]
    # bf16: the reference upcasts to fp32 and rounds once at the end; staying in bf16 rounds at
    # every step, and about half the outputs land on a neighbouring bf16 value
    gen = torch.Generator().manual_seed(31)
    xb = (torch.randn(16, 256, generator=gen) * 5).bfloat16()
    wb = (torch.randn(256, generator=gen) * 0.3).bfloat16()
    ref = RMSNorm(256)
    ref.weight.data = wb
    want = ref(xb)
    half = torch.as_tensor(rmsnorm(xb, wb, 1e-6))
    if half.dtype != torch.bfloat16:
        problems.append(
            _t(
                f"bf16 输入应返回 bf16，得到 {half.dtype}",
                f"a bf16 input should come back bf16, got {half.dtype}",
            )
        )
    elif half.shape != want.shape:
        problems.append(_shape_problem(half, want, _t("bf16 的输出", "the bf16 output")))
    else:
        off = (half != want).float().mean().item()
        if off > 0.01:
            problems.append(
                _t(
                    f"bf16 输入时 {off:.0%} 的输出和参考值不是同一个 bf16 数：x 和 w 都先转成 "
                    "fp32，整个 norm（包括 1 + w）在 fp32 里算，最后只舍入一次",
                    f"on a bf16 input {off:.0%} of the outputs are not the reference's bf16 value: "
                    "move x and w to fp32, do the whole norm there (the 1 + w too), round once "
                    "at the end",
                )
            )
    return problems


@exercise("3.2")
def check_ch03_gated(gated_rmsnorm):
    """gated_rmsnorm(x, z, w, eps) -> w * x / rms(x) * silu(z): DeltaNet's output norm, a plain
    weight."""
    from qwen.norm import RMSNormGated

    x, w = _norm_case()
    z = torch.randn(4, 64, generator=torch.Generator().manual_seed(4))
    w = 1 + w  # a plain scale near 1, as trained
    ref = RMSNormGated(64)
    ref.weight.data = w
    want = ref(x, z)
    got = torch.as_tensor(gated_rmsnorm(x, z, w, 1e-6))
    problems = [p for p in [_shape_problem(got, want, _t("输出", "the output"))] if p]
    if problems:
        return problems
    if _close(got, want, atol=1e-4):
        x3, z3 = x.view(2, 2, 64), z.view(2, 2, 64)
        got3 = torch.as_tensor(_on("x [2, 2, 64]", gated_rmsnorm, x3, z3, w, 1e-6))
        if not _close(got3, want.view(2, 2, 64), atol=1e-4):
            return [
                _t(
                    "[B, T, dim] 的输入（三维）不对：均方要沿最后一维（dim=-1）算",
                    "wrong on a [B, T, dim] input (3-D): take the mean square along the last "
                    "dim (dim=-1)",
                )
            ]
        return problems
    problems.append(_t("和 RMSNormGated 的结果不同", "differs from RMSNormGated"))
    if _close(got, (1 + w) / w * want, atol=1e-4):
        problems.append(
            _t(
                "门控 norm 的权重直接乘，没有 1 +",
                "the gated norm's weight multiplies as it is, no 1 +",
            )
        )
    norm = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    if _close(got, w * norm * torch.sigmoid(z), atol=1e-4):
        problems.append(
            _t("门是 silu(z) = z·σ(z)，不是 σ(z)", "the gate is silu(z) = z·σ(z), not σ(z)")
        )
    gated = x * F.silu(z)
    if _close(got, w * gated / gated.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt(), atol=1e-4):
        problems.append(
            _t(
                "先归一化 x，再乘门：门加在归一化之前，它的大小就被归一化抹掉了",
                "normalise x first, then gate: a gate applied before the norm has its size "
                "normalised away",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------- chapter 4
def _interleaved_reference(x, angle):
    """RoFormer's pairing, computed through rotate-half on permuted dims."""
    from qwen.rope import apply_rope

    r = x.shape[-1]
    x_rh = torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)  # pair (2i, 2i+1) -> (i, i + r/2)
    angle = torch.cat([angle, angle], dim=-1)
    y = apply_rope(x_rh, angle.cos(), angle.sin())
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = y[..., : r // 2], y[..., r // 2 :]
    return out


@exercise("4.1")
def check_ch04_interleaved(rope_interleaved):
    """rope_interleaved(x, angle): x [T, r], angle [T, r/2]; turn the neighbour pairs (2i, 2i+1) by
    angle[:, i]."""
    from qwen.rope import RotaryEmbedding, apply_rope

    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 8, generator=g)
    rope = RotaryEmbedding(head_dim=8, partial_rotary_factor=1.0, theta=1e4)
    angle = torch.arange(5).float()[:, None] * rope.inv_freq  # [5, 4]
    want = _interleaved_reference(x, angle)
    got = torch.as_tensor(rope_interleaved(x, angle))
    problems = [p for p in [_shape_problem(got, want, _t("输出", "the output"))] if p]
    if problems:
        return problems
    rotate_half = apply_rope(x, *rope(torch.arange(5)))
    if _close(got, want, atol=1e-5):
        gap = (rotate_half - want).abs().max().item()
        print(
            _t(
                f"同一个向量，rotate-half 的结果和相邻配对最多差 {gap:.2f}："
                "两种配对只差一个维度置换，混用就错，而且不报错",
                "on the same vector rotate-half differs from neighbour pairing by up "
                f"to {gap:.2f}: the two differ by a permutation of dims, and mixing them up is "
                "wrong without any error",
            )
        )
        return []
    problems.append(
        _t(
            "和相邻配对 (2i, 2i+1) 的旋转不一致",
            "differs from turning the neighbour pairs (2i, 2i+1)",
        )
    )
    if _close(got, rotate_half, atol=1e-5):
        problems.append(
            _t("这是 rotate-half 的配对 (i, i + r/2)", "that is rotate-half's pairing (i, i + r/2)")
        )
    elif _close(got, _interleaved_reference(x, -angle), atol=1e-5):
        problems.append(
            _t(
                "转反了：第一个坐标是 x₁cos − x₂sin，第二个是 x₁sin + x₂cos",
                "it turns the wrong way: the first coordinate is x₁cos − x₂sin, the second "
                "x₁sin + x₂cos",
            )
        )
    return problems


@exercise("4.2")
def check_ch04_cos_sin(rope_cos_sin):
    """rope_cos_sin(positions, inv_freq, dtype) -> (cos, sin), each [T, 2 * len(inv_freq)] in
    dtype, laid out for rotate-half; the angles computed in fp32."""
    from qwen.rope import RotaryEmbedding

    inv_freq = RotaryEmbedding(256, 0.25, 1e7).inv_freq
    problems = []
    for start, dtype in ((0, torch.float32), (100_000, torch.bfloat16), (250_000, torch.bfloat16)):
        positions = torch.arange(start, start + 8)
        angle = positions.float()[:, None] * inv_freq
        angle = torch.cat([angle, angle], dim=-1)
        want = (angle.cos().to(dtype), angle.sin().to(dtype))
        got = [torch.as_tensor(t) for t in rope_cos_sin(positions, inv_freq, dtype)]
        where = _t(f"位置从 {start:,} 起", f"positions from {start:,}")
        shape = _shape_problem(got[0], want[0], f"{where}: cos") or _shape_problem(
            got[1], want[1], f"{where}: sin"
        )
        if shape:
            problems.append(shape)
            if got[0].shape[-1] == len(inv_freq):
                problems.append(
                    _t(
                        "每个角度要出现两次：rotate-half 的第 i 维和第 i + r/2 维共用一个角度",
                        "each angle appears twice: rotate-half's dims i and i + r/2 share it",
                    )
                )
            return problems
        if got[0].dtype != dtype or got[1].dtype != dtype:
            return [
                _t(
                    f"{where}：cos 和 sin 应是 {dtype}（q、k 的 dtype），得到 {got[0].dtype}",
                    f"{where}: cos and sin should come back as {dtype} (q and k's dtype), got "
                    f"{got[0].dtype}",
                )
            ]
        if _close(got[0], want[0], atol=1e-2) and _close(got[1], want[1], atol=1e-2):
            continue
        problems.append(_t(f"{where}：cos/sin 的值不对", f"{where}: wrong cos/sin values"))
        layout = positions.float()[:, None] * inv_freq
        if _close(got[0], layout.repeat_interleave(2, -1).cos().to(dtype), atol=1e-2):
            problems.append(
                _t(
                    "这是相邻配对的排法 (θ₀, θ₀, θ₁, θ₁, …)；rotate-half 要 (θ₀, θ₁, …, θ₀, θ₁, …)",
                    "that is the neighbour layout (θ₀, θ₀, θ₁, θ₁, ...); rotate-half wants "
                    "(θ₀, θ₁, ..., θ₀, θ₁, ...)",
                )
            )
        elif start and dtype == torch.bfloat16:
            step = torch.tensor(float(start)).bfloat16()
            gap = (torch.nextafter(step, torch.tensor(math.inf).bfloat16()) - step).item()
            problems.append(
                _t(
                    f"位置 {start:,} 附近 bf16 相邻两个数差 {gap:g}：角度（位置 × 频率）要在 fp32 "
                    "里算，只把最后的 cos、sin 转成 bf16",
                    f"near {start:,} neighbouring bf16 numbers are {gap:g} apart: compute the "
                    "angle (position × frequency) in fp32 and cast only the final cos and sin",
                )
            )
    if not problems:
        bad = (torch.arange(100_000, 100_008).bfloat16()[:, None] * inv_freq.bfloat16()).float()
        err = (bad - torch.arange(100_000, 100_008).float()[:, None] * inv_freq).abs().max()
        print(
            _t(
                f"同样的角度在 bf16 里算，位置 100,000 处最多差 {err.item():.0f} 弧度",
                f"the same angles computed in bf16 are off by up to {err.item():.0f} radians at "
                "position 100,000",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------- chapter 5
@exercise("5.1")
def check_ch05_expand_kv(expand_kv):
    """expand_kv(k, n_head): [B, n_kv, T, hd] -> [B, n_head, T, hd], query head j reading kv head j
    // (n_head / n_kv)."""
    # head id + pos
    k = torch.arange(2.0)[None, :, None, None].expand(1, 2, 3, 4) + 0.1 * torch.arange(3.0)[:, None]
    want = k.repeat_interleave(4, dim=1)
    got = torch.as_tensor(expand_kv(k, 8))
    problems = [p for p in [_shape_problem(got, want, _t("输出", "the output"))] if p]
    if problems:
        return problems
    if torch.equal(got, want):
        # other shapes: 3 kv heads for 6 query heads, one kv head for 4 (MQA); a batch of two
        for n_kv, n_head in ((3, 6), (1, 4)):
            k2 = torch.randn(2, n_kv, 3, 4, generator=torch.Generator().manual_seed(n_kv))
            want2 = k2.repeat_interleave(n_head // n_kv, dim=1)
            got2 = torch.as_tensor(_on(f"k [2, {n_kv}, 3, 4]", expand_kv, k2, n_head))
            if got2.shape != want2.shape or not torch.equal(got2, want2):
                return [
                    _t(
                        f"B=2、{n_kv} 个 KV 头、{n_head} 个查询头时不对：每个 KV 头重复 "
                        f"n_head // n_kv = {n_head // n_kv} 次，从 k 的形状读出 n_kv，别写死",
                        f"wrong for B=2, {n_kv} kv heads and {n_head} query heads: each kv head "
                        f"repeats n_head // n_kv = {n_head // n_kv} times; read n_kv from k's "
                        "shape, do not hard-code it",
                    )
                ]
        return problems
    heads = [int(h) for h in got[0, :, 0, 0].round()]
    problems.append(
        _t(
            f"8 个查询头读到的 KV 头是 {heads}，应为 [0, 0, 0, 0, 1, 1, 1, 1]",
            f"the 8 query heads read kv heads {heads}, should be [0, 0, 0, 0, 1, 1, 1, 1]",
        )
    )
    if heads == [0, 1] * 4:
        problems.append(
            _t(
                "这是 .repeat 的交替排法；要 repeat_interleave",
                "that is .repeat's alternation; use repeat_interleave",
            )
        )
    return problems


@exercise("5.2")
def check_ch05_split(split_query_gate):
    """split_query_gate(y, n_head, head_dim): q_proj's output [B, T, nh*2*hd] -> q [B, T, nh, hd],
    gate [B, T, nh*hd]."""
    y = torch.arange(2 * 3 * 4 * 2 * 5, dtype=torch.float).view(2, 3, 40)  # B=2, T=3, nh=4, hd=5
    q_want, gate_want = y.view(2, 3, 4, 10).chunk(2, dim=-1)
    gate_want = gate_want.reshape(2, 3, 20)
    q, gate = split_query_gate(y, 4, 5)
    q, gate = torch.as_tensor(q), torch.as_tensor(gate)
    problems = [
        p for p in [_shape_problem(q, q_want, "q"), _shape_problem(gate, gate_want, "gate")] if p
    ]
    if problems:
        return problems
    if not (torch.equal(q, q_want) and torch.equal(gate, gate_want)):
        problems.append(_t("q 和 gate 取错了通道", "q and gate took the wrong channels"))
        if torch.equal(q.reshape(2, 3, 20), y[..., :20]):
            problems.append(
                _t(
                    "q_proj 的输出按头排列：头 0 的 [query | gate]，再是头 1……不是前一半全是 query",
                    "q_proj's output is laid out per head: head 0's [query | gate], then head "
                    "1's...; not all queries first",
                )
            )
        elif torch.equal(q, gate_want.view(2, 3, 4, 5)):
            problems.append(
                _t(
                    "每个头里 query 在前，gate 在后",
                    "in each head the query comes first, then the gate",
                )
            )
    return problems


@exercise("5.3")
def check_ch05_causal_mask(causal_mask):
    """causal_mask(T, S) -> bool [T, S]: may this call's query i (T new tokens) see key j (S keys,
    the cached ones first)?"""
    problems = []
    for T, S in ((4, 4), (1, 7), (3, 8), (2, 5)):
        want = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        got = torch.as_tensor(causal_mask(T, S))
        shape = _shape_problem(got, want, f"causal_mask({T}, {S})")
        if shape:
            return [shape]
        if got.dtype != torch.bool:
            return [
                _t(
                    f"causal_mask({T}, {S}) 的 dtype 是 {got.dtype}：要布尔掩码，能看到的位置为 "
                    "True（不是加到分数上的 0 / -inf）",
                    f"causal_mask({T}, {S}) has dtype {got.dtype}: return a bool mask, True where "
                    "the query may see the key (not an additive 0 / -inf)",
                )
            ]
        if not torch.equal(got.bool(), want):
            seen = [int(r.sum()) for r in got.bool()]
            problems.append(
                _t(
                    f"T={T}、S={S}：每个查询看到的键数是 {seen}，应为 "
                    f"{[int(r.sum()) for r in want]}",
                    f"T={T}, S={S}: the queries see {seen} keys, should see "
                    f"{[int(r.sum()) for r in want]}",
                )
            )
    if problems and torch.equal(
        torch.as_tensor(causal_mask(1, 7)).bool().flatten()[1:], torch.zeros(6, dtype=torch.bool)
    ):
        problems.insert(
            0,
            _t(
                "有缓存时查询 i 在整段里的位置是 S - T + i：它能看到到这个位置为止的所有键，"
                "对角线要挪 S - T",
                "with a cache, query i sits at position S - T + i of the whole sequence and sees "
                "every key up to there: shift the diagonal by S - T",
            ),
        )
    return problems


def _heads_variants(y, weight, positions, cfg):
    """The slips of exercise 5.4, computed the way a reader would make them: name -> heads."""
    from qwen.rope import RotaryEmbedding, apply_rope

    B, T, _ = y.shape
    hd, eps = cfg.head_dim, cfg.rms_norm_eps
    heads = y.view(B, T, -1, hd).transpose(1, 2)  # [B, n, T, hd]

    def norm(x, w=1 + weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    cos, sin = RotaryEmbedding(hd, cfg.partial_rotary_factor, cfg.rope_theta)(positions)
    cos_all, sin_all = RotaryEmbedding(hd, 1.0, cfg.rope_theta)(positions)
    whole = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return {
        "rope_first": norm(apply_rope(heads, cos, sin)),
        "whole_width": apply_rope(
            whole.view(B, T, -1, hd).transpose(1, 2) * (1 + weight), cos, sin
        ),
        "all_dims": apply_rope(norm(heads), cos_all, sin_all),
        "no_one_plus": apply_rope(norm(heads, weight), cos, sin),
    }


@exercise("5.4")
def check_ch05_norm_rope(norm_rope):
    """norm_rope(y, weight, positions, cfg): a projection's output [B, T, n * head_dim] -> the
    heads [B, n, T, head_dim] as attention reads them, normalised and rotated."""
    from qwen.attention import Attention
    from qwen.rope import RotaryEmbedding, apply_rope
    from qwen.weights import Config

    # a small attention layer in fp32: 4 query heads, 2 kv heads of 32 dims, 8 of them rotated
    cfg = Config(hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    attn = Attention(cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p.dim() == 1 else 0.2))
    x = torch.randn(2, 5, cfg.hidden_size, generator=g)
    positions = torch.arange(7, 12)  # the tokens after a cached prompt of 7
    cos, sin = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)(positions)
    rotated = int(cfg.head_dim * cfg.partial_rotary_factor)
    slips = {
        "rope_first": _t(
            "先转了 RoPE 再归一化：q_norm/k_norm 的每维权重要作用在转之前的内容上",
            "RoPE came before the norm: q_norm/k_norm's per-dimension weight acts on the "
            "content before the turn",
        ),
        "whole_width": _t(
            f"rms 算在了所有头拼起来的整个宽度上：要每个头各算一次，在 {cfg.head_dim} 维上算",
            "the rms was taken over the whole width of all the heads: take it per head, "
            f"over {cfg.head_dim} dims",
        ),
        "all_dims": _t(
            f"转了全部 {cfg.head_dim} 维：只转前 head_dim × partial_rotary_factor = {rotated} "
            "维，其余原样通过",
            f"all {cfg.head_dim} dims were turned: only the first head_dim × "
            f"partial_rotary_factor = {rotated} rotate, the rest pass unchanged",
        ),
        "no_one_plus": _t(
            "乘的是 w：这两个范数和第 3 章的一样，乘 (1 + w)",
            "that scales by w: these norms are chapter 3's, they scale by (1 + w)",
        ),
    }
    problems = []
    with torch.no_grad():
        q, _, k, _ = attn.project(x)
        B, T = x.shape[:2]
        for name, y, norm in (
            ("q", q.reshape(B, T, -1), attn.q_norm),
            ("k", k.reshape(B, T, -1), attn.k_norm),
        ):
            # the library's path: Attention.forward
            want = apply_rope(norm(y.view(B, T, -1, cfg.head_dim)).transpose(1, 2), cos, sin)
            got = torch.as_tensor(norm_rope(y.clone(), norm.weight.clone(), positions, cfg))
            shape = _shape_problem(got, want, name)
            if shape:
                return [shape]
            if _close(got, want):
                continue
            found = [
                slip
                for slip, wrong in _heads_variants(y, norm.weight, positions, cfg).items()
                if _close(got, wrong)
            ]
            problems.append(
                slips[found[0]]
                if found
                else _t(
                    f"{name} 的头和库里的算法最多差 {(got - want).abs().max().item():.3g}",
                    f"the {name} heads differ from the library's by up to "
                    f"{(got - want).abs().max().item():.3g}",
                )
            )
            return problems
        # bf16, as the model runs: the library's norm upcasts to fp32 and rounds once; a norm
        # left in bf16 rounds at every step and lands on a neighbouring bf16 value
        from qwen.norm import RMSNorm

        gen = torch.Generator().manual_seed(55)
        yb = (torch.randn(2, 5, 4 * cfg.head_dim, generator=gen) * 3).bfloat16()
        norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        norm.weight.data = (torch.randn(cfg.head_dim, generator=gen) * 0.5).bfloat16()
        want = apply_rope(norm(yb.view(2, 5, -1, cfg.head_dim)).transpose(1, 2), cos, sin)
        got = torch.as_tensor(
            _on("bf16 y", norm_rope, yb.clone(), norm.weight.clone(), positions, cfg)
        )
        if got.dtype != torch.bfloat16:
            return [
                _t(
                    f"bf16 的 y 应返回 bf16 的头，得到 {got.dtype}",
                    f"a bf16 y should give bf16 heads, got {got.dtype}",
                )
            ]
        shape = _shape_problem(got, want, _t("bf16 的头", "the bf16 heads"))
        if shape:
            return [shape]
        off = (got != want).float().mean().item()
        if off > 0.01:
            return [
                _t(
                    f"bf16 输入时 {off:.0%} 的值和库里的不同：归一化要先转 fp32 算"
                    "（1 + w 也在 fp32 里），再转回 y 的 dtype，然后才转 RoPE",
                    f"on a bf16 input {off:.0%} of the values differ from the library's: do "
                    "the norm in fp32 (the 1 + w too), cast back to y's dtype, then turn",
                )
            ]
    return problems


# ---------------------------------------------------------------------------------------- chapter 6
@exercise("6.1")
def check_ch06_delta_step(delta_step):
    """delta_step(S, k, v, alpha, beta) -> the state after one token: decay, read, write the
    error."""
    from qwen.deltanet import l2norm, recurrent_gated_delta_rule

    g = torch.Generator().manual_seed(6)
    S = torch.randn(4, 3, generator=g)
    k, v = l2norm(torch.randn(4, generator=g)), torch.randn(3, generator=g)
    problems = []
    for alpha, beta in ((0.9, 0.5), (1.0, 1.0)):
        _, want = recurrent_gated_delta_rule(
            k.view(1, 1, 1, 4),
            k.view(1, 1, 1, 4),
            v.view(1, 1, 1, 3),
            torch.tensor(math.log(alpha)).view(1, 1, 1),
            torch.tensor(beta).view(1, 1, 1),
            S.view(1, 1, 4, 3).clone(),
        )
        want = want.view(4, 3)
        got = torch.as_tensor(delta_step(S.clone(), k, v, alpha, beta))
        shape = _shape_problem(got, want, _t("新状态", "the new state"))
        if shape:
            return [shape]
        if not _close(got, want, atol=1e-5):
            problems.append(
                _t(
                    f"α={alpha}, β={beta} 时新状态不对",
                    f"the new state is wrong for α={alpha}, β={beta}",
                )
            )
            if alpha == 1.0 and not _close(got.T @ k, v, atol=1e-4):
                problems.append(
                    _t(
                        "β = 1、键是单位向量时，写完用 k 读出来应该正好是 v：只写误差 v - S'ᵀk",
                        "with β = 1 and a unit key, reading k right after the write must give v "
                        "back: write only the error v - S'ᵀk",
                    )
                )
            elif _close(got, alpha * S + beta * torch.outer(k, v - S.T @ k), atol=1e-5):
                problems.append(
                    _t(
                        "先衰减，再读：预测要用衰减之后的状态 αS",
                        "decay first, then read: the prediction comes from the decayed state αS",
                    )
                )
            elif _close(got, alpha * S + beta * torch.outer(k, v), atol=1e-5):
                problems.append(
                    _t(
                        "这是线性注意力的只加不改；先读出预测，再写误差",
                        "that is linear attention, which only adds; read the prediction, write the "
                        "error",
                    )
                )
    return problems


@exercise("6.2")
def check_ch06_gates(gates):
    """gates(a, b, A_log, dt_bias) -> (g, beta): the log decay in fp32 (<= 0) and the write strength
    in (0, 1)."""
    gen = torch.Generator().manual_seed(6)
    a, b = (
        (torch.randn(5, 3, generator=gen) * 3).bfloat16(),
        (torch.randn(5, 3, generator=gen) * 3).bfloat16(),
    )
    A_log, dt_bias = torch.randn(3, generator=gen), torch.randn(3, generator=gen)
    g_want = -A_log.exp() * F.softplus(a.float() + dt_bias)
    beta_want = b.sigmoid().float()
    g, beta = gates(a, b, A_log, dt_bias)
    g, beta = torch.as_tensor(g), torch.as_tensor(beta)
    problems = [
        p for p in [_shape_problem(g, g_want, "g"), _shape_problem(beta, beta_want, "beta")] if p
    ]
    if problems:
        return problems
    if g.dtype != torch.float32:
        problems.append(
            _t(
                f"g 应在 fp32 里算（它要过指数、沿序列累加），得到 {g.dtype}",
                "compute g in fp32 (it goes through exp and is summed along the sequence), "
                f"got {g.dtype}",
            )
        )
    elif (g > 0).any():
        problems.append(
            _t(
                "g 是对数衰减，必须 ≤ 0：softplus 让 Δt 保持为正",
                "g is a log decay and must be <= 0: softplus keeps Δt positive",
            )
        )
    elif not _close(g, g_want, atol=1e-4, rtol=1e-4):
        problems.append(_t("g 不对", "wrong g"))
        for wrong, why in (
            (
                -A_log * F.softplus(a.float() + dt_bias),
                _t("A_log 是对数，先取 exp", "A_log is a log: exp it first"),
            ),
            (
                -A_log.exp() * F.softplus(a.float()),
                _t("dt_bias 加在 softplus 里面", "dt_bias goes inside the softplus"),
            ),
            (
                -A_log.exp() * F.softplus(a.float()) + dt_bias,
                _t("dt_bias 加在 softplus 里面", "dt_bias goes inside the softplus"),
            ),
            (
                -A_log.exp() * F.softplus(a + dt_bias.bfloat16()).float(),
                _t(
                    "a 先转 fp32 再加、再 softplus：bf16 的 softplus 差了一截",
                    "move a to fp32 before the sum and the softplus: in bf16 it is off",
                ),
            ),
        ):
            if _close(g, wrong, atol=1e-4, rtol=1e-4):
                problems.append(why)
                break
    if not _close(beta.float(), beta_want, atol=1e-2):
        problems.append(_t("beta 不对：beta = sigmoid(b)", "wrong beta: beta = sigmoid(b)"))
    return problems


@exercise("6.3")
def check_ch06_conv_step(conv_step):
    """conv_step(past, x, weight) -> (y, new_past): the depthwise causal conv of one call, past
    [C, K-1] the inputs kept from before, x [C, T] the new inputs, weight [C, K]; new_past the K-1
    inputs the next call needs."""
    gen = torch.Generator().manual_seed(63)
    C, K = 5, 4
    weight = torch.randn(C, K, generator=gen)
    past = torch.zeros(C, K - 1)
    stream = torch.randn(C, 9, generator=gen)
    problems, at = [], 0
    for T in (4, 1, 2, 1, 1):  # a prompt, then decode steps and a short chunk
        x = stream[:, at : at + T]
        window = torch.cat([past, x], dim=-1)
        y_want = F.conv1d(window[None], weight[:, None, :], groups=C)[0]
        keep = window[:, -(K - 1) :]
        y, new_past = (torch.as_tensor(t) for t in conv_step(past.clone(), x.clone(), weight))
        shape = _shape_problem(y, y_want, "y") or _shape_problem(new_past, keep, "new_past")
        if shape:
            return [shape]
        where = _t(f"第 {at} 到 {at + T - 1} 个 token", f"tokens {at} to {at + T - 1}")
        if not _close(y, y_want, atol=1e-5):
            problems.append(_t(f"{where}：卷积输出不对", f"{where}: wrong conv output"))
            alone = F.conv1d(F.pad(x, (K - 1, 0))[None], weight[:, None, :], groups=C)[0]
            if at and _close(y, alone, atol=1e-5):
                problems.append(
                    _t(
                        "这一次的开头当成了全零：要把上次留下的输入接在前面",
                        "this call starts from zeros: put the inputs kept from the call before "
                        "in front",
                    )
                )
            return problems
        if not _close(new_past, keep, atol=1e-6):
            problems.append(
                _t(f"{where}：留给下一次的列不对", f"{where}: wrong columns kept for the next call")
            )
            if T >= K - 1 and _close(new_past, y[:, -(K - 1) :], atol=1e-6):
                problems.append(
                    _t(
                        "留下的是卷积之后的输出；下一次卷积要的是卷积之前的输入",
                        "that keeps the conv's outputs; the next call's conv needs its inputs",
                    )
                )
            elif T < K - 1:
                problems.append(
                    _t(
                        f"这次只读了 {T} 个 token，不够 {K - 1} 列：还要带上之前留下的",
                        f"this call read only {T} token(s), fewer than {K - 1}: the kept columns "
                        "still count",
                    )
                )
            return problems
        past, at = new_past, at + T
    return problems


# ---------------------------------------------------------------------------------------- chapter 7
@exercise("7.1")
def check_ch07_decay_matrix(decay_matrix):
    """decay_matrix(g) for one chunk's log decays g [C] -> Γ [C, C], Γ_ij = exp(γ_i - γ_j) for j <=
    i, else 0."""
    g = -torch.rand(6, generator=torch.Generator().manual_seed(7))
    gamma = g.cumsum(0)
    want = (gamma[:, None] - gamma[None, :]).exp().tril()
    got = torch.as_tensor(decay_matrix(g))
    problems = [p for p in [_shape_problem(got, want, "Γ")] if p]
    if problems:
        return problems
    if _close(got, want):
        strong = torch.full((6,), -30.0)  # γ_i - γ_j reaches +150 above the diagonal
        gs = strong.cumsum(0)
        want_s = (
            (gs[:, None] - gs[None, :])
            .masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
            .exp()
        )
        got_s = torch.as_tensor(_on("g = -30", decay_matrix, strong))
        if not (got_s.shape == want_s.shape and torch.isfinite(got_s).all()):
            return [
                _t(
                    "强衰减（每步 g = -30）时 Γ 里出现了 inf 或 nan：对角线以上 exp(γ_i - γ_j) "
                    "溢出，inf × 0 = nan；先把对角线以上换成 -inf，再取 exp",
                    "with strong decays (g = -30 a step) Γ holds inf or nan: above the diagonal "
                    "exp(γ_i - γ_j) overflows and inf × 0 = nan; fill it with -inf before the exp",
                )
            ]
        if not _close(got_s, want_s):
            return [_t("强衰减（每步 g = -30）时 Γ 不对", "wrong Γ with strong decays (g = -30)")]
        return problems
    if got.triu(1).abs().max() > 0:
        problems.append(
            _t(
                "对角线以上必须是 0：第 i 步看不到之后写入的东西",
                "Γ must be 0 above the diagonal: step i cannot see later writes",
            )
        )
    if not _close(torch.diagonal(got), torch.ones(6)):
        problems.append(
            _t(
                "对角线应为 1：第 i 步读的是它自己刚写入的",
                "the diagonal must be 1: step i reads its own write undecayed",
            )
        )
    if got.tril().max() > 1 + 1e-6:
        problems.append(
            _t(
                "Γ 里出现了大于 1 的数：应是 exp(γ_i - γ_j)，不是 exp(γ_j - γ_i)",
                "Γ holds values above 1: it is exp(γ_i - γ_j), not exp(γ_j - γ_i)",
            )
        )
    return problems or [_t("Γ 的值不对", "wrong values in Γ")]


def _delta_inputs(T, seed=7):
    from qwen.deltanet import l2norm

    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(1, 2, T, 8, generator=gen)) * 8**-0.5
    k = l2norm(torch.randn(1, 2, T, 8, generator=gen))
    v = torch.randn(1, 2, T, 8, generator=gen)
    return q, k, v, -torch.rand(1, 2, T, generator=gen), torch.rand(1, 2, T, generator=gen)


class _Recorded:
    """Wrap qwen.deltanet's two forms where the reader's function finds them, and note each call:
    which form, how many tokens, the state it was handed and the g it got."""

    NAMES = ("chunk_gated_delta_rule", "recurrent_gated_delta_rule")

    def __init__(self, fn):
        import qwen.deltanet as deltanet

        self.calls, self.places = [], [deltanet.__dict__, getattr(fn, "__globals__", {})]

    def __enter__(self):
        import qwen.deltanet as deltanet

        self.saved = [{n: place.get(n) for n in self.NAMES} for place in self.places]
        for n in self.NAMES:
            real = getattr(deltanet, n)

            def wrapper(q, k, v, g, beta, state=None, *args, _real=real, _n=n, **kwargs):
                self.calls.append((_n, q.shape[2], None if state is None else state.clone(), g))
                return _real(q, k, v, g, beta, state, *args, **kwargs)

            for place in self.places:
                if n in place or place is deltanet.__dict__:
                    place[n] = wrapper
        return self

    def __exit__(self, *exc):
        for place, saved in zip(self.places, self.saved):
            for n, f in saved.items():
                if f is not None:
                    place[n] = f


@exercise("7.2")
def check_ch07_prefill_then_decode(prefill_then_decode):
    """prefill_then_decode(q, k, v, g, beta, cut): chunked over the first `cut` tokens, then the
    recurrence one token at a time from that state. Returns (outputs [B, H, T, dv], final state)."""
    from qwen.deltanet import chunk_gated_delta_rule, recurrent_gated_delta_rule

    problems = []
    for T, cut in ((100, 70), (130, 65)):  # lengths that are not multiples of 64
        inputs = _delta_inputs(T)
        o_want, S_want = recurrent_gated_delta_rule(*inputs)
        with _Recorded(prefill_then_decode) as rec:
            o, S = prefill_then_decode(*inputs, cut)
        o, S = torch.as_tensor(o), torch.as_tensor(S)
        shape = _shape_problem(o, o_want, _t("输出", "the outputs")) or _shape_problem(
            S, S_want, _t("状态", "the state")
        )
        if shape:
            return [shape]
        where = _t(f"T={T}、在 {cut} 处切开", f"T={T} cut at {cut}")
        chunked = [c for c in rec.calls if c[0] == "chunk_gated_delta_rule"]
        steps = [c for c in rec.calls if c[0] == "recurrent_gated_delta_rule"]
        if (
            sum(c[1] for c in chunked) != cut
            or len(steps) != T - cut
            or any(c[1] != 1 for c in steps)
        ):
            problems.append(
                _t(
                    f"{where}：分块形式读了 {sum(c[1] for c in chunked)} 个 token，递推走了 "
                    f"{len(steps)} 次调用、{sum(c[1] for c in steps)} 个 token；应是分块读前 "
                    f"{cut} 个（预填充），再一次一个 token 递推 {T - cut} 次（解码）",
                    f"{where}: the chunked form read {sum(c[1] for c in chunked)} tokens, the "
                    f"recurrence {sum(c[1] for c in steps)} in {len(steps)} calls; prefill is the "
                    f"chunked form over the first {cut}, decoding {T - cut} recurrent calls of one "
                    "token each",
                )
            )
            continue
        if not (_close(o, o_want, atol=1e-4) and _close(S, S_want, atol=1e-4)):
            problems.append(
                _t(
                    f"{where}：和整段递推不一致",
                    f"{where}: differs from the recurrence over the whole sequence",
                )
            )
            _, S_cut = chunk_gated_delta_rule(*(t[:, :, :cut] for t in inputs))
            handed = steps[0][2]
            if handed is None or not handed.abs().max() > 0:
                problems.append(
                    _t(
                        "第一次递推从空状态开始：把分块形式返回的状态交给它",
                        "the first recurrent step starts from an empty state: hand it the state "
                        "the chunked form returned",
                    )
                )
            elif not _close(handed, S_cut, atol=1e-4):
                problems.append(
                    _t(
                        f"交给第一次递推的不是前 {cut} 个 token 之后的状态",
                        f"the first recurrent step is not handed the state after the first {cut} "
                        "tokens",
                    )
                )
            elif any(not (c[3] != 0).any() for c in steps):
                problems.append(
                    _t(
                        "解码的每一步都要带上它自己的 g：少了衰减，状态只加不忘",
                        "each decode step needs its own g: without the decay the state never "
                        "forgets",
                    )
                )
            else:
                problems.append(
                    _t(
                        f"状态交接是对的，后 {T - cut} 步错了：第 t 步用第 t 个 token 的 q、k、v、"
                        "g、beta，和上一步留下的状态",
                        f"the hand-over is right, the last {T - cut} steps are not: step t takes "
                        "token t's q, k, v, g, beta and the state the step before left",
                    )
                )
    if not problems:
        print(
            _t(
                "100 和 130 个 token、切在 70 和 65 处：分块接递推，和从头递推一致（误差 < 1e-4）",
                "100 and 130 tokens, cut at 70 and 65: chunked then recurrent equals the "
                "recurrence (within 1e-4)",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------- chapter 8
@exercise("8.1")
def check_ch08_swiglu(swiglu):
    """swiglu(x, W_gate, W_up, W_down) with nn.Linear's [out, in] weights -> down(silu(gate(x)) *
    up(x))."""
    from qwen.mlp import MLP

    torch.manual_seed(8)
    mlp = MLP(8, 12)
    x = torch.randn(2, 3, 8)
    want = mlp(x).detach()
    W = [m.weight.detach() for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
    got = torch.as_tensor(swiglu(x, *W))
    problems = [p for p in [_shape_problem(got, want, _t("输出", "the output"))] if p]
    if problems:
        return problems
    if _close(got, want):
        flat = torch.as_tensor(_on("x [T, dim]", swiglu, x[0], *W))  # no batch dimension
        if not _close(flat, want[0]):
            return [
                _t(
                    "不带批维度的输入 [T, dim] 不对：x @ W.T 对任意前导维都成立",
                    "wrong on an unbatched input [T, dim]: x @ W.T works for any leading dims",
                )
            ]
        return problems
    problems.append(_t("和 MLP 的结果不同", "differs from MLP"))
    gate, up = x @ W[0].T, x @ W[1].T
    if _close(got, (gate * F.silu(up)) @ W[2].T):
        problems.append(
            _t(
                "SiLU 应作用在 gate_proj 的输出上，不是 up_proj",
                "the SiLU belongs on gate_proj's output, not up_proj's",
            )
        )
    if _close(got, (F.relu(gate) * up) @ W[2].T):
        problems.append(_t("这是 ReLU；门用 SiLU", "that is ReLU; the gate uses SiLU"))
    return problems


@exercise("8.2")
def check_ch08_matching_width(matching_width):
    """matching_width(d, classic_width) -> the SwiGLU hidden width with as many parameters as a
    two-matrix FFN."""
    problems = []
    for d, classic, want in ((1024, 4096, 8192 / 3), (1024, 5376, 3584.0), (512, 3000, 2000.0)):
        got = float(matching_width(d, classic))
        if abs(got - want) > 0.5:
            problems.append(
                _t(
                    f"d={d}、经典宽度 {classic} 时应为 {want:.1f}，得到 {got:.1f}",
                    f"d={d}, classic width {classic}: should be {want:.1f}, got {got:.1f}",
                )
            )
    if problems:
        problems.append(
            _t("参数相等：3·d·f = 2·d·经典宽度", "equal parameters: 3·d·f = 2·d·classic_width")
        )
    else:
        print(
            _t(
                "Qwen3.5-0.8B 的 3584 相当于 5376 = 5.25 × 1024 宽的经典 FFN",
                "the 0.8B's 3584 matches a classic FFN 5376 = 5.25 × 1024 wide",
            )
        )
    return problems


# ---------------------------------------------------------------------------------------- chapter 9
@exercise("9.1")
def check_ch09_decoder_layer(decoder_layer):
    """decoder_layer(x, norm1, mixer, norm2, mlp) -> two pre-norm residual branches."""
    from qwen.mlp import MLP
    from qwen.norm import RMSNorm

    torch.manual_seed(9)
    norm1, norm2 = RMSNorm(8), RMSNorm(8)
    for n in (norm1, norm2):
        torch.nn.init.normal_(n.weight, std=0.5)
    mixer, mlp = torch.nn.Linear(8, 8, bias=False), MLP(8, 16)
    x = torch.randn(2, 3, 8) * 4
    with torch.no_grad():
        h = x + mixer(norm1(x))
        want = h + mlp(norm2(h))
        got = torch.as_tensor(decoder_layer(x, norm1, mixer, norm2, mlp)).detach()
        post = norm2((lambda h: h + mlp(h))(norm1(x + mixer(x))))
    problems = [p for p in [_shape_problem(got, want, _t("输出", "the output"))] if p]
    if problems or _close(got, want, atol=1e-5):
        return problems
    problems.append(
        _t(
            "应为 h = x + mixer(norm1(x))，再 h + mlp(norm2(h))",
            "should be h = x + mixer(norm1(x)), then h + mlp(norm2(h))",
        )
    )
    if _close(got, post, atol=1e-5):
        problems.append(
            _t(
                "这是 post-norm：norm 只放在每个分支的入口，残差流本身不归一化",
                "that is post-norm: the norm sits at each branch's entrance, the stream is never "
                "normalised",
            )
        )
    return problems


@exercise("9.2")
def check_ch09_logit_lens(logit_lens, model, ids):
    """logit_lens(model, ids) -> per layer, the probability of the model's final next-token
    prediction if the model ended after that layer (final norm and output layer applied)."""
    got = torch.as_tensor(logit_lens(model, ids)).detach().flatten().float()
    with torch.no_grad():
        cos, sin = model.rotary_emb(torch.arange(ids.shape[1]))
        x, logits = model.embed_tokens(ids), []
        for layer in model.layers:
            x = layer(x, cos, sin)
            logits.append(model.lm_head(model.norm(x[:, -1:]))[0, -1])
        logits = torch.stack(logits)  # [layers, vocab]; the last row is model(ids)'s
        want = torch.softmax(logits, -1)[:, logits[-1].argmax()]
    problems = [p for p in [_shape_problem(got, want, _t("结果", "the result"))] if p]
    if problems or _close(got, want, atol=1e-5):
        if not problems:
            print(
                _t(
                    f"最后一层的概率 {got[-1].item():.3g} 就是整个模型给出的概率",
                    f"the last layer's probability {got[-1].item():.3g} is the whole model's",
                )
            )
        return problems
    problems.append(
        _t(
            "每层的概率不对：取最后一个位置，经过 model.norm 和 model.lm_head，再 softmax，"
            "读整个模型预测的那个 token",
            "wrong probabilities: take the last position through model.norm and model.lm_head, "
            "softmax, and read the token the whole model predicts",
        )
    )
    return problems
