"""Stage 3's diagrams: int8 weights, loading the file into the model (book/diagrams.py draws
them all)."""

from matplotlib.patches import FancyBboxPatch, Rectangle

from book import drawing
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
    shape,
)


def diagram_int8(t):
    """int8 with one scale per output row: max |w| of the row -> s = max / 127, q = round(w / s)."""
    import torch

    from qwen.quant import quantize_int8

    cfg = drawing.config()
    rows, cols = 4, 5
    # three decimals, so that what the figure shows is exactly what is quantized
    w = (torch.randn(rows, cols, generator=torch.Generator().manual_seed(0)) * 50).round() / 1000
    q, s = quantize_int8(w)
    big = w.abs().argmax(dim=1)
    fig, ax = canvas(13, 11.6)
    note(
        ax,
        6.5,
        11.25,
        t(
            f"权重 w [out, in] 的一个 {rows} × {cols} 小例子（随机数）",
            f"a {rows} × {cols} corner of a weight w [out, in] (random numbers)",
        ),
        size=BIG,
    )
    cw, ch, xw = 1.45, 0.62, 0.4  # cell width, height; left edge of the matrices

    def matrix(top, values, fmt, highlight):
        for r in range(rows):
            for c in range(cols):
                hit = c == int(big[r])
                ax.add_patch(
                    Rectangle(
                        (xw + c * cw, top - (r + 1) * ch),
                        cw,
                        ch,
                        facecolor=highlight if hit else "white",
                        edgecolor="#bbbbbb",
                        lw=0.6,
                    )
                )
                shape(
                    ax,
                    xw + (c + 0.5) * cw,
                    top - (r + 0.5) * ch,
                    fmt(values[r][c]),
                    size=MONO,
                    color="black",
                )

    top_w, top_q = 10.1, 5.3
    matrix(top_w, w.tolist(), lambda v: f"{v:+.3f}", "#fbe0c3")
    xs, xq = xw + cols * cw + 0.5, xw + cols * cw + 2.85
    note(ax, xs + 0.9, top_w + 0.35, "max |w|", size=BIG)
    note(ax, xq + 1.0, top_w + 0.35, "s = max/127", size=BIG)
    for r in range(rows):
        yy = top_w - (r + 0.5) * ch
        shape(ax, xs + 0.9, yy, f"{float(w[r].abs().max()):.3f}", size=MONO, color="black")
        shape(ax, xq + 1.0, yy, f"{float(s[r]):.6f}", size=MONO)
        arrow(ax, (xs + 1.6, yy), (xq + 0.05, yy), lw=0.7)
    yb = top_w - rows * ch
    arrow(ax, (xw + cols * cw / 2, yb - 0.15), (xw + cols * cw / 2, top_q + 0.65))
    math(
        ax,
        xw + cols * cw / 2 + 0.3,
        (yb + top_q) / 2 + 0.4,
        r"$q = \mathrm{round}(w / s)$",
        ha="left",
        size=BIG,
    )
    note(
        ax,
        xw + cols * cw / 2 + 0.3,
        (yb + top_q) / 2 - 0.3,
        t("每行用自己的 s", "each row with its own s"),
        ha="left",
        size=BIG,
    )
    matrix(top_q, q.tolist(), lambda v: f"{v:d}", "#f4a261")
    note(
        ax,
        xq + 1.0,
        top_q - rows * ch / 2,
        t("int8：每个 1 字节\n最大的 |w| 成了 ±127", "int8: 1 byte each\nthe largest |w| is ±127"),
        size=BIG,
    )
    note(
        ax,
        0.4,
        1.6,
        t(
            f"0.8B 的 gate_proj 有 {n(cfg.intermediate_size)} 行、{n(cfg.hidden_size)} 列：\n"
            f"{n(cfg.intermediate_size)} 个 s，每行一个；读回时 w ≈ q · s",
            f"0.8B's gate_proj has {n(cfg.intermediate_size)} rows of {n(cfg.hidden_size)}:\n"
            f"{n(cfg.intermediate_size)} scales, one per row; read back as w ≈ q · s",
        ),
        ha="left",
        size=BIG,
    )
    return fig


