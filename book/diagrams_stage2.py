"""Stage 2's diagrams: the tokenizer's steps, a chat's tokens, the prefill and the decode steps
(book/diagrams.py draws them all)."""

import functools

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
    n,
    note,
    shape,
)


@functools.cache
def tokenizer():
    """The real Qwen3.5 tokenizer (tokenizer.json rebuilt offline, in the tiny model's folder)."""
    from tokenizers import Tokenizer

    from book import tiny

    return Tokenizer.from_file(str(tiny.path() / "tokenizer.json"))


TOKENIZED = "Hello 世界!"  # English, a space, two Chinese characters: each step shows


def visible(text):
    """A space or line break made visible."""
    return text.replace(" ", "␣").replace("\n", "↵")


def diagram_tokenizer(t):
    """The tokenizer's steps on one real string: NFC, the regex's pieces, UTF-8 bytes, one
    character per byte, BPE merges, ids."""
    tok = tokenizer()
    text = tok.normalizer.normalize_str(TOKENIZED)
    pieces = tok.pre_tokenizer.pre_tokenize_str(text)  # [(byte characters, (start, end))]
    cols = []
    for chars, (a, b) in pieces:
        raw = text[a:b]
        cols.append((raw, raw.encode().hex(" "), chars, tok.model.tokenize(chars)))
    char_w = 0.2  # units per monospaced character at MONO
    widths = [max(1.0, char_w * len(c[1]) + 0.5) for c in cols]
    gap, x_left = 0.35, 0.5
    total = sum(widths) + gap * (len(cols) - 1)
    fig, ax = canvas(13, 12.6)
    xs, x = [], x_left + (12.0 - total) / 2
    for w in widths:
        xs.append(x + w / 2)
        x += w + gap
    rows = [
        (t("文本", "text"), None),
        (t("NFC 规范化（这里没有变化）", "NFC normalization (nothing changes here)"), None),
        (t("正则切成块：BPE 不会跨块合并", "the regex cuts pieces: BPE never merges across"), 0),
        (t("每块的 UTF-8 字节（十六进制）", "each piece's UTF-8 bytes (hex)"), 1),
        (t("每个字节换成一个可见字符", "each byte as one printable character"), 2),
        (t("BPE 合并成词表里的词元", "BPE merges into vocabulary tokens"), 3),
        (t("词元 id", "token ids"), 4),
    ]
    y = 11.9
    for label, field in rows:
        note(ax, x_left, y, label, ha="left", size=BIG)
        yb = y - 0.75
        if field is None:
            box(ax, 6.5, yb, total, 0.7, visible(text), "io", size=BIG + 1)
        for (raw, hexes, chars, toks), xc, w in zip(cols, xs, widths):
            if field in (0, 1, 2):
                label_ = [visible(raw), hexes, chars][field]
                box(ax, xc, yb, w, 0.7, "", "io")
                shape(ax, xc, yb, label_, size=MONO if field else BIG, color="black")
            elif field in (3, 4):
                sub = [max(3, len(tk.value)) for tk in toks]  # room for a 3-digit id
                x = xc - w / 2
                for tk, k in zip(toks, sub):
                    ww = w * k / sum(sub)
                    box(ax, x + ww / 2, yb, ww - 0.08, 0.7, "", "mlp" if field == 3 else "state")
                    shape(
                        ax,
                        x + ww / 2,
                        yb,
                        tk.value if field == 3 else str(tk.id),
                        size=MONO,
                        color="black",
                    )
                    x += ww
        y -= 1.72
    return fig


def chat_messages(t):
    """The conversation the chat strip shows: a system turn and a user turn, in the edition's
    language."""
    system = t("你是一个乐于助人的助手。", "You are a helpful assistant.")
    return [{"role": "system", "content": system}, {"role": "user", "content": t("你好！", "Hi!")}]


