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
from qwen.cache import Cache
from qwen.deltanet import chunk_gated_delta_rule, recurrent_gated_delta_rule
from qwen.rope import apply_rope

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.name for p in (ROOT / "docs" / "en").glob("[01][0-9]-*.md"))
HEADINGS = {
    "zh": ("## 小结", "## 练习", "## 参考文献"),
    "en": ("## Summary", "## Exercises", "## References"),
}
SOLUTION = {"zh": '??? success "参考答案"', "en": '??? success "Solution"'}
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
        assert 2 <= len(tasks) <= 3 and len(solutions) == len(tasks), f"{lang}/{page}"
        assert section.count(SOLUTION[lang]) == len(tasks), (
            f"{lang}/{page}: one collapsed solution per exercise"
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


def placeholder(page, name):
    """The reader's function as the English page holds it, with its TODO."""
    for code in blocks("en", page)[0]:
        namespace, _ = run_block(code)
        if name in namespace:
            return namespace[name]
    raise LookupError(f"{page} has no exercise defining {name}")


# ---------------------------------------------------------------------------- typical wrong answers
def _wrong_rmsnorm(x, w, eps=1e-6):  # the 1 + dropped
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _wrong_gated(x, z, w, eps=1e-6):  # chapter 3's 1 + carried over
    return (1 + w) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * F.silu(z)


def _wrong_split(y, n_head, head_dim):  # all queries first, then all gates
    B, T, _ = y.shape
    q, gate = y.chunk(2, dim=-1)
    return q.reshape(B, T, n_head, head_dim), gate


def _wrong_decode(q, k, v, g, beta, cut):  # the recurrence restarts from an empty state
    o1, _ = chunk_gated_delta_rule(
        q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], g[:, :, :cut], beta[:, :, :cut]
    )
    o2, S = recurrent_gated_delta_rule(
        q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], g[:, :, cut:], beta[:, :, cut:]
    )
    return torch.cat([o1, o2], dim=2), S


def _wrong_post_norm(x, norm1, mixer, norm2, mlp):
    h = norm1(x + mixer(x))
    return norm2(h + mlp(h))


def _wrong_lens(model, ids):  # skips the final norm
    cos, sin = model.rotary_emb(torch.arange(ids.shape[1]))
    x, logits = model.embed_tokens(ids), []
    for layer in model.layers:
        x = layer(x, cos, sin)
        logits.append(model.lm_head(x[:, -1:])[0, -1])
    logits = torch.stack(logits)
    return torch.softmax(logits, -1)[:, logits[-1].argmax()]


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


@torch.no_grad()
def _forgetful_greedy(model, ids, n):  # the cache never sees the prompt's last token
    cache, out = Cache(model.cfg), []
    x = torch.tensor([ids[:-1]])
    for _ in range(n):
        token = int(model(x, cache=cache, last_only=True)[0, -1].argmax())
        out.append(token)
        x = torch.tensor([[token]])
    return out


def _rotate_half(x, angle):
    angle = torch.cat([angle, angle], dim=-1)
    return apply_rope(x, angle.cos(), angle.sin())


# page, check, solution, typical wrong answers, needs (model, ids)
CASES = [
    (
        "01-weights.md",
        ex.check_ch01_short_name,
        sol.short_name,
        [lambda n: n.removeprefix("model.")],
        False,
    ),
    (
        "01-weights.md",
        ex.check_ch01_count,
        sol.count_parameters,
        [lambda state: sum(t.numel() for t in state.values())],
        False,
    ),
    (
        "02-embedding.md",
        ex.check_ch02_nearest,
        sol.nearest,
        [lambda E, i, k: (E @ E[i]).topk(k + 1).indices[1:]],
        False,
    ),
    (
        "02-embedding.md",
        ex.check_ch02_own_row_wins,
        sol.own_row_wins,
        [lambda E: torch.ones(len(E), dtype=torch.bool)],
        False,
    ),
    ("03-norm.md", ex.check_ch03_rmsnorm, sol.rmsnorm, [_wrong_rmsnorm], False),
    ("03-norm.md", ex.check_ch03_gated, sol.gated_rmsnorm, [_wrong_gated], False),
    ("04-rope.md", ex.check_ch04_interleaved, sol.rope_interleaved, [_rotate_half], False),
    (
        "04-rope.md",
        ex.check_ch04_wavelengths,
        sol.wavelengths,
        [
            lambda hd, f, theta: (
                2 * math.pi * theta ** (torch.arange(hd // 2, dtype=torch.float64) * 2 / hd)
            )
        ],
        False,
    ),
    (
        "05-attention.md",
        ex.check_ch05_expand_kv,
        sol.expand_kv,
        [lambda k, nh: k.repeat(1, nh // k.shape[1], 1, 1)],
        False,
    ),
    ("05-attention.md", ex.check_ch05_split, sol.split_query_gate, [_wrong_split], False),
    (
        "06-deltanet.md",
        ex.check_ch06_delta_step,
        sol.delta_step,
        [lambda S, k, v, alpha, beta: alpha * S + beta * torch.outer(k, v)],
        False,
    ),
    (
        "06-deltanet.md",
        ex.check_ch06_gates,
        sol.gates,
        [lambda a, b, A_log, dt: (-A_log.exp() * (a.float() + dt), b.sigmoid().float())],
        False,
    ),
    (
        "07-chunked.md",
        ex.check_ch07_decay_matrix,
        sol.decay_matrix,
        [lambda g: (g.cumsum(0)[None, :] - g.cumsum(0)[:, None]).exp().tril()],
        False,
    ),
    (
        "07-chunked.md",
        ex.check_ch07_prefill_then_decode,
        sol.prefill_then_decode,
        [_wrong_decode],
        False,
    ),
    (
        "08-mlp.md",
        ex.check_ch08_swiglu,
        sol.swiglu,
        [lambda x, Wg, Wu, Wd: ((x @ Wg.T) * F.silu(x @ Wu.T)) @ Wd.T],
        False,
    ),
    (
        "08-mlp.md",
        ex.check_ch08_matching_width,
        sol.matching_width,
        [lambda d, c: 3 * c / 2],
        False,
    ),
    ("09-model.md", ex.check_ch09_decoder_layer, sol.decoder_layer, [_wrong_post_norm], False),
    ("09-model.md", ex.check_ch09_logit_lens, sol.logit_lens, [_wrong_lens], True),
    ("10-tokenizer.md", ex.check_ch10_stored_form, sol.stored_form, [lambda text: text], False),
    ("10-tokenizer.md", ex.check_ch10_bpe, sol.bpe, [_wrong_bpe], False),
    (
        "11-generation.md",
        ex.check_ch11_top_p,
        sol.top_p_keep,
        [lambda probs, p: probs.cumsum(0) < p],
        False,
    ),
    ("11-generation.md", ex.check_ch11_cached_greedy, sol.greedy, [_forgetful_greedy], True),
    (
        "12-chat.md",
        ex.check_ch12_render,
        sol.render,
        [lambda messages, thinking=False: sol.render(messages, True)],
        False,
    ),
    (
        "12-chat.md",
        ex.check_ch12_reusable,
        sol.reusable_prefix,
        [lambda a, b: len(a) if b[: len(a)] == a else 0],
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
            )
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