def diagram_loading(t):
    """The mapped load: the safetensors file mapped whole, each tensor a view at its offset; the
    model built on the meta device; load() makes each Parameter the file's tensor."""
    cfg = drawing.config()
    V, d = cfg.vocab_size, cfg.hidden_size
    conv = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
    conv += cfg.linear_num_value_heads * cfg.linear_value_head_dim
    lanes = [  # two of the text model's tensors: (short name, full name, shape), lane centre
        ("embed_tokens", "embed_tokens.weight", (V, d), 5.95),
        ("in_proj_qkv", "layers.0.linear_attn\n.in_proj_qkv.weight", (conv, d), 10.45),
    ]
    fig, ax = canvas(13, 13.4)

    def step(y, text):  # on white: the lines running past it stop short of the words
        note(
            ax, 0.4, y, text, ha="left", size=BIG, bbox={"facecolor": "white", "edgecolor": "none"}
        )

    step(13.0, t("1. safetensors 文件", "1. the safetensors file"))
    y = 12.1
    for x0, x1, label, color in [
        (0.4, 1.2, "n", "#ececec"),
        (1.2, 3.7, "JSON", "#fbe0c3"),
        (3.7, 8.1, lanes[0][0], COLORS["deltanet"]),
        (8.1, 12.5, lanes[1][0], COLORS["deltanet"]),
        (12.5, 12.9, "…", COLORS["deltanet"]),
    ]:
        ax.add_patch(
            Rectangle((x0, y - 0.4), x1 - x0, 0.8, facecolor=color, edgecolor=EDGE, lw=0.8)
        )
        shape(ax, (x0 + x1) / 2, y, label, size=MONO, color="black")
    note(
        ax,
        0.4,
        y - 0.85,
        t(
            "8 字节的 n；n 字节 JSON：每个张量的名字、dtype、形状、字节范围",
            "8 bytes n; n bytes of JSON: each tensor's name, dtype, shape, byte range",
        ),
        ha="left",
        size=BIG - 1,
        color="#555555",
    )
    step(
        10.3,
        t(
            "2. 整个文件映射成一块存储，每个张量是它在偏移处的视图：\n    还什么都没读",
            "2. the whole file mapped as one storage, each tensor a view\n"
            "    at its offset: nothing read yet",
        ),
    )
    step(
        7.2,
        t(
            "3. 在 meta 设备上建模型：只有形状，没有内存",
            "3. the model built on meta: shapes, no memory",
        ),
    )
    step(
        4.1,
        t(
            "4. load()：每个 Parameter 就是那个视图（不复制）",
            "4. load(): each Parameter is that view (no copy)",
        ),
    )
    for _, name, (rows, cols), x in lanes:
        arrow(ax, (x, 11.7), (x, 9.45), lw=0.9)
        box(ax, x, 8.95, 4.3, 0.9, "", "deltanet")
        shape(
            ax,
            x,
            8.95,
            t(f"视图 [{n(rows)}, {n(cols)}]\nbf16", f"view [{n(rows)}, {n(cols)}]\nbf16"),
            size=MONO,
            color="black",
        )
        ax.add_patch(
            FancyBboxPatch(
                (x - 2.0, 5.35),
                4.0,
                1.2,
                boxstyle="round,pad=0,rounding_size=0.15",
                facecolor="white",
                edgecolor=EDGE,
                lw=0.9,
                ls="--",
            )
        )
        shape(ax, x, 5.95, f"{name}\nmeta [{n(rows)}, {n(cols)}]", size=MONO - 1, color="black")
        box(ax, x, 2.9, 4.0, 0.9, "", "deltanet")
        shape(ax, x, 2.9, name.split("\n")[-1].lstrip("."), size=MONO - 1, color="black")
        arrow(ax, (x, 5.35), (x, 3.35), lw=0.9)
        line(ax, [x - 2.15, x - 2.25, x - 2.25], [8.95, 8.95, 3.3], color="#c0392b", lw=0.9)
        arrow(ax, (x - 2.25, 3.3), (x - 1.7, 3.3), color="#c0392b", lw=0.9)
    note(
        ax,
        0.4,
        1.3,
        t(
            "检查全照旧：缺的、多的、形状、dtype、NaN/inf；\n操作系统在第一次用到某一页时才从磁盘读它",
            "the same checks: missing, extra, shapes, dtypes, NaN/inf;\n"
            "the OS reads a page from disk the first time it is used",
        ),
        ha="left",
        size=BIG,
    )
    return fig
