"""Solutions to the chapters' exercises (book/exercises.py checks them); each page shows its own in
a collapsed block, included from the named sections below."""

# the chapter pages show this code with its comments aligned in columns, which the
# formatter would undo (as for qwen/); ruff check still holds it to the rules
# fmt: off
import math

import torch
import torch.nn.functional as F

from book.tokenizer import bytes_to_unicode
from qwen.cache import Cache
from qwen.chat import strip_thinking
from qwen.deltanet import chunk_gated_delta_rule, recurrent_gated_delta_rule
from qwen.rope import RotaryEmbedding, apply_rope


# --8<-- [start:ch01_short_name]
def short_name(name):
    """模块里的名字；视觉塔和 MTP 头返回 None / our name, or None (vision tower, MTP head)."""
    if name.startswith(("model.visual.", "mtp.")):
        return None
    for prefix in ("model.language_model.", "model."):      # the longer prefix first
        if name.startswith(prefix):
            return name[len(prefix):]
    return name
# --8<-- [end:ch01_short_name]


# --8<-- [start:ch01_count]
def count_parameters(state):
    """参数个数，每个张量只算一次 / parameters, each tensor counted once."""
    unique = {id(t): t.numel() for t in state.values()}  # a tied Parameter appears under two names
    return sum(unique.values())
# --8<-- [end:ch01_count]


# --8<-- [start:ch02_nearest]
def nearest(E, i, k):
    """按余弦最近的 k 行，不含第 i 行 / the k nearest rows by cosine, row i left out."""
    unit = F.normalize(E, dim=-1)                           # unit rows: a dot product is a cosine
    cos = unit @ unit[i]
    cos[i] = -math.inf                                      # not its own neighbour
    return cos.topk(k).indices
# --8<-- [end:ch02_nearest]


# --8<-- [start:ch02_own_row_wins]
def own_row_wins(E):
    """argmax_i E[j]·E[i] == j ?"""
    return (E @ E.T).argmax(dim=-1) == torch.arange(E.shape[0])
# --8<-- [end:ch02_own_row_wins]


# --8<-- [start:ch03_rmsnorm]
def rmsnorm(x, w, eps=1e-6):
    """x / rms(x) * (1 + w)   (fp32; x.dtype out)"""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * (1 + w.float())).to(x.dtype)
# --8<-- [end:ch03_rmsnorm]


# --8<-- [start:ch03_gated]
def gated_rmsnorm(x, z, w, eps=1e-6):
    """w * x / rms(x) * silu(z)"""
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x * F.silu(z)
# --8<-- [end:ch03_gated]


# --8<-- [start:ch04_interleaved]
def rope_interleaved(x, angle):
    """Turn each neighbour pair (x[2i], x[2i+1]) by angle[..., i]."""
    x1, x2 = x[..., 0::2], x[..., 1::2]                     # the two coordinates of each pair
    cos, sin = angle.cos(), angle.sin()
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out
# --8<-- [end:ch04_interleaved]


# --8<-- [start:ch04_cos_sin]
def rope_cos_sin(positions, inv_freq, dtype):
    """-> cos, sin: [T, 2 * len(inv_freq)], dtype"""
    angle = positions.float()[:, None] * inv_freq.float()  # fp32: positions reach 262,144
    angle = torch.cat([angle, angle], dim=-1)               # rotate-half: dims i and i + r/2
    return angle.cos().to(dtype), angle.sin().to(dtype)     # cast at the last step
# --8<-- [end:ch04_cos_sin]


