"""Stage 1's diagrams: the stack, attention, DeltaNet and its chunks, the caches, RoPE, the
embedding (book/diagrams.py draws them all)."""

import inspect

from matplotlib.patches import FancyBboxPatch, Rectangle

from book import drawing
from book.diagrams_stage2 import tokenizer, visible
from book.drawing import (
    BIG,
    COLORS,
    EDGE,
    MONO,
    arrow,
    box,
    canvas,
    line,
    math,
    n,
    note,
    op,
    sans,
    shape,
)
from qwen.deltanet import chunk_gated_delta_rule


def diagram_stack(t):
    """The 24 layers, three DeltaNet to one attention, between the tied embedding and head; one
    layer in detail."""
    cfg = drawing.config()
    d, f, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    types = cfg.layer_types
    per = types.index("full_attention") + 1  # layers per group: 3 DeltaNet, then attention
    groups = len(types) // per
    n_full, n_lin = types.count("full_attention"), types.count("linear_attention")
    fig, ax = canvas(24, 15.5)
    cx = 8.0  # the main column
    shape(ax, cx, 15.0, t("token id [B, T]", "token ids [B, T]"))
    arrow(ax, (cx, 14.7), (cx, 14.25))
    box(ax, cx, 13.8, 7.6, 0.8, f"embed_tokens   {n(V)} × {n(d)}", "io")
    arrow(ax, (cx, 13.4), (cx, 12.75))
    shape(ax, cx + 0.25, 13.05, f"[B, T, {n(d)}]", ha="left")
    top, row_h, col_w = 12.2, 1.35, 2.55
    for i, kind in enumerate(types):
        g, j = divmod(i, per)
        x, y = cx - (per - 1) * col_w / 2 + j * col_w, top - g * row_h
        name = "DeltaNet" if kind == "linear_attention" else t("注意力", "attention")
        box(
            ax,
            x,
            y - 0.45,
            2.25,
            0.8,
            f"{t('第', 'layer ')}{i}{t(' 层', '')}\n{name}",
            "deltanet" if kind == "linear_attention" else "attention",
            size=8.5,
        )
        if j < per - 1:
            arrow(ax, (x + 1.13, y - 0.45), (x + col_w - 1.13, y - 0.45), lw=0.8)
        elif g < groups - 1:  # the row's last layer feeds the next row's first
            first, mid = x - (per - 1) * col_w, y - 0.85 - (row_h - 0.8) / 2
            line(ax, [x, x, first], [y - 0.85, mid, mid], lw=0.8)
            arrow(ax, (first, mid), (first, y - row_h - 0.05), lw=0.8)
    bottom = top - groups * row_h
    left, right = cx - per * col_w / 2 - 0.1, cx + per * col_w / 2 + 0.1
    ax.add_patch(
        Rectangle(
            (left, bottom),
            right - left,
            top - bottom + 0.15,
            fill=False,
            edgecolor="#999999",
            linewidth=0.8,
            linestyle="--",
        )
    )
    note(
        ax,
        left - 0.25,
        (top + bottom) / 2 + 0.5,
        t(
            f"{groups} 组，每组 {per} 层：\n{n_lin} 层 DeltaNet\n{n_full} 层注意力\n\n层与层之间：",
            f"{groups} groups of {per}:\n{n_lin} DeltaNet\n{n_full} attention\n\nbetween layers:",
        ),
        ha="right",
        size=8.5,
    )
    shape(ax, left - 0.25, (top + bottom) / 2 - 0.75, f"[B, T, {n(d)}]", ha="right")
    arrow(ax, (cx, bottom), (cx, bottom - 0.55))
    box(
        ax,
        cx,
        bottom - 0.95,
        7.6,
        0.8,
        t("norm（零中心 RMSNorm）", "norm (zero-centred RMSNorm)"),
        "norm",
    )
    arrow(ax, (cx, bottom - 1.35), (cx, bottom - 1.9))
    box(
        ax,
        cx,
        bottom - 2.3,
        7.6,
        0.8,
        t("lm_head = embed_tokensᵀ（共享）", "lm_head = embed_tokensᵀ (tied)"),
        "io",
    )
    arrow(ax, (cx, bottom - 2.7), (cx, bottom - 3.15))
    shape(ax, cx, bottom - 3.45, f"logits [B, T, {n(V)}]")

    # one layer in detail, on the right
    rx, lx = 19.7, 16.0  # the layer's column and its residual line
    note(
        ax,
        rx - 0.8,
        15.0,
        t(
            "每一层（两种层结构相同，只换混合器）",
            "every layer (both kinds alike but for the mixer)",
        ),
        size=9,
    )
    shape(ax, rx, 14.3, f"x [B, T, {n(d)}]")
    steps = [
        (12.9, 0.8, t("input_layernorm（RMSNorm）", "input_layernorm (RMSNorm)"), "norm"),
        (
            11.1,
            1.6,
            t(
                f"混合器：门控 DeltaNet（{n_lin} 层）\n或门控注意力（{n_full} 层）",
                f"mixer: Gated DeltaNet ({n_lin} layers)\nor gated attention ({n_full} layers)",
            ),
            "deltanet",
        ),
        (8.0, 0.8, t("post_attention_layernorm", "post_attention_layernorm"), "norm"),
        (
            6.0,
            2.0,
            f"MLP (SwiGLU)\ngate_proj, up_proj  {n(d)} → {n(f)}\n"
            f"SiLU(gate) ⊙ up\ndown_proj  {n(f)} → {n(d)}",
            "mlp",
        ),
    ]
    arrow(ax, (rx, 14.0), (rx, 12.9 + 0.4))
    for (y, h, text, kind), _nxt in zip(steps, [None, 9.6, None, 3.9]):
        box(ax, rx, y, 5.6, h, text, kind, size=8.5)
    arrow(ax, (rx, 12.5), (rx, 11.9))
    arrow(ax, (rx, 10.3), (rx, 9.6 + 0.28))
    op(ax, rx, 9.6, "+")
    arrow(ax, (rx, 9.32), (rx, 8.4))
    arrow(ax, (rx, 7.6), (rx, 7.0))
    arrow(ax, (rx, 5.0), (rx, 3.9 + 0.28))
    op(ax, rx, 3.9, "+")
    arrow(ax, (rx, 3.62), (rx, 3.0))
    shape(ax, rx, 2.7, f"x [B, T, {n(d)}]")
    for _y0, y1, y_split in [(13.75, 9.6, 13.75), (8.8, 3.9, 8.8)]:  # the two residual connections
        line(ax, [rx, lx, lx], [y_split, y_split, y1])
        arrow(ax, (lx, y1), (rx - 0.28, y1))
    note(ax, lx - 0.15, 11.6, t("残差", "residual"), ha="right", size=8)
    note(ax, lx - 0.15, 6.3, t("残差", "residual"), ha="right", size=8)
    line(ax, [right + 0.05, lx - 1.2], [top - 0.45, 14.3], color="#999999", ls=":")
    return fig


