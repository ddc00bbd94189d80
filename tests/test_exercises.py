"""The chapters' exercises: every check fails on the page's placeholder and on a typical wrong
answer, and passes with the solution; every chapter page ends with its exercises (placeholder blocks
that say "not solved yet", solution blocks that pass) and then its references, the same code in both
editions."""

import contextlib
import io
import math
import os
import re
from pathlib import Path

import markdown
import pytest
import torch
import torch.nn.functional as F
from pymdownx.snippets import SnippetExtension

from book import exercises as ex
from book import tiny
from book.solutions import chapters as sol
from book.tokenizer import bytes_to_unicode
from qwen.cache import Cache
from qwen.deltanet import chunk_gated_delta_rule, recurrent_gated_delta_rule
from qwen.rope import RotaryEmbedding, apply_rope

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.name for p in (ROOT / "docs" / "en").glob("[0-9][0-9]-*.md"))
HEADINGS = {
    "zh": ("## 小结", "## 练习", "## 参考文献"),
    "en": ("## Summary", "## Exercises", "## References"),
}
SOLUTION = {"zh": '??? success "参考答案"', "en": '??? success "Solution"'}
# one "explain why" question per chapter, its answer collapsed too (in Chinese also "参考答案")
EXPLAIN = {
    "zh": ("想一想。**", '??? success "参考答案"'),
    "en": ("Explain why.**", '??? success "Answer"'),
}
CJK = re.compile(r"[\u4e00-\u9fff]")
SAID = {"zh": ("还没做", "通过 ✅"), "en": ("not solved yet", "passed ✅")}
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```$", re.M | re.S)


@pytest.fixture(scope="module", autouse=True)
def tiny_model_env():
    """find_model() in the pages: the tiny test model, for this module's tests only."""
    before = os.environ.get("QWEN_MODEL")
    os.environ.setdefault("QWEN_MODEL", str(tiny.path()))
    yield
    if before is None:
        os.environ.pop("QWEN_MODEL", None)
    else:
        os.environ["QWEN_MODEL"] = before


@pytest.fixture(scope="module")
def model(tiny_model_env):
    from qwen.model import Qwen
    from qwen.weights import Config, load, load_weights

    return load(Qwen(Config.load(tiny.path())), load_weights(tiny.path())).requires_grad_(False)


def quiet(fn, *args, **kwargs):
    """Call fn; return (its result, what it printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args, **kwargs)
    return result, out.getvalue()


# ---------------------------------------------------------------------------------------- the pages
def exercises_section(lang, page):
    text = (ROOT / "docs" / lang / page).read_text()
    start = text.index(HEADINGS[lang][1] + "\n")
    return text[start : text.index(HEADINGS[lang][2] + "\n", start)]


def blocks(lang, page):
    """(exercise blocks, solution blocks) of a page's exercises, solutions with their snippets
    expanded."""
    section = exercises_section(lang, page)
    md = markdown.Markdown(
        extensions=[
            SnippetExtension(base_path=[str(ROOT)], check_paths=True, dedent_subsections=True)
        ]
    )
    expanded = "\n".join(md.preprocessors["snippet"].run(section.split("\n")))
    found = [(m[1], m[2]) for m in FENCE.finditer(expanded)]
    tasks = [code for indent, code in found if not indent]
    solutions = [
        "\n".join(line[4:] for line in code.split("\n"))
        for indent, code in found
        if indent == "    "
    ]
    return tasks, solutions


def run_block(code):
    namespace = {"__name__": "__main__"}
    _, printed = quiet(exec, compile(code, "<page>", "exec"), namespace)
    return namespace, printed


@pytest.mark.parametrize("page", CHAPTERS)
def test_chapter_ends_with_summary_exercises_then_references_in_both_editions(page):
    for lang in ("zh", "en"):
        text = (ROOT / "docs" / lang / page).read_text()
        h2 = re.findall(r"^## .*$", text, re.M)
        summary, exercises, references = HEADINGS[lang]
        assert h2[-2:] == [exercises, references], f"{lang}/{page}: the last sections are {h2[-3:]}"
        assert summary in h2, f"{lang}/{page} has no summary"
        tail = text.split(references + "\n", 1)[1]
        links = re.findall(r"\]\((https?://[^)\s]+)\)", tail)
        assert len(links) >= 2, f"{lang}/{page}: a references section with links to its sources"
        section = exercises_section(lang, page)
        tasks, solutions = blocks(lang, page)
        assert 2 <= len(tasks) <= 4 and len(solutions) == len(tasks), f"{lang}/{page}"
        question, answer = EXPLAIN[lang]
        assert section.count(question) == 1, f"{lang}/{page}: one question that asks why"
        collapsed = section.count(SOLUTION[lang]) + (lang == "en") * section.count(answer)
        assert collapsed == len(tasks) + 1, (
            f"{lang}/{page}: one collapsed solution per exercise, and the question's answer"
        )
        assert all("TODO(" in code for code in tasks), (
            f"{lang}/{page}: each exercise holds a placeholder"
        )


@pytest.mark.parametrize("page", CHAPTERS)
def test_editions_share_the_exercise_code(page):
    zh, en = blocks("zh", page), blocks("en", page)
    for a, b in zip(zh[0] + zh[1], en[0] + en[1]):
        assert a.replace('lang="zh"', 'lang="en"') == b
    assert all('lang="en"' in code for code in en[0] + en[1])


@pytest.mark.parametrize("page", CHAPTERS)
def test_page_placeholders_say_not_solved_and_solutions_pass(page, lang="en"):
    """The English blocks run here; the Chinese ones are the same code (above), with verdicts in
    Chinese (below)."""
    tasks, solutions = blocks(lang, page)
    not_done, passed = SAID[lang]
    for code in tasks:
        _, printed = run_block(code)
        assert not_done in printed and passed not in printed, printed
    for code in solutions:
        _, printed = run_block(code)
        assert passed in printed and "not right" not in printed and "还不对" not in printed, printed


@pytest.mark.parametrize("page", CHAPTERS)
def test_the_chinese_placeholders_give_their_hints_in_chinese(page):
    """The same code in both editions, the hint and the verdict in the page's language."""
    for code in blocks("zh", page)[0]:
        _, printed = run_block(code)
        assert "还没做" in printed, printed
        hint = printed.split("还没做", 1)[1]
        assert CJK.search(hint), f"zh/{page}: the hint is not in Chinese: {printed}"


def placeholder(page, name):
    """The reader's function as the English page holds it, with its TODO."""
    for code in blocks("en", page)[0]:
        namespace, _ = run_block(code)
        if name in namespace:
            return namespace[name]
    raise LookupError(f"{page} has no exercise defining {name}")


# ---------------------------------------------------------------------------- typical wrong answers
def _norm32(x, eps=1e-6):
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)


def _rmsnorm_dim1(x, w, eps=1e-6):  # the mean square over dim 1: right for [N, dim] only
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(1, keepdim=True) + eps) * (1 + w.float())).to(x.dtype)


def _wrong_rmsnorm(x, w, eps=1e-6):  # the 1 + dropped
    return (_norm32(x, eps) * w.float()).to(x.dtype)


def _bf16_rmsnorm(x, w, eps=1e-6):  # no fp32 upcast: every step rounds in bf16
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def _one_plus_w_in_bf16(x, w, eps=1e-6):  # x upcast, but 1 + w rounded in bf16 first
    return (_norm32(x, eps) * (1 + w).float()).to(x.dtype)


def _cast_before_scale(x, w, eps=1e-6):  # rounds to bf16 before multiplying by 1 + w
    return _norm32(x, eps).to(x.dtype) * (1 + w)


def _eps_outside(x, w, eps=1e-6):
    x32 = x.float()
    return (x32 / (x32.pow(2).mean(-1, keepdim=True).sqrt() + eps) * (1 + w.float())).to(x.dtype)


def _layer_norm(x, w, eps=1e-6):  # subtracts the mean
    return (F.layer_norm(x.float(), x.shape[-1:], eps=eps) * (1 + w.float())).to(x.dtype)


def _wrong_gated(x, z, w, eps=1e-6):  # chapter 3's 1 + carried over
    return (1 + w) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * F.silu(z)


def _gate_then_norm(x, z, w, eps=1e-6):
    y = x * F.silu(z)
    return w * y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)


def _wrong_split(y, n_head, head_dim):  # all queries first, then all gates
    B, T, _ = y.shape
    q, gate = y.chunk(2, dim=-1)
    return q.reshape(B, T, n_head, head_dim), gate


def _swapped_split(y, n_head, head_dim):  # per head, but gate first
    B, T, _ = y.shape
    gate, q = y.view(B, T, n_head, 2 * head_dim).chunk(2, dim=-1)
    return q, gate.reshape(B, T, n_head * head_dim)


def _strided_split(y, n_head, head_dim):  # even channels query, odd ones gate
    B, T, _ = y.shape
    return y[..., 0::2].reshape(B, T, n_head, head_dim), y[..., 1::2]


def _heads(y, head_dim):
    B, T, _ = y.shape
    return y.view(B, T, -1, head_dim).transpose(1, 2)


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _cos_sin_of(cfg, positions, factor=None):
    factor = cfg.partial_rotary_factor if factor is None else factor
    return RotaryEmbedding(cfg.head_dim, factor, cfg.rope_theta)(positions)


def _rope_then_norm(y, w, positions, cfg):
    rotated = apply_rope(_heads(y, cfg.head_dim), *_cos_sin_of(cfg, positions))
    return _rms(rotated, 1 + w, cfg.rms_norm_eps)


def _norm_whole_width(y, w, positions, cfg):  # one rms over all the heads together
    x = _rms(y, 1, cfg.rms_norm_eps)
    return apply_rope(_heads(x, cfg.head_dim) * (1 + w), *_cos_sin_of(cfg, positions))


def _rope_all_dims(y, w, positions, cfg):  # partial_rotary_factor left out
    x = _rms(_heads(y, cfg.head_dim), 1 + w, cfg.rms_norm_eps)
    return apply_rope(x, *_cos_sin_of(cfg, positions, 1.0))


def _norm_by_w(y, w, positions, cfg):  # the 1 + dropped
    x = _rms(_heads(y, cfg.head_dim), w, cfg.rms_norm_eps)
    return apply_rope(x, *_cos_sin_of(cfg, positions))


def _decay_after_read(S, k, v, alpha, beta):
    return alpha * S + beta * torch.outer(k, v - S.T @ k)


def _no_beta(S, k, v, alpha, beta):
    S = alpha * S
    return S + torch.outer(k, v - S.T @ k)


def _prefill_parts(q, k, v, g, beta, cut):
    return chunk_gated_delta_rule(
        q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], g[:, :, :cut], beta[:, :, :cut]
    )


def _decode_steps(q, k, v, g, beta, cut, S, g_of=lambda g: g):
    outs = []
    for t in range(cut, q.shape[2]):
        o, S = recurrent_gated_delta_rule(
            q[:, :, t : t + 1],
            k[:, :, t : t + 1],
            v[:, :, t : t + 1],
            g_of(g[:, :, t : t + 1]),
            beta[:, :, t : t + 1],
            S,
        )
        outs.append(o)
    return outs, S


def _wrong_decode(q, k, v, g, beta, cut):  # the recurrence restarts from an empty state
    o1, _ = _prefill_parts(q, k, v, g, beta, cut)
    outs, S = _decode_steps(q, k, v, g, beta, cut, None)
    return torch.cat([o1, *outs], dim=2), S


def _decode_without_g(q, k, v, g, beta, cut):  # the decode steps drop the decay
    o1, S = _prefill_parts(q, k, v, g, beta, cut)
    outs, S = _decode_steps(q, k, v, g, beta, cut, S, g_of=torch.zeros_like)
    return torch.cat([o1, *outs], dim=2), S


def _chunked_everywhere(q, k, v, g, beta, cut):  # the cut ignored: right outputs, wrong form
    return chunk_gated_delta_rule(q, k, v, g, beta)


def _recurrent_everywhere(q, k, v, g, beta, cut):
    return recurrent_gated_delta_rule(q, k, v, g, beta)


def _rest_in_one_call(q, k, v, g, beta, cut):  # decoding is one token per call
    o1, S = _prefill_parts(q, k, v, g, beta, cut)
    o2, S = recurrent_gated_delta_rule(
        q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], g[:, :, cut:], beta[:, :, cut:], S
    )
    return torch.cat([o1, o2], dim=2), S


def _wrong_post_norm(x, norm1, mixer, norm2, mlp):
    h = norm1(x + mixer(x))
    return norm2(h + mlp(h))


def _norm_on_the_stream(x, norm1, mixer, norm2, mlp):  # normalises the stream itself
    h = norm1(x)
    h = h + mixer(h)
    h = norm2(h)
    return h + mlp(h)


def _lens(model, ids, exit=lambda model, x: model.lm_head(model.norm(x)), pick="final", pos=-1):
    cos, sin = model.rotary_emb(torch.arange(ids.shape[1]))
    x, logits = model.embed_tokens(ids), []
    for layer in model.layers:
        x = layer(x, cos, sin)
        logits.append(exit(model, x[:, pos:][:, :1])[0, -1])
    logits = torch.stack(logits)
    probs = torch.softmax(logits, -1)
    if pick == "final":
        return probs[:, logits[-1].argmax()]
    return probs.max(-1).values  # each layer's own top token


def _wrong_lens(model, ids):  # skips the final norm
    return _lens(model, ids, exit=lambda model, x: model.lm_head(x))


def _wrong_bpe(piece, ranks):  # merges the leftmost mergeable pair
    parts = [bytes([b]) for b in piece]
    merged = True
    while merged:
        merged = False
        for i in range(len(parts) - 1):
            if parts[i] + parts[i + 1] in ranks:
                parts[i : i + 2] = [parts[i] + parts[i + 1]]
                merged = True
                break
    return parts


def _one_pass_bpe(piece, ranks):  # merges each lowest pair once, never merges the merged ones
    parts = [bytes([b]) for b in piece]
    pairs = sorted(
        (ranks[a + b], i) for i, (a, b) in enumerate(zip(parts, parts[1:])) if a + b in ranks
    )
    if pairs:
        i = pairs[0][1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def _rightmost_tie_bpe(piece, ranks):  # the lowest rank, but the rightmost on a tie
    parts = [bytes([b]) for b in piece]
    while len(parts) > 1:
        pairs = [(ranks.get(a + b, math.inf), -i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        rank, i = min(pairs)
        if rank == math.inf:
            break
        parts[-i : -i + 2] = [parts[-i] + parts[-i + 1]]
    return parts


@torch.no_grad()
def _forgetful_greedy(model, ids, n):  # the cache never sees the prompt's last token
    cache, out = Cache(model.cfg), []
    x = torch.tensor([ids[:-1]])
    for _ in range(n):
        token = int(model(x, cache=cache, last_only=True)[0, -1].argmax())
        out.append(token)
        x = torch.tensor([[token]])
    return out


@torch.no_grad()
def _uncached_greedy(model, ids, n):  # right tokens, no cache at all: recomputes every step
    seq = list(ids)
    for _ in range(n):
        seq.append(int(model(torch.tensor([seq]), last_only=True)[0, -1].argmax()))
    return seq[len(ids) :]


@torch.no_grad()
def _fresh_cache_greedy(model, ids, n):  # a new cache each step: right tokens, no reuse
    seq = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([seq]), cache=Cache(model.cfg), last_only=True)
        seq.append(int(logits[0, -1].argmax()))
    return seq[len(ids) :]


@torch.no_grad()
def _refeed_greedy(model, ids, n):  # one cache, but the whole sequence fed again each step
    cache, seq = Cache(model.cfg), list(ids)
    for _ in range(n):
        seq.append(int(model(torch.tensor([seq]), cache=cache, last_only=True)[0, -1].argmax()))
    return seq[len(ids) :]


def _rotate_half(x, angle):
    angle = torch.cat([angle, angle], dim=-1)
    return apply_rope(x, angle.cos(), angle.sin())


def _backwards_interleaved(x, angle):  # turns each neighbour pair the other way
    return sol.rope_interleaved(x, -angle)


def _swapped_coordinates(x, angle):  # (2i+1, 2i) as the pair's first coordinate
    y = sol.rope_interleaved(x.view(*x.shape[:-1], -1, 2).flip(-1).reshape(x.shape), angle)
    return y.view(*x.shape[:-1], -1, 2).flip(-1).reshape(x.shape)


def _cos_sin(angle, dtype):
    return angle.cos().to(dtype), angle.sin().to(dtype)


def _wrong_renders():
    def no_empty_think(messages, thinking=False):  # thinking off, but no empty think block
        return sol.render(messages, True).removesuffix("<think>\n")

    def keeps_thinking(messages, thinking=False):  # old turns' thinking kept in the history
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + sol.render([], thinking)

    def no_newline_after_end(messages, thinking=False):
        return sol.render(messages, thinking).replace("<|im_end|>\n", "<|im_end|>")

    return [
        lambda messages, thinking=False: sol.render(messages, True),
        no_empty_think,
        keeps_thinking,
        no_newline_after_end,
    ]


# page, check, solution, typical wrong answers, needs (model, ids)
CASES = [
    (
        "01-weights.md",
        ex.check_ch01_short_name,
        sol.short_name,
        [
            lambda n: n.removeprefix("model."),  # the language_model prefix kept
            lambda n: n.removeprefix("model.language_model."),  # the vision tower kept
            # nothing skipped
            lambda n: n.removeprefix("model.language_model.").removeprefix("model."),
            # the text-only prefix ignored
            lambda n: (
                None
                if n.startswith(("model.visual.", "mtp."))
                else n.removeprefix("model.language_model.")
            ),
        ],
        False,
    ),
    (
        "01-weights.md",
        ex.check_ch01_count,
        sol.count_parameters,
        [
            lambda state: sum(t.numel() for t in state.values()),  # the tied table twice
            lambda state: len({id(t) for t in state.values()}),  # tensors, not parameters
            # by name: the tied table's two names differ
            lambda state: sum(t.numel() for n, t in state.items() if "lm_head" not in n),
        ],
        False,
    ),
    (
        "02-embedding.md",
        ex.check_ch02_nearest,
        sol.nearest,
        [
            lambda E, i, k: (E @ E[i]).topk(k + 1).indices[1:],  # dot products
            lambda E, i, k: F.cosine_similarity(E, E[i], dim=-1).topk(k).indices,  # row i kept
            # row i dropped after the top k: one neighbour short
            lambda E, i, k: [
                j for j in F.cosine_similarity(E, E[i], dim=-1).topk(k).indices.tolist() if j != i
            ],
            # row i assumed to come first: wrong when another row is parallel to it (a tie)
            lambda E, i, k: F.cosine_similarity(E, E[i], dim=-1).topk(k + 1).indices[1:],
            # the farthest first
            lambda E, i, k: (
                (
                    lambda c: c.masked_fill(torch.arange(len(E)) == i, math.inf).topk(
                        k, largest=False
                    )
                )(F.normalize(E, dim=-1) @ F.normalize(E, dim=-1)[i]).indices
            ),
        ],
        False,
    ),
    (
        "02-embedding.md",
        ex.check_ch02_own_row_wins,
        sol.own_row_wins,
        [
            lambda E: torch.ones(len(E), dtype=torch.bool),  # "a row is closest to itself"
            # cosine instead of the dot product: then every row does win
            lambda E: (
                (F.normalize(E, dim=-1) @ F.normalize(E, dim=-1).T).argmax(-1)
                == torch.arange(len(E))
            ),
            lambda E: (E @ E.T).argmax(0) == torch.arange(len(E)) + 1,  # off by one
        ],
        False,
    ),
    (
        "03-norm.md",
        ex.check_ch03_rmsnorm,
        sol.rmsnorm,
        [
            _wrong_rmsnorm,
            _bf16_rmsnorm,
            _one_plus_w_in_bf16,
            _cast_before_scale,
            _eps_outside,
            _layer_norm,
            lambda x, w, eps=1e-6: _norm32(x, eps) * (1 + w.float()),  # fp32 out for bf16 in
            _rmsnorm_dim1,
        ],
        False,
    ),
    (
        "03-norm.md",
        ex.check_ch03_gated,
        sol.gated_rmsnorm,
        [
            _wrong_gated,
            _gate_then_norm,
            lambda x, z, w, eps=1e-6: w * _norm32(x, eps) * torch.sigmoid(z),  # σ(z), not silu
            lambda x, z, w, eps=1e-6: w * _norm32(x, eps),  # no gate
            # the mean square over dim 1: right for [N, dim] only
            lambda x, z, w, eps=1e-6: (
                w * x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + eps) * F.silu(z)
            ),
        ],
        False,
    ),
    (
        "04-rope.md",
        ex.check_ch04_interleaved,
        sol.rope_interleaved,
        [_rotate_half, _backwards_interleaved, _swapped_coordinates],
        False,
    ),
    (
        "04-rope.md",
        ex.check_ch04_cos_sin,
        sol.rope_cos_sin,
        [
            # the angle in bf16: positions near 100,000 are 512 apart
            lambda p, f, dtype: _cos_sin(
                torch.cat([p.to(dtype)[:, None] * f.to(dtype)] * 2, -1), dtype
            ),
            # the positions rounded to bf16 first
            lambda p, f, dtype: _cos_sin(
                torch.cat([p.to(dtype).float()[:, None] * f] * 2, -1), dtype
            ),
            # one angle per pair: the layout of neither pairing
            lambda p, f, dtype: _cos_sin(p.float()[:, None] * f, dtype),
            # the neighbour layout
            lambda p, f, dtype: _cos_sin((p.float()[:, None] * f).repeat_interleave(2, -1), dtype),
            # left in fp32
            lambda p, f, dtype: _cos_sin(torch.cat([p.float()[:, None] * f] * 2, -1), torch.float),
        ],
        False,
    ),
    (
        "05-attention.md",
        ex.check_ch05_expand_kv,
        sol.expand_kv,
        [
            lambda k, nh: k.repeat(1, nh // k.shape[1], 1, 1),  # alternates the kv heads
            lambda k, nh: k.repeat_interleave(nh // k.shape[1], dim=2),  # repeats positions
            lambda k, nh: k,  # not expanded
            lambda k, nh: k.repeat_interleave(4, dim=1),  # the ratio hard-coded
            lambda k, nh: k.repeat_interleave(nh // 2, dim=1),  # two kv heads assumed
            # expand then flatten the wrong way round
            lambda k, nh: (
                k[:, None]
                .expand(k.shape[0], nh // k.shape[1], *k.shape[1:])
                .reshape(k.shape[0], nh, *k.shape[2:])
            ),
        ],
        False,
    ),
    (
        "05-attention.md",
        ex.check_ch05_split,
        sol.split_query_gate,
        [
            _wrong_split,
            _swapped_split,
            _strided_split,
            # the gate left per head, [B, T, nh, hd]
            lambda y, nh, hd: (
                sol.split_query_gate(y, nh, hd)[0],
                y.view(*y.shape[:2], nh, 2 * hd)[..., hd:],
            ),
        ],
        False,
    ),
    (
        "05-attention.md",
        ex.check_ch05_causal_mask,
        sol.causal_mask,
        [
            lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(),  # no offset
            lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(T - S),  # the offset's sign
            lambda T, S: torch.ones(S, S, dtype=torch.bool).tril()[:T],  # the first T rows
            lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(S - T - 1),  # itself left out
            # an additive float mask (0 where seen, -inf where hidden) for a bool one
            lambda T, S: torch.zeros(T, S).masked_fill(
                ~torch.ones(T, S, dtype=torch.bool).tril(S - T), -math.inf
            ),
        ],
        False,
    ),
    (
        "05-attention.md",
        ex.check_ch05_norm_rope,
        sol.norm_rope,
        [
            _rope_then_norm,
            _norm_whole_width,
            _rope_all_dims,
            _norm_by_w,
            # the positions counted from 0, as if there were no cache
            lambda y, w, p, cfg: sol.norm_rope(y, w, p - p[0], cfg),
            # left as [B, T, n, hd]
            lambda y, w, p, cfg: sol.norm_rope(y, w, p, cfg).transpose(1, 2),
            # the norm in the input's dtype: in bf16 it rounds at every step
            lambda y, w, p, cfg: apply_rope(
                _rms(_heads(y, cfg.head_dim), 1 + w, cfg.rms_norm_eps), *_cos_sin_of(cfg, p)
            ),
        ],
        False,
    ),
    (
        "06-deltanet.md",
        ex.check_ch06_delta_step,
        sol.delta_step,
        [
            lambda S, k, v, alpha, beta: alpha * S + beta * torch.outer(k, v),  # linear attention
            _decay_after_read,
            _no_beta,
            lambda S, k, v, alpha, beta: S + beta * torch.outer(k, v - S.T @ k),  # no decay
            # S @ k: right only for a square state (dk = dv)
            lambda S, k, v, alpha, beta: alpha * S + beta * torch.outer(k, v - alpha * S @ k),
        ],
        False,
    ),
    (
        "06-deltanet.md",
        ex.check_ch06_gates,
        sol.gates,
        [
            lambda a, b, A_log, dt: (-A_log.exp() * (a.float() + dt), b.sigmoid().float()),
            lambda a, b, A_log, dt: (-A_log * F.softplus(a.float() + dt), b.sigmoid().float()),
            lambda a, b, A_log, dt: (-A_log.exp() * F.softplus(a.float()), b.sigmoid().float()),
            lambda a, b, A_log, dt: (  # in bf16
                -A_log.exp().bfloat16() * F.softplus(a + dt.bfloat16()),
                b.sigmoid(),
            ),
            lambda a, b, A_log, dt: (A_log.exp() * F.softplus(a.float() + dt), b.sigmoid().float()),
            lambda a, b, A_log, dt: (-A_log.exp() * F.softplus(a.float() + dt), b.float()),
        ],
        False,
    ),
    (
        "06-deltanet.md",
        ex.check_ch06_conv_step,
        sol.conv_step,
        [
            # the conv's outputs kept instead of its inputs
            lambda past, x, w: (lambda y: (y, torch.cat([past, y], -1)[:, -3:]))(
                sol.conv_step(past, x, w)[0]
            ),
            # only this call's inputs kept: too few after a short call
            lambda past, x, w: (sol.conv_step(past, x, w)[0], F.pad(x, (3, 0))[:, -3:]),
            # each call padded with zeros, the kept inputs unused
            lambda past, x, w: (
                sol.conv_step(torch.zeros_like(past), x, w)[0],
                torch.cat([past, x], -1)[:, -3:],
            ),
            # the first K - 1 columns kept, not the last
            lambda past, x, w: (sol.conv_step(past, x, w)[0], torch.cat([past, x], -1)[:, :3]),
        ],
        False,
    ),
    (
        "07-chunked.md",
        ex.check_ch07_decay_matrix,
        sol.decay_matrix,
        [
            lambda g: (g.cumsum(0)[None, :] - g.cumsum(0)[:, None]).exp().tril(),  # the sign
            lambda g: (g.cumsum(0)[:, None] - g.cumsum(0)[None, :]).exp(),  # no mask
            lambda g: (g[:, None] - g[None, :]).exp().tril(),  # no running sum
            lambda g: (g.cumsum(0)[:, None] - g.cumsum(0)[None, :]).exp().tril(-1),  # diagonal 0
            # masked by multiplying after the exp: inf * 0 = nan under strong decays
            lambda g: (
                (g.cumsum(0)[:, None] - g.cumsum(0)[None, :]).exp()
                * torch.ones(len(g), len(g)).tril()
            ),
        ],
        False,
    ),
    (
        "07-chunked.md",
        ex.check_ch07_prefill_then_decode,
        sol.prefill_then_decode,
        [
            _wrong_decode,
            _decode_without_g,
            _chunked_everywhere,
            _recurrent_everywhere,
            _rest_in_one_call,
        ],
        False,
    ),
    (
        "08-mlp.md",
        ex.check_ch08_swiglu,
        sol.swiglu,
        [
            lambda x, Wg, Wu, Wd: ((x @ Wg.T) * F.silu(x @ Wu.T)) @ Wd.T,  # SiLU on up
            lambda x, Wg, Wu, Wd: (F.relu(x @ Wg.T) * (x @ Wu.T)) @ Wd.T,  # ReLU
            lambda x, Wg, Wu, Wd: (F.silu(x @ Wg) * (x @ Wu)) @ Wd,  # weights not transposed
            lambda x, Wg, Wu, Wd: F.silu(x @ Wg.T) @ Wd.T,  # no up
            # written for a batch [B, T, dim] only
            lambda x, Wg, Wu, Wd: torch.einsum(
                "bth,dh->btd",
                F.silu(torch.einsum("btd,hd->bth", x, Wg)) * torch.einsum("btd,hd->bth", x, Wu),
                Wd,
            ),
        ],
        False,
    ),
    (
        "08-mlp.md",
        ex.check_ch08_matching_width,
        sol.matching_width,
        [
            lambda d, c: 3 * c / 2,  # upside down
            lambda d, c: c,  # the same width
            lambda d, c: 2 * c // 3 // 256 * 256,  # rounded to a multiple
            lambda d, c: 8 * d / 3,  # the LLaMA rule, right for 4d only
            lambda d, c: 2 * c // 3,  # integer division: 2730 for 2730.67
        ],
        False,
    ),
    (
        "09-model.md",
        ex.check_ch09_decoder_layer,
        sol.decoder_layer,
        [
            _wrong_post_norm,
            _norm_on_the_stream,
            lambda x, n1, mixer, n2, mlp: x + mixer(n1(x)) + mlp(n2(x)),  # parallel branches
            lambda x, n1, mixer, n2, mlp: x + mlp(n2(x + mixer(n1(x)))),  # one residual lost
        ],
        False,
    ),
    (
        "09-model.md",
        ex.check_ch09_logit_lens,
        sol.logit_lens,
        [
            _wrong_lens,
            lambda model, ids: _lens(model, ids, pick="own"),  # each layer's own top token
            lambda model, ids: _lens(model, ids, pos=0),  # the first position
        ],
        True,
    ),
    (
        "10-tokenizer.md",
        ex.check_ch10_stored_form,
        sol.stored_form,
        [
            lambda text: text,  # the text itself
            lambda text: "".join(bytes_to_unicode()[ord(c)] for c in text if ord(c) < 256),
            lambda text: text.replace(" ", "Ġ").replace("\n", "Ċ"),  # only the two famous ones
            lambda text: "".join(chr(b) for b in text.encode("utf-8")),  # Latin-1, unprintable
        ],
        False,
    ),
    (
        "10-tokenizer.md",
        ex.check_ch10_bpe,
        sol.bpe,
        [_wrong_bpe, _one_pass_bpe, _rightmost_tie_bpe, lambda piece, ranks: [piece]],
        False,
    ),
    (
        "11-generation.md",
        ex.check_ch11_top_p,
        sol.top_p_keep,
        [
            lambda probs, p: probs.cumsum(0) < p,  # the crossing token dropped
            lambda probs, p: probs.cumsum(0) <= p,
            lambda probs, p: probs >= p * probs[0],  # a min-p rule
            lambda probs, p: probs.cumsum(0) - probs <= p,  # keeps one more on an exact sum
        ],
        False,
    ),
    (
        "11-generation.md",
        ex.check_ch11_cached_greedy,
        sol.greedy,
        [_forgetful_greedy, _uncached_greedy, _fresh_cache_greedy, _refeed_greedy],
        True,
    ),
    (
        "11-generation.md",
        ex.check_ch11_repetition,
        sol.repetition_penalty,
        [
            lambda z, seen, r: (
                lambda z: (z.index_put_((torch.tensor(seen, dtype=torch.long),), z[seen] / r), z)[1]
            )(z.clone()),
            lambda z, seen, r: (
                lambda z: (
                    [  # a repeated token penalised again
                        z.__setitem__(t, z[t] / r if z[t] > 0 else z[t] * r) for t in seen
                    ]
                    and z
                )
            )(z.clone()),
            lambda z, seen, r: (  # in place: the caller's scores changed
                lambda idx: (
                    z.__setitem__(idx, torch.where(z[idx] > 0, z[idx] / r, z[idx] * r)),
                    z,
                )[1]
            )(torch.tensor(sorted(set(seen)), dtype=torch.long)),
            lambda z, seen, r: z.clone().index_add_(  # subtracted, not scaled
                0,
                torch.tensor(sorted(set(seen)), dtype=torch.long),
                -torch.full((len(set(seen)),), r),
            ),
        ],
        False,
    ),
    (
        "12-chat.md",
        ex.check_ch12_render,
        sol.render,
        _wrong_renders(),
        False,
    ),
    (
        "12-chat.md",
        ex.check_ch12_reusable,
        sol.reusable_prefix,
        [
            lambda a, b: len(a) if b[: len(a)] == a else 0,  # all or nothing
            lambda a, b: sum(x == y for x, y in zip(a, b)),  # counts matches past the first miss
            lambda a, b: min(len(a), len(b)),
        ],
        False,
    ),
    (
        "12-chat.md",
        ex.check_ch12_printable,
        sol.printable,
        [
            lambda b: (b.decode("utf-8", errors="replace"), b""),  # prints �
            lambda b: (b.decode("utf-8", errors="ignore"), b""),  # drops the cut bytes
            lambda b: (sol.printable(b)[0], b""),  # holds nothing back
            # holds back one byte only
            lambda b: (
                (b[:-1].decode("utf-8", errors="ignore"), b[-1:])
                if b and b[-1] >= 0x80
                else (b.decode("utf-8"), b"")
            ),
        ],
        False,
    ),
    (
        "12-chat.md",
        ex.check_ch12_plain,
        sol.encode_plain,
        [
            lambda tok, text: tok.encode(text).ids,  # the specials parsed: the control token is in
            lambda tok, text: tok.encode(text, add_special_tokens=False).ids,  # still parsed
            # the markers stripped: not what the user wrote
            lambda tok, text: tok.encode(re.sub(r"<\|[a-z_]+\|>", "", text)).ids,
            # escaped by added characters
            lambda tok, text: tok.encode(text.replace("<|", "<\u200b|")).ids,
            lambda tok, text: tok.encode(text.replace("<|", "< |")).ids,
            # the BPE model on the whole text, without the normaliser and pre-tokenizer
            lambda tok, text: [t.id for t in tok.model.tokenize(text)],
        ],
        False,
    ),
    (
        "13-measuring.md",
        ex.check_ch13_decode_ceiling,
        sol.decode_ceiling,
        [
            lambda P, b, gbps, gflops, B: gbps * 1e9 / (P * b),  # the batch left out
            lambda P, b, gbps, gflops, B: B * gbps * 1e9 / (P * b),  # no arithmetic limit
            # bytes per weight
            lambda P, b, gbps, gflops, B: min(B * gbps * 1e9 / P, gflops * 1e9 / (2 * P)),
            # 1 FLOP per weight
            lambda P, b, gbps, gflops, B: min(B * gbps * 1e9 / (P * b), gflops * 1e9 / P),
            # per sequence
            lambda P, b, gbps, gflops, B: min(gbps * 1e9 / (P * b), gflops * 1e9 / (2 * P * B)),
        ],
        False,
    ),
    (
        "13-measuring.md",
        ex.check_ch13_ridge_batch,
        sol.ridge_batch,
        [
            lambda b, gbps, gflops: gflops / gbps,  # right for bf16 only
            lambda b, gbps, gflops: gflops / (2 * gbps),  # bytes per weight left out
            lambda b, gbps, gflops: gflops * b / gbps,  # 2 FLOP per weight left out
            lambda b, gbps, gflops: gbps / gflops,
        ],
        False,
    ),
    (
        "14-loading.md",
        ex.check_ch14_copies,
        sol.copies,
        [
            lambda: dict.fromkeys(ex.COPIES, True),  # everything copies
            lambda: dict.fromkeys(ex.COPIES, False),  # nothing does
            # .to, .contiguous always
            lambda: {**sol.copies(), "w.to(torch.bfloat16)": True, "w.contiguous()": True},
            # reshape never copies
            lambda: {**sol.copies(), "w.T.reshape(24)": False, "w[:, :3].reshape(12)": False},
            lambda: {**sol.copies(), "w.T": True},
        ],
        False,
    ),  # a transpose moves data
    (
        "14-loading.md",
        ex.check_ch14_join,
        sol.join,
        [
            lambda ws: (torch.cat(list(ws.values())), list(ws)),  # a copy, in the dict's order
            lambda ws: (torch.cat([ws[n] for n in sorted(ws)]), sorted(ws)),  # a copy, by name
            # storage order, but a copy
            lambda ws: (lambda ts: (torch.cat([t for _, t in ts]), [n for n, _ in ts]))(
                sorted(ws.items(), key=lambda kv: kv[1].data_ptr())
            ),
            lambda ws: (
                lambda ts: (
                    ts[0][1].as_strided(
                        # a view,
                        (sum(t.shape[0] for _, t in ts), ts[0][1].shape[1]),
                        # no check
                        (ts[0][1].shape[1], 1),
                    ),
                    [n for n, _ in ts],
                )
            )(sorted(ws.items(), key=lambda kv: kv[1].data_ptr())),
        ],
        False,
    ),
    (
        "15-decoding.md",
        ex.check_ch15_grown_capacity,
        sol.grown_capacity,
        [
            lambda capacity, needed: max(capacity, needed),  # grows to fit, one copy a token
            # doubles once, may not fit
            lambda capacity, needed: 2 * capacity if needed > capacity else capacity,
            # linear
            lambda capacity, needed: (
                capacity + max(needed - capacity, 256) if needed > capacity else capacity
            ),
            lambda capacity, needed: 2 * capacity,  # grows even when it fits
            # hoards
            lambda capacity, needed: 8 * max(capacity, needed) if needed > capacity else capacity,
        ],
        False,
    ),
    (
        "15-decoding.md",
        ex.check_ch15_conv_state,
        sol.conv_state,
        [
            lambda window, k: window[..., -k:],  # a view of the whole window
            lambda window, k: window[..., -k:].contiguous(),  # copies only when not contiguous
            lambda window, k: window[..., -k:].to(window.dtype),  # the same dtype: no copy
            lambda window, k: window[..., -k:].detach(),
            lambda window, k: window.clone()[..., -k:],
        ],
        False,
    ),  # a copy of the whole window
    (
        "16-int8.md",
        ex.check_ch16_quantize,
        sol.quantize,
        [
            lambda w: (
                torch.round(w / (w.abs().max() / 127)).to(torch.int8),  # one scale for the matrix
                (w.abs().max() / 127).expand(w.shape[0]),
            ),
            lambda w: (  # truncates instead of rounding: up to a whole step off
                (w / (w.abs().amax(1, keepdim=True) / 127)).to(torch.int8),
                w.abs().amax(1) / 127,
            ),
            lambda w: (  # a scale per column
                torch.round(w / (w.abs().amax(0) / 127)).to(torch.int8),
                w.abs().amax(0) / 127,
            ),
            lambda w: (  # q left in fp32
                torch.round(w / (w.abs().amax(1, keepdim=True) / 127)),
                w.abs().amax(1) / 127,
            ),
        ],
        False,
    ),
    (
        "16-int8.md",
        ex.check_ch16_head_saving,
        sol.head_saving,
        [
            lambda P, head, b0, b1: head / P,  # the head's share of weights
            # out of the bytes after
            lambda P, head, b0, b1: head * (b0 - b1) / ((P - head) * b0 + head * b1),
            lambda P, head, b0, b1: head * (b0 - b1) / ((P + head) * b0),  # the table counted twice
            lambda P, head, b0, b1: 1 - b1 / b0,
        ],
        False,
    ),  # as if everything were quantized
    (
        "16-int8.md",
        ex.check_ch16_round_activations,
        sol.round_activations,
        # no zero point
        [
            lambda x: (lambda step: (torch.round(x / step).clamp(0, 127), step, torch.tensor(0.0)))(
                x.abs().max() / 127
            ),
            # zero not whole
            lambda x: (lambda lo, step: (torch.round((x - lo) / step), step, -lo / step))(
                x.min(), (x.max() - x.min()) / 127
            ),
            # the zero point floored, not rounded
            lambda x: (
                lambda lo, step: (
                    lambda zero: (torch.round(x / step + zero).clamp(0, 127), step, zero)
                )(torch.floor(-lo / step))
            )(x.min().clamp(max=0), (x.max().clamp(min=0) - x.min().clamp(max=0)) / 127),
            # no floor under the step: an all-zero input gives 0 / 0
            lambda x: (
                lambda lo, step: (
                    lambda zero: (torch.round(x / step + zero).clamp(0, 127), step, zero)
                )(torch.round(-lo / step))
            )(x.min().clamp(max=0), (x.max().clamp(min=0) - x.min().clamp(max=0)) / 127),
        ],
        False,
    ),
    # -- ch17 cases
    (
        "17-loss.md",
        ex.check_ch17_masked_perplexity,
        sol.masked_perplexity,
        [
            lambda nll, mask: torch.exp(nll[mask].mean()),  # the shift forgotten
            lambda nll, mask: torch.exp(  # the mean of each sequence's mean
                torch.stack([n[:-1][m[1:]].mean() for n, m in zip(nll, mask)]).mean()
            ),
            lambda nll, mask: torch.exp(nll[:, :-1].mean()),  # the prompts and padding scored too
            # divided by every target, the first token's too, which nothing predicts
            lambda nll, mask: torch.exp((nll[:, :-1] * mask[:, 1:]).sum() / mask.sum()),
            lambda nll, mask: torch.exp(  # each sequence's perplexity, averaged
                torch.stack([n[:-1][m[1:]].mean() for n, m in zip(nll, mask)])
            ).mean(),
        ],
        False,
    ),
    (
        "17-loss.md",
        ex.check_ch17_loss_ignore,
        sol.loss,
        [
            lambda z, y: (  # ignored positions in the mean
                torch.where(
                    y != -100,
                    torch.logsumexp(z, -1) - z.gather(-1, y.clamp(min=0)[:, None])[:, 0],
                    0.0,
                ).sum()
                / len(y)
            ),
            lambda z, y: (  # softmax by hand, no max subtracted: e^z overflows
                -torch.log(z.exp() / z.exp().sum(-1, keepdim=True))
                .gather(-1, y.clamp(min=0)[:, None])[:, 0][y != -100]
                .mean()
            ),
            lambda z, y: F.cross_entropy(z, y.clamp(min=0)),  # -100 read as token 0
            # token id 0 taken for an ignored target
            lambda z, y: F.cross_entropy(z[y > 0].double(), y[y > 0]),
            lambda z, y: F.cross_entropy(z, y),  # in the logits' dtype: bf16 stays bf16
        ],
        False,
    ),
    # -- ch18 cases
    (
        "18-gradients.md",
        ex.check_ch18_rmsnorm_grad,
        sol.weight_grad,
        [
            lambda x, w, dy: dy * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),  # no sum
            lambda x, w, dy: (  # the scale 1 + w in the gradient of w
                dy * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w)
            ).sum(0),
            lambda x, w, dy: (dy * x).sum(0),  # the normalisation forgotten
            # eps outside the root: only a row near eps tells
            lambda x, w, dy: (dy * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)).sum(0),
        ],
        False,
    ),
    (
        "18-gradients.md",
        ex.check_ch18_mlp_bytes,
        sol.mlp_bytes,
        [
            lambda T, d, h: 4 * T * (2 * d + 4 * h),  # x counted twice (gate and up)
            lambda T, d, h: 4 * T * (d + 3 * h),  # SiLU's input or output forgotten
            lambda T, d, h: 2 * T * (d + 4 * h),  # 2 bytes a number: bf16, not fp32
            lambda T, d, h: 4 * (T * (d + 4 * h) + 3 * d * h),  # the weights counted
        ],
        False,
    ),
    (
        "18-gradients.md",
        ex.check_ch18_accumulate,
        sol.accumulate,
        [
            lambda model, loss_fn, mbs: [loss_fn(model, x).backward() for x in mbs],  # no divide
            lambda model, loss_fn, mbs: [  # zeroed in between: only the last micro-batch is left
                (model.zero_grad(), (loss_fn(model, x) / len(mbs)).backward()) for x in mbs
            ],
            lambda model, loss_fn, mbs: (loss_fn(model, mbs[-1])).backward(),  # one micro-batch
            # the right gradient, but every micro-batch's activations alive at once
            lambda model, loss_fn, mbs: (sum(loss_fn(model, x) for x in mbs) / len(mbs)).backward(),
        ],
        False,
    ),
    # -- ch19 cases
    (
        "19-backward.md",
        ex.check_ch19_solve_backward,
        sol.solve_backward,
        [
            lambda M, U, dU: (  # the transpose forgotten
                (dX := torch.linalg.solve_triangular(M, dU, upper=False)),
                -(dX @ U.mT).tril(-1),
            ),
            lambda M, U, dU: (  # dM keeps the diagonal and the upper part
                (dX := torch.linalg.solve_triangular(M.mT, dU, upper=True)),
                -(dX @ U.mT),
            ),
            lambda M, U, dU: (  # the sign of dM
                (dX := torch.linalg.solve_triangular(M.mT, dU, upper=True)),
                (dX @ U.mT).tril(-1),
            ),
            lambda M, U, dU: (  # transpose(1, 2): right for a batch [B, C, C] only
                (dX := torch.linalg.solve_triangular(M.transpose(1, 2), dU, upper=True)),
                -(dX @ U.transpose(1, 2)).tril(-1),
            ),
        ],
        False,
    ),
    (
        "19-backward.md",
        ex.check_ch19_cumsum_backward,
        sol.cumsum_backward,
        [
            lambda d: d.cumsum(-1),  # the forward cumsum
            lambda d: d.flip(-1).cumsum(-1),  # not flipped back
            lambda d: d,  # as if gamma were g
            lambda d: d.flip(1).cumsum(1).flip(1),  # dim 1: right for [B, T] only
        ],
        False,
    ),
    (
        "19-backward.md",
        ex.check_ch19_bytes_per_chunk,
        sol.bytes_per_chunk,
        [
            lambda C, dk, dv, s: s * C * (2 * dk + dv + 2),  # the state forgotten
            lambda C, dk, dv, s: s * (C * (2 * dk + dv) + dk * dv),  # g and beta forgotten
            # the C x C matrices kept as autograd would
            lambda C, dk, dv, s: s * (C * (2 * dk + dv + 2) + dk * dv + 3 * C * C),
            lambda C, dk, dv, s: 4 * (C * (2 * dk + dv + 2) + dk * dv),  # fp32 always
        ],
        False,
    ),
    # -- ch20 cases
    (
        "20-lora.md",
        ex.check_ch20_answer_mask,
        sol.answer_mask,
        [
            lambda ids, op: [not x for x in sol.answer_mask(ids, op)],  # the answer masked
            lambda ids, op: [  # the assistant's opening included
                i >= len(ids) - ids[::-1].index(op[-1]) - len(op) for i in range(len(ids))
            ],
            lambda ids, op: sol.answer_mask(ids, op)[:-1] + [False],  # <|im_end|> not learned
            lambda ids, op: [True] * len(ids),  # every token, as in pretraining
            # after the last place the opening's last token appears
            lambda ids, op: [i >= len(ids) - ids[::-1].index(op[-1]) for i in range(len(ids))],
            # after the first opening: an earlier answer learned too
            lambda ids, op: (lambda start: [i >= start for i in range(len(ids))])(
                min(i + len(op) for i in range(len(ids)) if ids[i : i + len(op)] == op)
            ),
        ],
        False,
    ),
    (
        "20-lora.md",
        ex.check_ch20_lora_params,
        sol.lora_params,
        [
            lambda shapes, r: sum(r * o * i for o, i in shapes),  # r x in x out
            lambda shapes, r: sum(o * i for o, i in shapes),  # the full fine-tune
            lambda shapes, r: sum(o * i + r * (o + i) for o, i in shapes),  # W counted
            lambda shapes, r: sum(r * i for o, i in shapes),  # A only
        ],
        False,
    ),
    (
        "20-lora.md",
        ex.check_ch20_merge,
        sol.merge,
        [
            lambda W, A, B, alpha, r: W + B @ A,  # the alpha / r scale forgotten
            lambda W, A, B, alpha, r: W + (r / alpha) * B @ A,  # the scale upside down
            lambda W, A, B, alpha, r: W + (alpha / r) * A.T @ B.T,  # the product turned round
            lambda W, A, B, alpha, r: W + (alpha // r) * B @ A,  # integer division
        ],
        False,
    ),
    # -- ch21 cases
    (
        "21-scratch.md",
        ex.check_ch21_lr_at,
        sol.lr_at,
        [
            lambda s, n, peak, w, floor=0.1: (  # cosine down to 0, the floor ignored
                peak * (s + 1) / w
                if s < w
                else peak * 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, n - 1 - w)))
            ),
            lambda s, n, peak, w, floor=0.1: (  # off by one: step 0 has lr 0
                peak * s / w if s < w else sol.lr_at(s, n, peak, w, floor)
            ),
            lambda s, n, peak, w, floor=0.1: (  # the floor reached one step after the end
                peak * (s + 1) / w
                if s < w
                else peak
                * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (s - w) / (n - w))))
            ),
        ],
        False,
    ),
    (
        "21-scratch.md",
        ex.check_ch21_bigram_perplexity,
        sol.bigram_perplexity,
        [
            lambda tr, te, V, k: sol.bigram_perplexity(tr, te, V, 1e-9),  # no smoothing to speak of
            lambda tr, te, V, k: math.exp(  # k not spread over the vocabulary
                -sum(
                    math.log(
                        (sum(a == x and b == y for x, y in zip(tr, tr[1:])) + k)
                        / (sum(a == x for x in tr[:-1]) + k)
                    )
                    for a, b in zip(te, te[1:])
                )
                / (len(te) - 1)
            ),
            lambda tr, te, V, k: math.exp(  # count(a) over the whole text, the last token too
                -sum(
                    math.log(
                        (sum(a == x and b == y for x, y in zip(tr, tr[1:])) + k)
                        / (tr.count(a) + k * V)
                    )
                    for a, b in zip(te, te[1:])
                )
                / (len(te) - 1)
            ),
            lambda tr, te, V, k: sol.bigram_perplexity(tr, te, V, k) ** 0.5,  # the log2, halved
        ],
        False,
    ),
    (
        "21-scratch.md",
        ex.check_ch21_param_count,
        sol.param_count,
        [
            lambda cfg: (
                sol.param_count(cfg)  # the tied head counted twice
                + (cfg.vocab_size * cfg.hidden_size if cfg.tie_word_embeddings else 0)
            ),
            lambda cfg: (
                sol.param_count(cfg)  # q_proj without its gate half
                - cfg.layer_types.count("full_attention")
                * cfg.hidden_size
                * cfg.num_attention_heads
                * cfg.head_dim
            ),
            lambda cfg: sol.param_count(cfg) - 2 * cfg.num_hidden_layers * cfg.hidden_size,  # norms
            lambda cfg: (
                sol.param_count(cfg)  # the untied head forgotten
                - (0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size)
            ),
        ],
        False,
    ),
]


@pytest.mark.parametrize(
    "page, check, solution, wrong, needs_model", CASES, ids=[c[1].__name__ for c in CASES]
)
def test_check_fails_on_the_placeholder_and_a_wrong_answer_and_passes_the_solution(
    page, check, solution, wrong, needs_model, model
):
    args = (
        (
            model,
            torch.tensor([[97375, 101618, 98869]])
            if check is ex.check_ch09_logit_lens
            else [97375, 101618, 98869],
        )
        if needs_model
        else ()
    )
    result, printed = quiet(check, placeholder(page, solution.__name__), *args)
    assert result is False and "not solved yet" in printed
    for answer in wrong:
        result, printed = quiet(check, answer, *args)
        assert result is False and "not right yet" in printed, printed
    result, printed = quiet(check, solution, *args, lang="zh")
    assert result is True and "通过" in printed, printed


def test_a_check_never_raises_and_says_what_went_wrong():
    # a shape error inside
    result, printed = quiet(ex.check_ch05_expand_kv, lambda k, n: k.view(-1, 5))
    assert result is False and "RuntimeError" in printed
    result, printed = quiet(ex.check_ch08_swiglu, lambda *a: "not a tensor")
    assert result is False and "not right yet" in printed
    assert quiet(ex.check_ch12_reusable, sol.reusable_prefix, lang="fr")[0] is False
    # a hint in each language, the page's one shown; a single hint serves both
    bilingual = lambda *a: ex.TODO("中文提示", "English hint")  # noqa: E731
    assert "中文提示" in quiet(ex.check_ch08_swiglu, bilingual, lang="zh")[1]
    assert "English hint" in quiet(ex.check_ch08_swiglu, bilingual, lang="en")[1]
    for lang in ("zh", "en"):
        result, printed = quiet(ex.check_ch08_swiglu, lambda *a: ex.TODO("one hint"), lang=lang)
        assert result is False and "one hint" in printed and SAID[lang][0] in printed