# --8<-- [start:ch05_expand_kv]
def expand_kv(k, n_head):
    """[B, n_kv, T, hd] -> [B, n_head, T, hd]"""
    return k.repeat_interleave(n_head // k.shape[1], dim=1)
# --8<-- [end:ch05_expand_kv]


# --8<-- [start:ch05_split]
def split_query_gate(y, n_head, head_dim):
    """[B, T, nh * 2hd] (per head: query | gate) -> q [B, T, nh, hd], gate [B, T, nh * hd]"""
    B, T, _ = y.shape
    q, gate = y.view(B, T, n_head, 2 * head_dim).chunk(2, dim=-1)
    return q, gate.reshape(B, T, n_head * head_dim)
# --8<-- [end:ch05_split]


# --8<-- [start:ch05_causal_mask]
def causal_mask(T, S):
    """-> bool [T, S]"""
    # query i is token S - T + i of the whole sequence: it sees keys 0 .. S - T + i
    return torch.ones(T, S, dtype=torch.bool).tril(S - T)
# --8<-- [end:ch05_causal_mask]


# --8<-- [start:ch05_norm_rope]
def norm_rope(y, weight, positions, cfg):
    """[B, T, n * hd] -> [B, n, T, hd]: RMSNorm per head, then RoPE on the first dims"""
    B, T, _ = y.shape
    x = y.view(B, T, -1, cfg.head_dim).float()                 # one vector per head
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)
    x = (x * (1 + weight.float())).type_as(y)                   # chapter 3's norm: 1 + w
    # cos, sin: [T, hd * partial_rotary_factor], so apply_rope turns those dims only
    cos, sin = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)(positions)
    return apply_rope(x.transpose(1, 2), cos, sin)             # the norm first, then the turn
# --8<-- [end:ch05_norm_rope]


# --8<-- [start:ch06_delta_step]
def delta_step(S, k, v, alpha, beta):
    """S [dk, dv], k [dk], v [dv] -> S'"""
    S = alpha * S                                           # forget
    pred = S.T @ k                                          # what the memory returns for k
    u = beta * (v - pred)                                   # write only the error
    return S + torch.outer(k, u)
# --8<-- [end:ch06_delta_step]


# --8<-- [start:ch06_gates]
def gates(a, b, A_log, dt_bias):
    """-> g (fp32, <= 0), beta (0..1)"""
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    beta = b.sigmoid().float()                      # the sigmoid in the input's dtype, then fp32
    return g, beta
# --8<-- [end:ch06_gates]


# --8<-- [start:ch06_conv_step]
def conv_step(past, x, weight):
    """past [C, K-1], x [C, T], weight [C, K] -> y [C, T], new_past [C, K-1]"""
    window = torch.cat([past, x], dim=-1)                   # the kept inputs first: no padding
    y = F.conv1d(window[None], weight[:, None, :], groups=x.shape[0])[0]
    return y, window[:, -(weight.shape[1] - 1):].clone()    # inputs, not outputs: pre-conv
# --8<-- [end:ch06_conv_step]


# --8<-- [start:ch07_decay_matrix]
def decay_matrix(g):
    """Gamma[i, j] = exp(gamma_i - gamma_j) (j <= i), 0 (j > i); gamma = cumsum(g)"""
    gamma = g.cumsum(-1)
    diff = gamma[:, None] - gamma[None, :]
    causal = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return diff.masked_fill(~causal, -math.inf).exp()  # mask before exp: exp(-inf) = 0, no overflow
# --8<-- [end:ch07_decay_matrix]


# --8<-- [start:ch07_prefill_then_decode]
def prefill_then_decode(q, k, v, g, beta, cut):
    """[0, cut): chunk_gated_delta_rule; [cut, T): recurrent_gated_delta_rule, T = 1 per call"""
    o_first, S = chunk_gated_delta_rule(q[:, :, :cut], k[:, :, :cut], v[:, :, :cut],
                                        g[:, :, :cut], beta[:, :, :cut])
    outs = [o_first]
    for t in range(cut, q.shape[2]):
        o, S = recurrent_gated_delta_rule(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1],
                                          g[:, :, t:t + 1], beta[:, :, t:t + 1], S)
        outs.append(o)
    return torch.cat(outs, dim=2), S