def diagram_attention(t):
    """Gated attention: per-head query/gate split, q/k norms, partial RoPE, grouped KV heads, the
    output gate."""
    cfg = drawing.config()
    d, hd, nq, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    rot = int(hd * cfg.partial_rotary_factor)
    group = nq // nkv
    fig, ax = canvas(22, 14.5)
    xq, xg, xk, xv = 9.0, 3.0, 14.0, 19.0
    shape(ax, 11.0, 14.0, f"h [B, T, {n(d)}]")
    line(ax, [xq, xv], [13.5, 13.5])
    line(ax, [11.0, 11.0], [13.75, 13.5])
    for x in (xq, xk, xv):
        arrow(ax, (x, 13.5), (x, 13.0))
    box(ax, xq, 12.6, 4.4, 0.8, f"q_proj  {n(d)} → {n(2 * nq * hd)}", "attention")
    box(ax, xk, 12.6, 4.0, 0.8, f"k_proj  {n(d)} → {n(nkv * hd)}", "attention")
    box(ax, xv, 12.6, 4.0, 0.8, f"v_proj  {n(d)} → {n(nkv * hd)}", "attention")
    arrow(ax, (xq, 12.2), (xq, 11.55))
    box(
        ax,
        xq,
        11.1,
        6.2,
        0.9,
        t(
            f"按头切开：每头 {2 * hd} = {hd} 查询 | {hd} 门",
            f"split per head: {2 * hd} = {hd} query | {hd} gate",
        ),
        "io",
        size=8.5,
    )
    shape(ax, xq, 10.4, f"[B, T, {nq}, {2 * hd}]")
    line(ax, [xq - 3.1, xg, xg], [11.1, 11.1, 10.5])
    arrow(ax, (xg, 10.5), (xg, 10.0))
    shape(ax, xg, 9.7, f"gate [B, T, {nq}, {hd}]")
    arrow(ax, (xq, 10.1), (xq, 9.55))
    shape(ax, xq, 9.3, f"q [B, T, {nq}, {hd}]")
    for x in (xk, xv):
        arrow(ax, (x, 12.2), (x, 9.55))
    shape(ax, xk, 9.3, f"k [B, T, {nkv}, {hd}]")
    shape(ax, xv, 9.3, f"v [B, T, {nkv}, {hd}]")
    for x, name in ((xq, "q_norm"), (xk, "k_norm")):
        arrow(ax, (x, 9.05), (x, 8.6))
        box(
            ax,
            x,
            8.2,
            4.6,
            0.8,
            t(f"{name}：RMSNorm（每头 {hd} 维）", f"{name}: RMSNorm over {hd}"),
            "norm",
            size=8.5,
        )
        arrow(ax, (x, 7.8), (x, 7.3))
        box(
            ax,
            x,
            6.8,
            4.6,
            1.0,
            t(
                f"RoPE：只转前 {rot} 维\n其余 {hd - rot} 维不动",
                f"RoPE on the first {rot} dims\nthe other {hd - rot} pass through",
            ),
            "norm",
            size=8.5,
        )
    note(
        ax,
        (xk + xv) / 2 + 0.7,
        8.2,
        t("v 不归一化\n也不旋转", "v: no norm,\nno rotation"),
        size=8,
        color="#777777",
    )
    arrow(ax, (xq, 6.3), (xq, 5.45))
    arrow(ax, (xk, 6.3), (xk - 1.5, 5.45))
    arrow(ax, (xv, 9.05), (xk + 1.5, 5.45))
    box(
        ax,
        (xq + xk) / 2 + 0.5,
        4.8,
        11.5,
        1.3,
        t(
            f"softmax(q kᵀ / √{hd} + 因果掩码) v\n"
            f"GQA：查询头 j 用 KV 头 ⌊j / {group}⌋（{nkv} 个 KV 头，每个服务 {group} 个查询头）",
            f"softmax(q kᵀ / √{hd} + causal mask) v\nGQA: query head j reads KV head ⌊j / {group}⌋ "
            f"({nkv} KV heads, {group} query heads each)",
        ),
        "attention",
        size=8.5,
    )
    arrow(ax, (xq, 4.15), (xq, 3.35))
    shape(ax, xq + 0.25, 3.75, f"[B, T, {nq}, {hd}] → [B, T, {n(nq * hd)}]", ha="left")
    op(ax, xq, 3.05, "×")
    arrow(ax, (xg, 9.45), (xg, 4.4))
    box(ax, xg, 3.95, 2.6, 0.8, "sigmoid", "gate")
    line(ax, [xg, xg], [3.55, 3.05])
    arrow(ax, (xg, 3.05), (xq - 0.3, 3.05))
    note(ax, (xg + xq) / 2 + 0.3, 2.7, t("输出门（逐元素）", "output gate (elementwise)"), size=8)
    arrow(ax, (xq, 2.77), (xq, 2.15))
    box(ax, xq, 1.75, 4.4, 0.8, f"o_proj  {n(nq * hd)} → {n(d)}", "attention")
    arrow(ax, (xq, 1.35), (xq, 0.75))
    shape(ax, xq, 0.45, f"out [B, T, {n(d)}]")
    note(
        ax,
        xk + 2.5,
        2.0,
        t(
            "缓存（第 11 章）存的是\n归一化并旋转之后的 k，和 v",
            "the cache (chapter 11) keeps k\nafter its norm and RoPE, and v",
        ),
        size=8,
        color="#777777",
    )
    return fig


