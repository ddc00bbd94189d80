"""Qwen3.5's multi-token-prediction head: from the model's hidden state at position i and the
embedding of token i + 1, a guess at token i + 2; the model checks the guess in the step it makes
anyway, so one read of the weights can yield two tokens."""
# --8<-- [start:imports]
import torch
import torch.nn as nn
from safetensors import safe_open

from qwen.cache import DeltaNetCache, KVCache
from qwen.deltanet import GatedDeltaNet, recurrent_gated_delta_rule
from qwen.generate import STOP_IDS
from qwen.model import DecoderLayer
from qwen.norm import RMSNorm
from qwen.weights import CheckpointError, Config, check_finite, load, weight_files

# --8<-- [end:imports]


# --8<-- [start:mtp]
class MTP(nn.Module):
    """mtp.*: norm the hidden state and the next token's embedding, join them with fc, one
    full-attention decoder layer (with a KV cache of its own), a final norm; the model's own
    embedding table and head are shared (mtp_use_dedicated_embeddings is false)."""

    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.pre_fc_norm_embedding = RMSNorm(d, eps)
        self.pre_fc_norm_hidden = RMSNorm(d, eps)
        self.fc = nn.Linear(2 * d, d, bias=False)       # [embedding | hidden] -> d: this order
        self.layers = nn.ModuleList([DecoderLayer(cfg, "full_attention")])
        self.norm = RMSNorm(d, eps)

    def forward(self, hidden, next_embeds, cos, sin, cache=None):
        """hidden [B, T, d]: the model's final-norm output at positions i; next_embeds: the
        embeddings of tokens i + 1. Returns [B, T, d] for the shared head: guesses at i + 2."""
        x = torch.cat([self.pre_fc_norm_embedding(next_embeds),
                       self.pre_fc_norm_hidden(hidden)], dim=-1)
        x = self.layers[0](self.fc(x), cos, sin, cache)
        return self.norm(x)
# --8<-- [end:mtp]


# --8<-- [start:load]
PREFIX = "mtp."


def load_mtp_weights(path, dtype=None):
    """Every `mtp.*` tensor of a checkpoint, by its full name, with the text loader's checks
    (files, index, dtypes, NaN)."""
    W = {}
    for file in weight_files(path):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                if name.startswith(PREFIX):
                    t = f.get_tensor(name)
                    check_finite(t, name, file)
                    W[name] = t if dtype is None else t.to(dtype)
    if not W:
        raise CheckpointError(f"{path} holds no {PREFIX}* tensors: this checkpoint has no "
                              "multi-token-prediction head (the official Qwen/Qwen3.5-0.8B has)")
    return W


def mtp_from_pretrained(path, dtype=torch.float32, device="cpu"):
    """The MTP head of the checkpoint folder `path`; missing, extra or misshapen tensors are
    errors, as for the text model."""
    cfg = Config.load(path)
    head = load(MTP(cfg), load_mtp_weights(path, dtype), PREFIX)
    return head.requires_grad_(False).to(device)
# --8<-- [end:load]


# --8<-- [start:rollback]
class Rollback:
    """Mixed into a model's DeltaNet layers: while `keeping`, a step of several tokens keeps the
    state after each token, so that a rejected guess can be undone. Attention rolls back by
    forgetting the last keys; DeltaNet's state has every token folded in, so it needs this."""

    keeping = False

    def forward(self, x, cache=None):
        if self.keeping:
            self.conv_before = cache.conv.clone()           # the window before the step
        out = super().forward(x, cache)
        if self.keeping:
            T, K = x.shape[1], self.conv_kernel - 1
            if T > K:
                raise ValueError(f"a verify step of {T} tokens: at most {K} (the conv window) "
                                 "can be rolled back")
            # every input of the step, after the window: the window after n tokens is a slice
            self.conv_seen = torch.cat([self.conv_before, cache.conv[..., K - T:]], dim=-1)
        return out

    def delta_rule(self, q, k, v, g, beta, state):
        if not self.keeping:
            return super().delta_rule(q, k, v, g, beta, state)
        outs, self.states = [], []
        for t in range(q.shape[2]):                         # token by token: each state kept
            o, state = recurrent_gated_delta_rule(*(x[:, :, t:t + 1] for x in (q, k, v, g, beta)),
                                                  state)
            outs.append(o)
            self.states.append(state)
        return torch.cat(outs, dim=2), state

    def keep_first(self, n, cache):
        """Make `cache` hold the step's first n tokens only."""
        cache.state = self.states[n - 1]
        cache.conv = self.conv_seen[..., n:n + self.conv_kernel - 1].clone()