def diagram_chat(t):
    """One chat prompt as the model reads it: every token of the ChatML markup and the turns,
    coloured by what it is."""
    from qwen.chat import chat_ids

    tok = tokenizer()
    ids = chat_ids(tok, chat_messages(t))
    kinds = {
        "markup": ("#f4a261", t("轮次标记", "turn markers")),
        "role": ("#fbe0c3", t("角色", "role")),
        "text": (COLORS["deltanet"], t("内容（普通文本）", "content (plain text)")),
        "think": (COLORS["state"], t("思考标签", "think tags")),
        "break": ("#ececec", t("换行 ↵", "line break ↵")),
    }
    added = {i: a.content for i, a in tok.get_added_tokens_decoder().items()}
    fig, ax = canvas(13, 8.0)
    x, y, row_h, char_w = 0.4, 7.5, 0.95, 0.2
    previous = None
    for i in ids:
        word = tok.decode([i], skip_special_tokens=False)
        if added.get(i) in ("<|im_start|>", "<|im_end|>"):
            kind = "markup"
        elif added.get(i) in ("<think>", "</think>"):
            kind = "think"
        elif previous == "<|im_start|>":
            kind = "role"
        elif not word.strip():
            kind = "break"
        else:
            kind = "text"
        label = visible(word) if kind != "text" else word.replace(" ", "␣")
        w = char_w * sum(2 if "\u4e00" <= c <= "\u9fff" or c in "，。！" else 1 for c in label)
        w += 0.3
        if x + w > 12.6:
            x, y = 0.4, y - row_h
        ax.add_patch(
            FancyBboxPatch(
                (x, y - 0.35),
                w,
                0.7,
                boxstyle="round,pad=0,rounding_size=0.1",
                facecolor=kinds[kind][0],
                edgecolor=EDGE,
                linewidth=0.7,
            )
        )
        shape(ax, x + w / 2, y, label, size=MONO, color="black")
        x += w + 0.12
        previous = added.get(i)
    y -= 1.3
    note(
        ax,
        0.4,
        y,
        t(
            f"共 {len(ids)} 个词元，模型从最后一个之后开始回答",
            f"{len(ids)} tokens; the model answers after the last",
        ),
        ha="left",
        size=BIG,
    )
    y -= 0.9
    for j, (color, name) in enumerate(kinds.values()):
        yy = y - (j // 2) * 0.75
        xx = 0.4 + (j % 2) * 6.3
        ax.add_patch(
            Rectangle((xx, yy - 0.22), 0.45, 0.44, facecolor=color, edgecolor=EDGE, lw=0.7)
        )
        note(ax, xx + 0.65, yy, name, ha="left", size=BIG)
    return fig


def diagram_prefill(t):
    """Generation over time: one prefill call reads the whole prompt, then each decode call reads
    one token; the KV caches grow, the DeltaNet states are read and replaced."""
    cfg = drawing.config()
    V, nkv, hd = cfg.vocab_size, cfg.num_key_value_heads, cfg.head_dim
    n_full = cfg.layer_types.count("full_attention")
    n_lin = cfg.layer_types.count("linear_attention")
    H, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    fig, ax = canvas(13, 12.6)
    prompt, steps = 4, 3  # prompt tokens drawn, decode calls drawn
    cell, kv = 0.62, 0.3  # a token's cell; a KV cache column
    px = 0.5  # the prefill column's left edge
    pw = prompt * cell
    pc = px + pw / 2
    dx = [px + pw + 1.75 + i * 2.4 for i in range(steps)]  # decode columns' centres
    calls = [pc, *dx]
    gaps = [(pc + pw / 2 + 0.2 + dx[0] - 0.85) / 2] + [(a + b) / 2 for a, b in zip(dx, dx[1:])]
    note(ax, pc, 12.2, t("预填充：1 次调用", "prefill: 1 call"), size=BIG)
    for i, x in enumerate(dx):
        note(ax, x, 12.2, t(f"解码 {i + 1}", f"decode {i + 1}"), size=BIG)
    arrow(ax, (0.4, 11.65), (12.8, 11.65), color="#999999", lw=0.8)
    note(ax, 12.8, 11.3, t("时间", "time"), ha="right", size=BIG - 1, color="#777777")
    yin, ym, yout = 10.6, 8.6, 6.7
    # inputs: the prompt, then each call's one token (the token the call before picked)
    for j in range(prompt):
        ax.add_patch(
            Rectangle(
                (px + j * cell, yin - 0.3), cell, 0.6, facecolor="white", edgecolor=EDGE, lw=0.8
            )
        )
    for j, name in enumerate(["t₁", "t₂", "…", "tₙ"]):
        note(ax, px + (j + 0.5) * cell, yin, name, size=BIG)
    shape(ax, pc, yin - 0.62, "ids [1, n]", size=MONO)
    for i, x in enumerate(dx):
        ax.add_patch(
            Rectangle(
                (x - cell / 2, yin - 0.3), cell, 0.6, facecolor="#f4a261", edgecolor=EDGE, lw=0.8
            )
        )
        note(ax, x, yin, f"y{'₁₂₃₄'[i]}", size=BIG)
    shape(ax, dx[0], yin - 0.62, "[1, 1]", size=MONO)
    # the model, once per call
    arrow(ax, (pc, yin - 0.9), (pc, ym + 0.5))
    box(ax, pc, ym, pw + 0.4, 1.0, t("模型\n全部 T = n", "model\nall T = n"), "mlp", size=BIG)
    for x in dx:
        arrow(ax, (x, yin - 0.3), (x, ym + 0.5))
        box(ax, x, ym, 1.7, 1.0, t("模型\nT = 1", "model\nT = 1"), "mlp", size=BIG)
    # outputs: the last position's scores -> the next token, which is the next call's input
    for i, x in enumerate(calls):
        arrow(ax, (x, ym - 0.5), (x, yout + 0.3))
        ax.add_patch(
            Rectangle(
                (x - cell / 2, yout - 0.3), cell, 0.6, facecolor="#f4a261", edgecolor=EDGE, lw=0.8
            )
        )
        note(ax, x, yout, f"y{'₁₂₃₄'[i]}", size=BIG)
        if i < steps:
            g = gaps[i]
            line(ax, [x + cell / 2, g, g], [yout, yout, yin], color="#c0392b", lw=0.9)
            arrow(ax, (g, yin), (dx[i] - cell / 2, yin), color="#c0392b", lw=0.9)
    shape(ax, pc, yout - 0.62, f"logits [1, 1, {n(V)}]", size=MONO)
    note(
        ax,
        pc,
        yout - 1.15,
        t("只算最后一个位置", "the last position only"),
        size=BIG - 1,
        color="#777777",
    )
    # the caches, read and written by every call
    ykv, ydn = 3.95, 1.85
    note(
        ax,
        0.4,
        ykv + 0.8,
        t(f"KV 缓存（{n_full} 个注意力层）", f"KV cache ({n_full} attention layers)"),
        ha="left",
        size=BIG,
    )
    for i, x in enumerate(calls):
        cols = prompt + i
        for c in range(cols):
            new = i > 0 and c == cols - 1
            ax.add_patch(
                Rectangle(
                    (x - cols * kv / 2 + c * kv, ykv - 0.35),
                    kv,
                    0.7,
                    facecolor="#f4a261" if new else COLORS["attention"],
                    edgecolor=EDGE,
                    lw=0.5,
                )
            )
    note(ax, pc, ykv - 0.7, t("写入 n 列", "writes n columns"), size=BIG - 1)
    note(
        ax,
        (dx[0] + dx[-1]) / 2,
        ykv - 0.7,
        t("每次读全部，追加 1 列", "each reads all, appends 1"),
        size=BIG - 1,
    )
    note(
        ax,
        0.4,
        ydn + 0.8,
        t(f"DeltaNet 状态（{n_lin} 层）", f"DeltaNet state ({n_lin} layers)"),
        ha="left",
        size=BIG,
    )
    for x in calls:
        ax.add_patch(
            Rectangle(
                (x - 0.35, ydn - 0.35), 0.7, 0.7, facecolor=COLORS["state"], edgecolor=EDGE, lw=0.7
            )
        )
        note(ax, x, ydn, "S", size=BIG)
    for a, b in zip(calls, dx):
        arrow(ax, (a + 0.35, ydn), (b - 0.35, ydn), lw=0.9)
    note(
        ax,
        (dx[0] + dx[-1]) / 2,
        ydn - 0.7,
        t("每次读出，换成新的", "each reads it, then replaces it"),
        size=BIG - 1,
    )
    note(
        ax,
        0.4,
        0.35,
        t(
            f"KV 每列：k 和 v 各 [1, {nkv}, 1, {hd}]；S [1, {H}, {dk}, {dv}]，大小固定",
            f"KV per column: k and v [1, {nkv}, 1, {hd}]; S [1, {H}, {dk}, {dv}], fixed",
        ),
        ha="left",
        size=BIG - 0.5,
    )
    return fig