def diagram_deltanet(t):
    """Gated DeltaNet: four projections, causal conv, L2 norm, decay g and write strength β, the
    state, gated norm."""
    cfg = drawing.config()
    d, K = cfg.hidden_size, cfg.linear_conv_kernel_dim
    H, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    Hk = cfg.linear_num_key_heads
    conv = 2 * Hk * dk + H * dv
    fig, ax = canvas(23, 15.5)
    xqkv, xz, xb, xa = 6.0, 20.6, 12.6, 16.4
    shape(ax, 11.0, 15.0, f"h [B, T, {n(d)}]")
    line(ax, [xqkv, xz], [14.5, 14.5])
    line(ax, [11.0, 11.0], [14.75, 14.5])
    for x in (xqkv, xb, xa, xz):
        arrow(ax, (x, 14.5), (x, 14.0))
    box(ax, xqkv, 13.6, 5.2, 0.8, f"in_proj_qkv  {n(d)} → {n(conv)}", "deltanet")
    box(ax, xb, 13.6, 3.0, 0.8, f"in_proj_b  → {H}", "deltanet", size=8.5)
    box(ax, xa, 13.6, 3.0, 0.8, f"in_proj_a  → {H}", "deltanet", size=8.5)
    box(ax, xz, 13.6, 3.6, 0.8, f"in_proj_z  → {n(H * dv)}", "deltanet", size=8.5)
    arrow(ax, (xqkv, 13.2), (xqkv, 12.6))
    box(
        ax,
        xqkv,
        12.0,
        5.2,
        1.2,
        t(
            f"因果卷积：逐通道，核长 {K}\n只看当前和前 {K - 1} 个 token，然后 SiLU",
            f"causal conv, per channel, kernel {K}\nthis token and {K - 1} before; then SiLU",
        ),
        "deltanet",
        size=8.5,
    )
    arrow(ax, (xqkv, 11.4), (xqkv, 10.8))
    box(
        ax,
        xqkv,
        10.4,
        5.2,
        0.8,
        t(f"切成 q | k | v，各 {H} 头 × {dk}", f"split q | k | v: {H} heads × {dk} each"),
        "io",
        size=8.5,
    )
    xs = [xqkv - 1.8, xqkv, xqkv + 1.8]
    for x in xs:
        arrow(ax, (x, 10.0), (x, 9.4))
    box(ax, xs[0], 8.85, 1.6, 1.1, t("L2 范数\n× 1/√", "L2 norm\n× 1/√") + f"{dk}", "norm", size=8)
    box(ax, xs[1], 8.85, 1.6, 1.1, t("L2 范数", "L2 norm"), "norm", size=8)
    for x, name in zip(xs, "qkv"):
        shape(ax, x, 7.9, name, size=9)
    shape(ax, xqkv, 7.45, f"[B, T, {H}, {dk}]")
    arrow(ax, (xb, 13.2), (xb, 11.0))
    box(
        ax,
        xb,
        10.5,
        3.0,
        1.0,
        t("β = sigmoid(b)\n写入强度", "β = sigmoid(b)\nwrite strength"),
        "gate",
        size=8.5,
    )
    shape(ax, xb, 9.6, f"[B, T, {H}]")
    arrow(ax, (xa, 13.2), (xa, 11.0))
    box(ax, xa, 10.5, 3.0, 1.0, "g = −exp(A_log) ·\nsoftplus(a + dt_bias)", "gate", size=8)
    note(ax, xa, 9.6, t("衰减 α = exp(g) ∈ (0, 1]", "decay α = exp(g) ∈ (0, 1]"), size=8)
    shape(ax, xa, 9.1, f"[B, T, {H}]")
    sx, sy = 11.5, 5.3
    for x in xs:
        arrow(ax, (x, 7.2), (sx - 3.0 + (x - xqkv) * 0.6, sy + 1.1))
    arrow(ax, (xb, 9.35), (sx + 1.2, sy + 1.1))
    arrow(ax, (xa, 8.85), (sx + 2.6, sy + 1.1))
    box(ax, sx, sy, 8.4, 2.2, "", "state")
    note(
        ax,
        sx - 3.7,
        sy,
        t(
            f"状态 S：每头 {dk} × {dv}，fp32，对每个 token：\nS ← α S（衰减）\n"
            "S ← S + k (β (v − Sᵀk))ᵀ（只写入预测的误差）\no = Sᵀ q（用查询读出）",
            f"state S: {dk} × {dv} per head, fp32; for each token:\nS ← α S  (decay)\n"
            "S ← S + k (β (v − Sᵀk))ᵀ  (write only the error)\no = Sᵀ q  (read with the query)",
        ),
        ha="left",
        size=8.5,
        color="black",
    )
    shape(ax, sx + 4.35, sy, f"S [B, {H}, {dk}, {dv}]", ha="left")
    arrow(ax, (sx, sy - 1.1), (sx, 2.9))
    shape(ax, sx + 0.25, 3.3, f"o [B, T, {H}, {dv}]", ha="left")
    arrow(ax, (xz, 13.2), (xz, 2.9 + 0.0))
    shape(ax, xz + 0.2, 7.0, f"z [B, T, {H}, {dv}]", ha="left")
    box(
        ax,
        (sx + xz) / 2,
        2.4,
        xz - sx + 1.6,
        1.0,
        t(
            f"门控 RMSNorm（每头 {dv} 维）：norm(o) · w · SiLU(z)",
            f"gated RMSNorm over {dv}: norm(o) · w · SiLU(z)",
        ),
        "norm",
        size=8.5,
    )
    arrow(ax, (sx, 1.9), (sx, 1.35))
    box(ax, sx, 0.95, 4.8, 0.8, f"out_proj  {n(H * dv)} → {n(d)}", "deltanet")
    arrow(ax, (sx - 2.4, 0.95), (sx - 3.2, 0.95))
    shape(ax, sx - 3.3, 0.95, f"out [B, T, {n(d)}]", ha="right")
    note(
        ax,
        2.6,
        4.6,
        t(
            f"缓存（第 11 章）：\n卷积最后 {K - 1} 列输入\n和状态 S，大小固定",
            f"the cache (chapter 11):\nthe conv's last {K - 1} inputs\nand the state S: fixed size",
        ),
        size=8,
        color="#777777",
    )
    return fig