# --8<-- [end:ch07_prefill_then_decode]


# --8<-- [start:ch08_swiglu]
def swiglu(x, W_gate, W_up, W_down):
    """down(silu(gate(x)) * up(x)), W: [out, in]"""
    return (F.silu(x @ W_gate.T) * (x @ W_up.T)) @ W_down.T
# --8<-- [end:ch08_swiglu]


# --8<-- [start:ch08_matching_width]
def matching_width(d, classic_width):
    """3·d·f = 2·d·c"""
    return 2 * classic_width / 3
# --8<-- [end:ch08_matching_width]


# --8<-- [start:ch09_decoder_layer]
def decoder_layer(x, norm1, mixer, norm2, mlp):
    """pre-norm: h = x + mixer(norm1(x)); h + mlp(norm2(h))"""
    h = x + mixer(norm1(x))
    return h + mlp(norm2(h))
# --8<-- [end:ch09_decoder_layer]


# --8<-- [start:ch09_logit_lens]
@torch.no_grad()
def logit_lens(model, ids):
    """-> [layers]"""
    cos, sin = model.rotary_emb(torch.arange(ids.shape[1]))
    x, logits = model.embed_tokens(ids), []
    for layer in model.layers:
        x = layer(x, cos, sin)
        # the final norm first, as at the exit
        logits.append(model.lm_head(model.norm(x[:, -1:]))[0, -1])
    logits = torch.stack(logits)                    # [layers, vocab]: the last row is the model's
    return torch.softmax(logits, dim=-1)[:, logits[-1].argmax()]
# --8<-- [end:ch09_logit_lens]


# --8<-- [start:ch10_stored_form]
def stored_form(text):
    """UTF-8 bytes -> bytes_to_unicode()"""
    table = bytes_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))
# --8<-- [end:ch10_stored_form]