def with_rollback(model):
    """Give every DeltaNet layer of `model` the Rollback mixin (in place); return the layers."""
    layers = []
    for m in model.modules():
        if isinstance(m, GatedDeltaNet):
            if not isinstance(m, Rollback):
                m.__class__ = type(f"Rollback{type(m).__name__}", (Rollback, type(m)), {})
            layers.append(m)
    return layers


def keep_tokens(model, cache, n_before, n_kept):
    """After a verify step that started at n_before tokens, keep n_kept of its tokens."""
    layers = iter(m for m in model.modules() if isinstance(m, Rollback))
    for c in cache.layers:
        if isinstance(c, KVCache):
            c.k, c.v = c.k[:, :, :n_before + n_kept], c.v[:, :, :n_before + n_kept]
        elif isinstance(c, DeltaNetCache):
            next(layers).keep_first(n_kept, c)
    cache.seq_len = n_before + n_kept
# --8<-- [end:rollback]


# --8<-- [start:hidden]
def forward_hidden(model, ids, cache):
    """(logits, final-norm hidden states) of one call: the hidden states are what the MTP head
    reads, caught on their way into the head."""
    caught = []
    hook = model.norm.register_forward_hook(lambda m, args, out: caught.append(out))
    try:
        logits = model(ids, cache)
    finally:
        hook.remove()
    return logits, caught[0]
# --8<-- [end:hidden]


# --8<-- [start:speculate]
class Speculation:
    """Counts of one speculative run: guesses made and accepted, calls of the model."""

    def __init__(self):
        self.drafted = self.accepted = self.steps = 0

    @property
    def acceptance(self):
        return self.accepted / max(self.drafted, 1)


def mtp_guess(model, mtp, hidden, next_ids, positions, cache):
    """The MTP rows for `positions` (hidden states there, the tokens after them) added to its
    cache; the guess of its last row: the token two places after the last position."""
    cos, sin = model.rotary_emb(positions)
    out = mtp(hidden, model.embed_tokens(next_ids), cos, sin, cache)
    return int(model.lm_head(out[:, -1:]).argmax(-1))


@torch.no_grad()
def speculative_greedy(model, mtp, ids, max_new_tokens, stop_ids=STOP_IDS, stats=None):
    """Yield the same tokens as greedy decoding (qwen.generate.generate at temperature 0), with
    the MTP head guessing one token ahead and the model checking the guess in its next call:
    [last token, guess] at once, two tokens out when the guess was right."""
    stats = stats if stats is not None else Speculation()
    layers = with_rollback(model)
    device = model.embed_tokens.weight.device
    cfg = model.cfg
    cache = model.new_cache(max_tokens=len(ids) + max_new_tokens + 2)
    mcache = KVCache(1, cfg.num_key_value_heads, cfg.head_dim)   # the MTP layer's own
    tokens, rows = list(ids), 0      # MTP row i reads hidden state i and token i + 1
    logits, h = forward_hidden(model, torch.tensor([tokens], device=device), cache)
    h_first, new, done = 0, int(logits[0, -1].argmax()), 0       # h: positions h_first, ...
    stats.steps += 1
    while new not in stop_ids and done < max_new_tokens:
        tokens.append(new)
        done += 1
        yield new
        if done == max_new_tokens:
            return
        # every row the known tokens allow, then the guess at the token after `new`
        last = len(tokens) - 2
        draft = mtp_guess(model, mtp, h[:, rows - h_first:last - h_first + 1],
                          torch.tensor([tokens[rows + 1:last + 2]], device=device),
                          torch.arange(rows, last + 1, device=device), mcache)
        rows = last + 1
        stats.drafted += 1
        start = len(tokens) - 1                               # the cache holds tokens[:start]
        for layer in layers:
            layer.keeping = True
        try:
            logits, h = forward_hidden(model, torch.tensor([[new, draft]], device=device), cache)
        finally:
            for layer in layers:
                layer.keeping = False
        stats.steps += 1
        h_first, new = start, int(logits[0, 0].argmax())      # the model's own next token
        if new != draft:                                      # a wrong guess: forget it
            keep_tokens(model, cache, start, 1)
            h = h[:, :1]
            continue
        stats.accepted += 1
        if draft in stop_ids:
            return
        tokens.append(draft)
        done += 1
        yield draft
        new = int(logits[0, 1].argmax())                      # and the one after, for free