def diagram_chunked(t):
    """The chunked form: inside a chunk, matrices; between chunks, the state carried on."""
    cfg = drawing.config()
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    C = inspect.signature(chunk_gated_delta_rule).parameters["chunk_size"].default
    fig, ax = canvas(23, 13.3)
    parallel, serial = "#e3f1dc", "#fde6cc"
    note(
        ax,
        11.5,
        12.9,
        t(
            f"把 T 个 token 切成每块 C = {C} 个（末块补零：β = g = 0 的步什么也不改）",
            f"cut T tokens into chunks of C = {C} (the last one zero-padded: steps with β = g = 0 "
            "change nothing)",
        ),
        size=9,
    )
    note(
        ax,
        11.4,
        12.25,
        t("块内累积的对数衰减", "the log decay summed inside a chunk"),
        ha="right",
        size=8.5,
    )
    for x, color, words in [
        (
            1.3,
            parallel,
            t(
                "所有块一起算（并行：一次批量矩阵运算）",
                "all chunks at once (in parallel, batched)",
            ),
        ),
        (
            12.2,
            serial,
            t("一块接一块（循环，带着状态 S）", "one chunk after another (a loop carrying S)"),
        ),
    ]:
        ax.add_patch(Rectangle((x, 11.3), 0.6, 0.4, facecolor=color, edgecolor="#999999", lw=0.6))
        note(ax, x + 0.8, 11.5, words, ha="left", size=8.5)
    math(ax, 11.6, 12.25, r"$\gamma_i = \sum_{s \leq i} g_s$", ha="left")
    xs = [4.2, 11.5, 18.8]
    for i, x in enumerate(xs):
        for y0, h, color in ((5.35, 5.45, parallel), (3.9, 1.45, serial)):
            ax.add_patch(
                Rectangle(
                    (x - 2.9, y0), 5.8, h, facecolor=color, edgecolor="#999999", linewidth=0.8
                )
            )
        note(
            ax,
            x,
            10.45,
            t(
                f"第 {i + 1} 块：token {i * C}…{(i + 1) * C - 1}",
                f"chunk {i + 1}: tokens {i * C}…{(i + 1) * C - 1}",
            ),
            size=8.5,
        )
        m, s = 6, 0.34  # C × C drawn as 6 × 6: A strictly lower, I on the diagonal
        x0, y0 = x - m * s / 2, 7.75
        for r in range(m):
            for c in range(m):
                fill = COLORS["deltanet"] if c < r else "#bbbbbb" if c == r else "#ffffff"
                ax.add_patch(
                    Rectangle(
                        (x0 + c * s, y0 + (m - 1 - r) * s),
                        s,
                        s,
                        linewidth=0.4,
                        edgecolor="#bbbbbb",
                        facecolor=fill,
                    )
                )
        note(ax, x, y0 - 0.3, f"M = I + A   ({C} × {C})", size=7.5)
        math(ax, x, 6.85, r"$A_{ij} = \beta_i\,(k_i \cdot k_j)\,e^{\gamma_i - \gamma_j},\ j < i$")
        math(ax, x, 6.2, r"$U = M^{-1}(\beta \odot V)$")
        math(ax, x, 5.6, r"$W = M^{-1}(\beta \odot e^{\gamma} \odot K)$")
        math(ax, x, 5.0, r"$V' = U - W\,S_{in}$")
        note(
            ax,
            x,
            4.4,
            t("V′：旧状态没有预测到的部分", "V′: what the old state does not predict"),
            size=7.5,
        )
    states = [0.6, *[(a + b) / 2 for a, b in zip(xs, xs[1:])], 22.4]
    ax.add_patch(Rectangle((0.0, 1.75), 23.0, 1.25, facecolor=serial, edgecolor="none"))
    for i, x in enumerate(states):
        ax.add_patch(
            FancyBboxPatch(
                (x - 0.55, 1.9),
                1.1,
                0.9,
                boxstyle="round,pad=0,rounding_size=0.12",
                facecolor=COLORS["state"],
                edgecolor=EDGE,
                linewidth=0.9,
            )
        )
        ax.text(x, 2.35, f"S{'₀₁₂₃'[i]}", ha="center", va="center", fontsize=9, family=sans())
    for x, before, after in zip(xs, states, states[1:]):
        arrow(ax, (before + 0.55, 2.35), (x - 0.45, 2.35), lw=1.1)
        arrow(ax, (x + 0.45, 2.35), (after - 0.55, 2.35), lw=1.1)
        box(ax, x, 2.35, 0.9, 0.6, t("更新", "update"), "state", size=7)
        arrow(ax, (x, 3.9), (x, 2.65), lw=0.8)
        # the chunk reads the state it starts from
        arrow(ax, (before + 0.3, 2.8), (x - 1.9, 3.9), lw=0.8, rad=-0.2)
        math(ax, (before + x) / 2 - 0.6, 3.55, r"$S_{in}$", size=8)
    for y, words, formula in [
        (
            1.15,
            t(
                f"块之间只传一个状态（每头 {dk} × {dv}）：",
                f"between chunks only the state travels ({dk} × {dv} per head):",
            ),
            r"$S_{out} = e^{\gamma_C}\,S_{in} + (e^{\gamma_C - \gamma} \odot K)^{\top}\,V'$",
        ),
        (
            0.45,
            t(
                "块内的输出全是矩阵乘，与逐 token 循环的结果相同：",
                "inside a chunk the outputs are matrix products, equal to the token-by-token loop:",
            ),
            r"$O = (e^{\gamma} \odot Q)\,S_{in} + [(Q K^{\top}) \odot \Gamma]\,V'$",
        ),
    ]:
        note(ax, 13.0, y, words, ha="right", size=8)
        math(ax, 13.2, y, formula, ha="left")
    return fig