# --8<-- [start:ch10_bpe]
def bpe(piece, ranks):
    """最低排名的相邻对先合并 / the lowest-ranked neighbouring pair merges first"""
    parts = [bytes([b]) for b in piece]
    while len(parts) > 1:
        pairs = [(ranks.get(a + b, math.inf), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        rank, i = min(pairs)                                # lowest rank; the leftmost on a tie
        if rank == math.inf:
            break
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts
# --8<-- [end:ch10_bpe]


# --8<-- [start:ch11_top_p]
def top_p_keep(probs, p):
    """probs: sorted, likeliest first -> bool mask"""
    return probs.cumsum(0) - probs < p
# --8<-- [end:ch11_top_p]


# --8<-- [start:ch11_cached_greedy]
@torch.no_grad()
def greedy(model, ids, n):
    """Cache: the prompt in one call, then one token per call"""
    cache = Cache(model.cfg)
    x, out = torch.tensor([ids]), []
    for _ in range(n):
        token = int(model(x, cache=cache, last_only=True)[0, -1].argmax())
        out.append(token)
        x = torch.tensor([[token]])                        # feed exactly the token just picked
    return out
# --8<-- [end:ch11_cached_greedy]


# --8<-- [start:ch11_repetition]
def repetition_penalty(logits, seen, r):
    """seen: token ids (repeats allowed) -> new logits"""
    logits = logits.clone()                                 # the caller's scores stay
    idx = torch.tensor(sorted(set(seen)), dtype=torch.long) # once per token
    s = logits[idx]
    logits[idx] = torch.where(s > 0, s / r, s * r)          # negative: multiply, or it gains
    return logits
# --8<-- [end:ch11_repetition]


# --8<-- [start:ch12_render]
def render(messages, thinking=False):
    """ChatML + <|im_start|>assistant\n (+ <think>\n\n</think>\n\n when thinking is off)"""
    text = ""
    for m in messages:
        content = strip_thinking(m["content"]) if m["role"] == "assistant" else m["content"]
        text += f"<|im_start|>{m['role']}\n{content}<|im_end|>\n"
    return (text + "<|im_start|>assistant\n"
            + ("<think>\n" if thinking else "<think>\n\n</think>\n\n"))
# --8<-- [end:ch12_render]


# --8<-- [start:ch12_reusable]
def reusable_prefix(read, prompt):
    """len(common prefix)"""
    n = 0
    for a, b in zip(read, prompt):
        if a != b:
            break
        n += 1
    return n
# --8<-- [end:ch12_reusable]


# --8<-- [start:ch12_printable]
def printable(pending):
    """bytes -> (text, rest)"""
    for n in range(4):                                      # a UTF-8 character is 1 to 4 bytes
        try:
            return pending[:len(pending) - n].decode("utf-8"), pending[len(pending) - n:]
        except UnicodeDecodeError:                          # cut inside the last character
            continue
    raise ValueError(f"not UTF-8: {pending[-4:]!r}")
# --8<-- [end:ch12_printable]


# --8<-- [start:ch12_plain]
def encode_plain(tokenizer, text):
    """a message's text -> ids, with no special token in them"""
    text = tokenizer.normalizer.normalize_str(text)
    # tokenizer.encode would first match the special tokens in the text: skip that step,
    # run the pre-tokenizer and the BPE model on every piece
    return [t.id for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text)
            for t in tokenizer.model.tokenize(piece)]
# --8<-- [end:ch12_plain]


# --8<-- [start:ch13_decode_ceiling]
def decode_ceiling(params, bytes_per_weight, gb_per_s, gflop_per_s, batch):
    """tokens/s = min(batch · bandwidth / bytes, peak / (2 · params))"""
    by_bytes = batch * gb_per_s * 1e9 / (params * bytes_per_weight)
    by_flops = gflop_per_s * 1e9 / (2 * params)
    return min(by_bytes, by_flops)
# --8<-- [end:ch13_decode_ceiling]


# --8<-- [start:ch13_ridge_batch]
def ridge_batch(bytes_per_weight, gb_per_s, gflop_per_s):
    """2 · B / bytes_per_weight = peak / bandwidth"""
    return gflop_per_s * bytes_per_weight / (2 * gb_per_s)
# --8<-- [end:ch13_ridge_batch]


# --8<-- [start:ch14_copies]
def copies():
    """w: contiguous bf16 [4, 6]; True = copies"""
    return {
        "w.to(torch.bfloat16)": False,      # already bf16: .to returns w itself
        "w.to(torch.float32)": True,        # another dtype: new bytes
        "w.T": False,                       # strides swapped, a view
        "w.T.contiguous()": True,           # the transposed order laid out anew
        "w.contiguous()": False,            # already contiguous: w itself
        "w.reshape(24)": False,             # contiguous: a view
        "w.T.reshape(24)": True,            # no strides walk w.T's rows over w's storage
        "w[1:3].reshape(12)": False,        # whole rows are contiguous: a view
        "w[:, :3].reshape(12)": True,       # half rows are not: a copy
    }
# --8<-- [end:ch14_copies]


# --8<-- [start:ch14_join]
def join(weights):
    """首尾相接时是视图，否则复制 / a view when back to back, else a copy"""
    ts = sorted(weights.items(), key=lambda kv: kv[1].data_ptr())
    names = [n for n, _ in ts]
    adjacent = all(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
                   and a.data_ptr() + a.nbytes == b.data_ptr()
                   for (_, a), (_, b) in zip(ts, ts[1:]))
    if adjacent:
        first = ts[0][1]
        rows = sum(t.shape[0] for _, t in ts)
        return first.as_strided((rows, first.shape[1]), (first.shape[1], 1)), names
    return torch.cat([t for _, t in ts]), names
# --8<-- [end:ch14_join]


# --8<-- [start:ch15_grown_capacity]
def grown_capacity(capacity, needed):
    """RoomyKVCache: max(needed, 2 · capacity)"""
    if needed <= capacity:
        return capacity
    return max(needed, 2 * capacity)
# --8<-- [end:ch15_grown_capacity]


# --8<-- [start:ch15_conv_state]
def conv_state(window, k):
    """window[..., -k:], in storage of its own"""
    return window[..., -k:].clone()
# --8<-- [end:ch15_conv_state]


# --8<-- [start:ch16_quantize]
def quantize(w):
    """scale = max|w_row| / 127"""
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale
# --8<-- [end:ch16_quantize]


# --8<-- [start:ch16_head_saving]
def head_saving(params, head, bytes_before, bytes_after):
    """saved bytes / bytes read before"""
    return head * (bytes_before - bytes_after) / (params * bytes_before)
# --8<-- [end:ch16_head_saving]


# --8<-- [start:ch16_round_activations]
def round_activations(x):
    """x ≈ step · (u - zero), u in 0..127 (7 bits, as fbgemm)"""
    lo, hi = x.min().clamp(max=0), x.max().clamp(min=0)
    step = ((hi - lo) / 127).clamp(min=1e-12)
    zero = torch.round(-lo / step)
    u = torch.round(x / step + zero).clamp(0, 127)
    return u, step, zero
# --8<-- [end:ch16_round_activations]


# ---------------------------------------------------------------------------- ch17
# --8<-- [start:ch17_masked_perplexity]
def masked_perplexity(nll, mask):
    """Position t predicts token t + 1: it is scored where token t + 1 is a target."""
    scored = mask[:, 1:]
    return torch.exp(nll[:, :-1][scored].mean())     # one mean over every scored token
# --8<-- [end:ch17_masked_perplexity]


# --8<-- [start:ch17_loss_ignore]
def loss(logits, targets):
    """-log softmax(logits)[target], averaged over the targets that are not -100."""
    keep = targets != -100
    z = logits[keep].double()                          # the ignored rows are dropped first
    nll = torch.logsumexp(z, dim=-1) - z.gather(-1, targets[keep][:, None])[:, 0]
    return nll.mean()                                  # divided by the scored targets only
# --8<-- [end:ch17_loss_ignore]


# ---------------------------------------------------------------------------- ch18
# --8<-- [start:ch18_rmsnorm_grad]
def weight_grad(x, w, dy):
    """y = n * (1 + w) with n = x / rms(x): dy/dw is n, summed over the rows."""
    n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (dy * n).sum(0)
# --8<-- [end:ch18_rmsnorm_grad]


# --8<-- [start:ch18_mlp_bytes]
def mlp_bytes(T, dim, hidden):
    """x (kept once for gate and up), gate's output (SiLU's input), silu(gate) and up (the
    product's factors), their product (down's input): fp32, 4 bytes each."""
    return 4 * T * (dim + 4 * hidden)
# --8<-- [end:ch18_mlp_bytes]


# --8<-- [start:ch18_accumulate]
def accumulate(model, loss_fn, micro_batches):
    """Gradients add up in p.grad: each micro-batch's mean loss, divided by how many there are."""
    for x in micro_batches:
        (loss_fn(model, x) / len(micro_batches)).backward()
# --8<-- [end:ch18_accumulate]


# ---------------------------------------------------------------------------- ch19
# --8<-- [start:ch19_solve_backward]
def solve_backward(M, U, dU):
    """U = M^{-1} X with M unit lower triangular: dX = M^{-T} dU, dM = -dX U^T strictly below."""
    dX = torch.linalg.solve_triangular(M.transpose(-1, -2), dU, upper=True)
    dM = -(dX @ U.transpose(-1, -2)).tril(-1)            # M's diagonal and upper part are fixed
    return dX, dM
# --8<-- [end:ch19_solve_backward]


# --8<-- [start:ch19_cumsum_backward]
def cumsum_backward(d_gamma):
    """gamma_i = sum of g_s for s <= i, so dg_s = sum of d_gamma_i for i >= s: a reverse cumsum."""
    return d_gamma.flip(-1).cumsum(-1).flip(-1)
# --8<-- [end:ch19_cumsum_backward]


# --8<-- [start:ch19_bytes_per_chunk]
def bytes_per_chunk(C, dk, dv, itemsize):
    """The chunk's inputs (q, k: C x dk, v: C x dv, g and beta: C) and the state entering it."""
    return itemsize * (C * (2 * dk + dv + 2) + dk * dv)
# --8<-- [end:ch19_bytes_per_chunk]


# ---------------------------------------------------------------------------- ch20
# --8<-- [start:ch20_answer_mask]
def answer_mask(ids, opening):
    """True from the first token after the assistant's opening (the answer, then <|im_end|>)."""
    n = len(opening)
    start = max(i + n for i in range(len(ids) - n + 1) if ids[i:i + n] == opening)
    return [i >= start for i in range(len(ids))]
# --8<-- [end:ch20_answer_mask]


# --8<-- [start:ch20_lora_params]
def lora_params(shapes, r):
    """A is [r, in] and B is [out, r]: r * (in + out) per projection; W stays frozen."""
    return sum(r * (n_in + n_out) for n_out, n_in in shapes)
# --8<-- [end:ch20_lora_params]


# --8<-- [start:ch20_merge]
def merge(W, A, B, alpha, r):
    """x @ W.T + (alpha / r) x @ A.T @ B.T = x @ (W + (alpha / r) B @ A).T."""
    return W + (alpha / r) * B @ A
# --8<-- [end:ch20_merge]



# ---------------------------------------------------------------------------- ch21
# --8<-- [start:ch21_lr_at]
def lr_at(step, total, peak, warmup, floor=0.1):
    """A straight rise over `warmup` steps, then half a cosine from peak to floor * peak."""
    if step < warmup:
        return peak * (step + 1) / warmup                  # step 0 already takes a step
    done = (step - warmup) / max(1, total - 1 - warmup)    # 0 after the warm-up, 1 at the last step
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * done)))
# --8<-- [end:ch21_lr_at]