# --8<-- [end:speculate]


# --8<-- [start:sampling]
def accept_or_resample(p, q, draft, generator=None):
    """Speculative sampling's rule (Leviathan et al.; Chen et al.): keep the draft, drawn from q,
    with probability min(1, p/q); else draw from max(p - q, 0), renormalized. The token that
    comes out is distributed exactly as p. Returns (token, kept)."""
    u = torch.rand((), generator=generator, device=p.device)
    if u * q[draft] <= p[draft]:
        return draft, True
    rest = (p - q).clamp(min=0)
    return int(torch.multinomial(rest / rest.sum(), 1, generator=generator)), False
# --8<-- [end:sampling]


# --8<-- [start:train]
def new_mtp(cfg, seed=0):
    """A head to train for a model of config `cfg`, from chapter 21's first values: matrices
    normal with std 0.02, every 1 + w norm at scale 1."""
    from qwen.pretrain import init_weights

    mtp = init_weights(MTP(cfg), seed)
    with torch.no_grad():
        for m in mtp.modules():
            if isinstance(m, RMSNorm):
                m.weight.zero_()
    return mtp.train()


def mtp_logits(model, mtp, ids):
    """The head's guesses on windows ids [B, T]: MTP row i reads the model's hidden state at i and
    the embedding of token i + 1, and guesses token i + 2 (T - 2 rows). The model, its embedding
    table and its head are frozen: only the MTP head takes a gradient."""
    with torch.no_grad():
        _, h = forward_hidden(model, ids, None)
        e = model.embed_tokens(ids[:, 1:-1])
    cos, sin = model.rotary_emb(torch.arange(ids.shape[1] - 2, device=ids.device))
    return model.lm_head(mtp(h[:, :-2], e, cos, sin))


def mtp_loss(model, mtp, ids, logits=None):
    """The next-next-token loss: the guesses' cross-entropy against tokens i + 2."""
    logits = mtp_logits(model, mtp, ids) if logits is None else logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids[:, 2:].flatten())


def train_mtp(model, mtp, train, steps, batch=16, length=128, lr=3e-3, seed=0):
    """Chapter 21's loop for the head alone (AdamW, warm-up and cosine decay, clipping at 1) on
    windows of the token ids `train`; the model does not change. Returns the losses."""
    from qwen.optim import lr_at
    from qwen.pretrain import Batches, Optimizer, clip_grad_norm

    model.requires_grad_(False).eval()
    batches, opt = Batches(train, batch, length, seed), Optimizer(mtp, lr)
    losses = []
    for step in range(steps):
        ids = batches.next()
        opt.set_lr(lr_at(step, steps, lr, max(1, steps // 20), 0.1))
        loss = mtp_loss(model, mtp, ids)
        loss.backward()
        clip_grad_norm(opt.params, 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def mtp_accuracy(model, mtp, windows):
    """(loss, share of rows whose top guess is the text's token i + 2) over windows [n, T]."""
    was = mtp.training
    mtp.eval()
    guess = mtp_logits(model, mtp, windows)                # one forward for both numbers
    mtp.train(was)
    loss = mtp_loss(model, mtp, windows, guess).item()
    return loss, (guess.argmax(-1) == windows[:, 2:]).float().mean().item()
# --8<-- [end:train]