def diagram_caches(t):
    """The two caches: the KV cache gains a column per token; DeltaNet's conv and recurrent states
    never grow."""
    cfg = drawing.config()
    n_full, n_lin = (
        cfg.layer_types.count("full_attention"),
        cfg.layer_types.count("linear_attention"),
    )
    nkv, hd, K = cfg.num_key_value_heads, cfg.head_dim, cfg.linear_conv_kernel_dim
    H, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    conv = 2 * cfg.linear_num_key_heads * dk + H * dv
    bf16, fp32 = 2, 4  # bytes per value: the model's dtype, the state's
    kv_token = 2 * n_full * nkv * hd * bf16
    dn_bytes = n_lin * (H * dk * dv * fp32 + conv * (K - 1) * bf16)
    fig, ax = canvas(22, 11.5)
    note(
        ax,
        5.5,
        11.0,
        t(f"KV 缓存：{n_full} 个注意力层", f"KV cache: the {n_full} attention layers"),
        size=9.5,
    )
    note(
        ax,
        16.5,
        11.0,
        t(f"DeltaNet 缓存：{n_lin} 个 DeltaNet 层", f"DeltaNet cache: the {n_lin} DeltaNet layers"),
        size=9.5,
    )
    for x in (5.5, 16.5):
        note(
            ax,
            x,
            10.5,
            t("每层各有一份，这里画出一层", "each layer has its own; one is drawn"),
            size=8,
            color="#777777",
        )
    line(ax, [11.0, 11.0], [0.4, 11.3], color="#cccccc")
    steps = [
        (t("读完提示（n 个 token）", "after the prompt (n tokens)"), 4),
        (t("再生成 1 个", "one token later"), 5),
        (t("再生成 2 个", "two tokens later"), 6),
    ]
    for row, (label, cols) in enumerate(steps):
        y = 9.2 - row * 3.0
        note(ax, 0.4, y + 0.9, label, ha="left", size=8.5)
        for kind, dy in (("k", 0.0), ("v", -0.9)):
            note(ax, 0.7, y + dy, kind, size=9)
            for c in range(cols):
                new = c == cols - 1 and row > 0
                ax.add_patch(
                    Rectangle(
                        (1.2 + c * 1.1, y + dy - 0.38),
                        1.0,
                        0.76,
                        linewidth=0.7,
                        edgecolor=EDGE,
                        facecolor=COLORS["attention"] if not new else "#f4a261",
                    )
                )
        note(
            ax,
            1.2 + cols * 1.1 + 0.2,
            y - 0.45,
            t(f"{['n', 'n + 1', 'n + 2'][row]} 列", f"{['n', 'n + 1', 'n + 2'][row]} columns"),
            ha="left",
            size=8,
        )
        # the DeltaNet side: the same two fixed blocks in every row
        ax.add_patch(
            Rectangle(
                (12.0, y - 0.95),
                1.2,
                1.9,
                facecolor=COLORS["deltanet"],
                edgecolor=EDGE,
                linewidth=0.8,
            )
        )
        note(ax, 12.6, y, t(f"卷积\n{K - 1} 列", f"conv\n{K - 1} cols"), size=7.5)
        ax.add_patch(
            Rectangle(
                (13.6, y - 0.95), 1.9, 1.9, facecolor=COLORS["state"], edgecolor=EDGE, linewidth=0.8
            )
        )
        note(ax, 14.55, y, "S", size=10)
        note(
            ax, 15.9, y, t("大小不变" if row else "", "same size" if row else ""), ha="left", size=8
        )
    shape(
        ax,
        5.5,
        1.55,
        t(
            f"每列 = 一个 token：k、v 各 [B, {nkv}, 1, {hd}]",
            f"a column = one token: k and v [B, {nkv}, 1, {hd}] each",
        ),
    )
    note(
        ax,
        5.5,
        0.8,
        t(
            f"每个 token 增加 {kv_token // 1024} KiB（bf16），随长度线性增长",
            f"+{kv_token // 1024} KiB per token (bf16): grows with the length",
        ),
        size=8.5,
    )
    shape(
        ax,
        16.5,
        1.55,
        t(
            f"卷积 [B, {n(conv)}, {K - 1}]，状态 S [B, {H}, {dk}, {dv}]（fp32）",
            f"conv [B, {n(conv)}, {K - 1}], state S [B, {H}, {dk}, {dv}] (fp32)",
        ),
    )
    note(
        ax,
        16.5,
        0.8,
        t(
            f"共 {dn_bytes / 2**20:.1f} MiB，任何长度都一样",
            f"{dn_bytes / 2**20:.1f} MiB in all, at any length",
        ),
        size=8.5,
    )
    return fig