# --8<-- [start:ch21_bigram_perplexity]
def bigram_perplexity(train, test, vocab, k):
    """Add-k counts from train; exp of the mean -log p(b | a) over test's pairs."""
    counts = [[0] * vocab for _ in range(vocab)]
    for a, b in zip(train, train[1:]):
        counts[a][b] += 1
    nll = [-math.log((counts[a][b] + k) / (sum(counts[a]) + k * vocab))
           for a, b in zip(test, test[1:])]
    return math.exp(sum(nll) / len(nll))
# --8<-- [end:ch21_bigram_perplexity]


# --8<-- [start:ch21_param_count]
def param_count(cfg):
    """Every tensor's shape multiplied out (chapter 9's budget), the head once if tied."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    keys = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    values = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    heads = cfg.linear_num_value_heads
    attention = 2 * d * q + 2 * d * kv + q * d + 2 * cfg.head_dim       # q (+ gate), k, v, o, norms
    deltanet = (d * (2 * keys + values) + d * values + 2 * d * heads     # qkv, z, b, a
                + (2 * keys + values) * cfg.linear_conv_kernel_dim       # conv kernels
                + 2 * heads + cfg.linear_value_head_dim + values * d)    # A_log, dt_bias, norm, out
    n_full = cfg.layer_types.count("full_attention")
    layers = n_full * attention + (cfg.num_hidden_layers - n_full) * deltanet
    layers += cfg.num_hidden_layers * (3 * d * f + 2 * d)                # MLP, two norms
    head = 0 if cfg.tie_word_embeddings else cfg.vocab_size * d
    return cfg.vocab_size * d + layers + d + head                        # + final norm
# --8<-- [end:ch21_param_count]