def diagram_rope(t):
    """Partial RoPE: one head's 256 dims, the first 64 turned in pairs (i, i + 32), the rest
    passed through."""
    cfg = drawing.config()
    hd = cfg.head_dim
    rot = int(hd * cfg.partial_rotary_factor)
    half = rot // 2
    fig, ax = canvas(13, 8.2)
    x0, x1, y, h = 0.5, 12.5, 5.2, 1.0  # the head as one bar, drawn to scale
    u = (x1 - x0) / hd  # units per dim
    note(
        ax,
        6.5,
        7.8,
        t(f"一个头的 q 或 k：{hd} 维", f"one head of q or k: {hd} dims"),
        size=BIG + 1,
    )
    parts = [
        (0, half, "#f4a261", "x₁"),
        (half, rot, "#fbe0c3", "x₂"),
        (rot, hd, "#ececec", ""),
    ]
    for a, b, color, name in parts:
        ax.add_patch(
            Rectangle((x0 + a * u, y), (b - a) * u, h, facecolor=color, edgecolor=EDGE, lw=0.9)
        )
        if name:
            note(ax, x0 + (a + b) / 2 * u, y + h / 2, name, size=BIG)
    note(
        ax,
        x0 + (rot + hd) / 2 * u,
        y + h / 2,
        t(f"{hd - rot} 维原样通过", f"{hd - rot} dims pass through"),
        size=BIG,
    )
    for d in (0, half, rot, hd):
        shape(ax, x0 + d * u, y + h + 0.35, str(d), size=MONO)
    note(
        ax,
        x0 + rot / 2 * u,
        y + h + 1.05,
        t(f"旋转 {rot} 维", f"{rot} dims turn"),
        size=BIG,
    )
    # pair i of x1 turns with pair i of x2
    arrow(ax, (x0 + half / 2 * u, y), (x0 + (half + half / 2) * u, y), style="<|-|>", rad=0.6)
    note(ax, x0 + half * u, y - 0.75, t("第 i 对", "pair i"), size=BIG)
    note(
        ax,
        0.5,
        2.9,
        t(
            f"第 i 对 = (x₁[i], x₂[i])，i = 0…{half - 1}：{half} 对，\n"
            f"在位置 p 转过角度 p·θ^(−2i/{rot})，θ = {n(int(cfg.rope_theta))}",
            f"pair i = (x₁[i], x₂[i]), i = 0…{half - 1}: {half} pairs,\n"
            f"turned at position p by the angle p·θ^(−2i/{rot}), θ = {n(int(cfg.rope_theta))}",
        ),
        ha="left",
        size=BIG,
    )
    note(ax, 0.5, 1.4, t(f"前 {rot} 维：", f"first {rot}:"), ha="left", size=BIG)
    math(
        ax,
        3.0,
        1.4,
        r"$[x_1, x_2] \to [x_1 \cos - x_2 \sin,\ x_2 \cos + x_1 \sin]$",
        ha="left",
        size=BIG,
    )
    note(
        ax,
        0.5,
        0.6,
        t(f"其余 {hd - rot} 维：不变", f"other {hd - rot}: unchanged"),
        ha="left",
        size=BIG,
    )
    return fig


def diagram_embedding(t):
    """The embedding takes one row of the table per token id; the tied head dots a vector with
    every row of that same table."""
    cfg = drawing.config()
    V, d = cfg.vocab_size, cfg.hidden_size
    tok = tokenizer()
    text = t("今天天气不错", "The weather is nice")
    ids = tok.encode(text).ids
    colors = ["#f4a261", "#6a9fd4", "#7fbf7b", "#c39bd3", "#e57373"]
    fig, ax = canvas(13, 13.4)
    note(
        ax,
        0.4,
        13.0,
        t(f"文本 “{text}” → 词元 id", f"text “{text}” → token ids"),
        ha="left",
        size=BIG,
    )
    tx, tw, top, bottom = 5.0, 2.6, 11.8, 5.2  # the table: 248,320 rows drawn as one tall box
    ax.add_patch(
        Rectangle((tx, bottom), tw, top - bottom, facecolor="#f7f7f7", edgecolor=EDGE, lw=0.9)
    )
    note(ax, tx + tw / 2, top + 0.35, "embed_tokens.weight", size=BIG)
    shape(ax, tx + tw / 2, bottom - 0.35, f"{n(V)} × {n(d)}", size=MONO)
    note(
        ax,
        tx + tw / 2,
        (top + bottom) / 2 - 0.6,
        t("第 i 行：\nid i 的向量\n（行按比例画）", "row i:\nid i's vector\n(rows to scale)"),
        size=BIG,
    )
    ox = 9.2  # the output rows
    for j, i in enumerate(ids):
        c = colors[j % len(colors)]
        yi = 12.0 - j * 0.85  # the id's chip
        yr = top - (top - bottom) * i / V  # the id's row, to scale
        word = visible(tok.decode([i]))
        ax.add_patch(Rectangle((0.4, yi - 0.3), 2.6, 0.6, facecolor=c, edgecolor=EDGE, lw=0.7))
        shape(ax, 1.7, yi, f"{word} {i}", size=MONO, color="black")
        ax.add_patch(Rectangle((tx, yr - 0.07), tw, 0.14, facecolor=c, edgecolor=EDGE, lw=0.5))
        arrow(ax, (3.0, yi), (tx - 0.05, yr), color=c, lw=1.1)
        yo = 11.0 - j * 0.5
        ax.add_patch(Rectangle((ox, yo - 0.2), 3.2, 0.4, facecolor=c, edgecolor=EDGE, lw=0.5))
        arrow(ax, (tx + tw + 0.05, yr), (ox - 0.05, yo), color=c, lw=1.1)
    yo = 11.0 - len(ids) * 0.5
    shape(ax, ox + 1.6, yo - 0.05, f"[1, {len(ids)}, {n(d)}]", size=MONO)
    note(ax, ox + 1.6, 11.65, t("取出的行", "the rows taken"), size=BIG)
    # the way out, same table
    y = 3.1
    note(
        ax,
        0.4,
        y + 0.95,
        t("出口：输出层用同一张表（共享权重）", "the way out: the head reuses the table (tied)"),
        ha="left",
        size=BIG,
    )
    box(ax, 1.9, y, 3.0, 0.8, f"h [1, T, {n(d)}]", "io", size=MONO)
    arrow(ax, (3.4, y), (4.3, y))
    box(ax, 6.3, y, 4.0, 0.8, "@ embed_tokens.weightᵀ", "io", size=MONO)
    arrow(ax, (8.3, y), (9.0, y))
    box(ax, 10.9, y, 3.6, 0.8, f"logits [1, T, {n(V)}]", "io", size=MONO - 0.5)
    note(
        ax,
        0.4,
        1.3,
        t(
            f"lm_head.weight 就是 embed_tokens.weight 这同一个 Parameter：\n"
            f"每个 token 的分数 = h 与它那一行的点积，共 {n(V)} 个",
            f"lm_head.weight is embed_tokens.weight, the same Parameter:\n"
            f"a token's score is h dotted with its row, {n(V)} scores",
        ),
        ha="left",
        size=BIG,
    )
    return fig
