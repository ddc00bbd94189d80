"""Training the model you wrote: the next-token loss and perplexity (chapter 17); a training mode,
with activation checkpointing and a count of the activations kept for the backward (chapter 18)."""
# --8<-- [start:imports]
import math

import torch
from torch.utils.checkpoint import checkpoint

from qwen.model import DecoderLayer

IGNORE = -100  # a target that is not scored (transformers and torch use the same value)
# --8<-- [end:imports]


# --8<-- [start:cross_entropy]
def cross_entropy(logits, targets, ignore_index=IGNORE):
    """Mean of -log softmax(logits)[target] over the targets that are not ignore_index.
    logits [N, vocab], targets [N] (int64)."""
    check_targets(logits, targets, ignore_index)
    if logits.dtype != torch.float64:
        logits = logits.float()                           # bf16 logits: sum e^z in fp32
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)                  # any valid row: its loss is dropped below
    picked = logits.gather(-1, safe[:, None])[:, 0]       # the logit of the right token [N]
    nll = torch.logsumexp(logits, dim=-1) - picked        # -log p(target) = log sum e^z - z_target
    return torch.where(keep, nll, 0.0).sum() / keep.sum()
# --8<-- [end:cross_entropy]


# --8<-- [start:next_token]
def next_token_targets(ids, mask=None, ignore_index=IGNORE):
    """What each position should predict: targets[:, t] = ids[:, t + 1]. The last position has no
    next token; where mask [B, T] is False the token is not a target (a prompt, padding)."""
    targets = ids.new_full(ids.shape, ignore_index)
    targets[:, :-1] = ids[:, 1:]
    if mask is not None:
        if mask.shape != ids.shape or mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor shaped like ids {tuple(ids.shape)}, "
                             f"not {mask.dtype} {tuple(mask.shape)}")
        targets[:, :-1] = targets[:, :-1].masked_fill(~mask[:, 1:], ignore_index)
    return targets


def next_token_loss(logits, ids, mask=None):
    """The language-model loss: logits [B, T, vocab] at each position scored against the token
    that follows it in ids [B, T]; mask as in next_token_targets."""
    if logits.shape[:2] != ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match ids {tuple(ids.shape)}: "
                         "score the logits of the same ids, all positions (last_only=False)")
    return cross_entropy(logits.flatten(0, 1), next_token_targets(ids, mask).flatten())
# --8<-- [end:next_token]


# --8<-- [start:perplexity]
@torch.no_grad()
def perplexity(model, ids, window=512):
    """exp(mean next-token loss) over a long text ids [N], read in windows of `window` tokens that
    overlap by one, so every token after the first is predicted once, from at most `window` before.
    Returns (perplexity, tokens scored)."""
    ids = torch.as_tensor(ids)
    if ids.ndim != 1 or len(ids) < 2:
        raise ValueError(f"perplexity needs one text of at least 2 token ids, shape [N]; "
                         f"got shape {tuple(ids.shape)}")
    if window < 1:
        raise ValueError(f"window must be at least 1 token, not {window}")
    total, n = 0.0, 0
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start:start + window + 1][None]      # [1, <= window + 1]
        logits = model(chunk[:, :-1])
        m = chunk.shape[1] - 1
        total += cross_entropy(logits[0], chunk[0, 1:]).item() * m
        n += m
    return math.exp(total / n), n
# --8<-- [end:perplexity]


def check_targets(logits, targets, ignore_index):
    """Clear errors for the mistakes a loss would otherwise hide or crash on."""
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy takes logits [N, vocab] and targets [N]; got "
                         f"{tuple(logits.shape)} and {tuple(targets.shape)} "
                         "(flatten batch and time first: logits.flatten(0, 1), targets.flatten())")
    if targets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"targets must be token ids (int64), not {targets.dtype}")
    keep = targets != ignore_index
    if not keep.any():
        raise ValueError(f"no target to score: every target is ignore_index ({ignore_index}); "
                         "a mask that hides every answer token gives this")
    bad = keep & ((targets < 0) | (targets >= logits.shape[-1]))
    if bad.any():
        raise ValueError(f"target id {targets[bad][0].item()} is outside the vocabulary "
                         f"(0 .. {logits.shape[-1] - 1}); ignored targets must be {ignore_index}")


# --8<-- [start:checkpointed]
class CheckpointedLayer(DecoderLayer):
    """A decoder layer that keeps only its input for the backward and runs its forward again
    there: the activations inside it are never stored at once for every layer."""

    def forward(self, x, cos, sin, cache=None):
        if cache is not None or not (self.training and torch.is_grad_enabled()):
            return super().forward(x, cos, sin, cache)
        return checkpoint(super().forward, x, cos, sin, use_reentrant=False)
# --8<-- [end:checkpointed]


# --8<-- [start:chunked_loss]
def chunked_cross_entropy(h, head, targets, chunk=1024, ignore_index=IGNORE):
    """cross_entropy(head(h), targets) for h [N, dim], made `chunk` rows at a time and made again
    in the backward: the [N, vocab] logits are never kept whole, only h is."""
    n = (targets != ignore_index).sum()
    total = 0.0
    for a in range(0, len(h), chunk):
        t = targets[a:a + chunk]
        m = (t != ignore_index).sum()
        if m > 0:                                       # a chunk of ignored targets adds nothing
            total = total + checkpoint(lambda x, t=t: cross_entropy(head(x), t, ignore_index),
                                       h[a:a + chunk], use_reentrant=False) * m
    if n == 0:
        raise ValueError(f"no target to score: every target is ignore_index ({ignore_index})")
    return total / n
# --8<-- [end:chunked_loss]


def frozen_kind(m):
    """The quantized or packed class a module was made as (Int8Linear, W8A8Linear, Int4Linear,
    PackedLinear), whatever subclass a later step, measured on this machine, made of it."""
    return next(c.__name__ for c in type(m).__mro__
                if c.__module__ == "qwen.quant" or "inference_only" in vars(c))


# --8<-- [start:trainable]
def trainable(model, checkpointing=False):
    """The model, ready to be trained: every parameter takes a gradient, and train() mode (which
    changes nothing else: Qwen3.5 has no dropout). checkpointing: every decoder layer recomputes
    its activations in the backward (CheckpointedLayer)."""
    from qwen.fast import swap  # the module swap of chapters 14-16

    frozen = [f"{name} ({frozen_kind(m)})" for name, m in model.named_modules()
              if getattr(m, "inference_only", False)]
    if frozen:
        raise ValueError(f"{len(frozen)} modules have no backward, e.g. {frozen[0]}: a "
                         "quantized or packed model cannot be trained; load it with "
                         "qwen.model.from_pretrained (or qwen.fast.from_pretrained without "
                         "quantize and 'packed weights')")
    integer = [n for n, p in model.named_parameters() if not p.is_floating_point()]
    if integer:
        raise ValueError(f"parameter {integer[0]} is not floating point: it cannot take a gradient")
    model.requires_grad_(True).train()
    for layer in model.layers:
        if checkpointing:
            swap(layer, CheckpointedLayer)
    return model
# --8<-- [end:trainable]


# --8<-- [start:saved_bytes]
class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Inside it, count the bytes autograd keeps for the backward, each storage once and the
    model's own weights not at all: the activation memory of a forward pass, the same number on
    every machine."""

    def __init__(self, model=None):
        weights = [] if model is None else [*model.parameters(), *model.buffers()]
        self.seen = {t.untyped_storage().data_ptr() for t in weights}
        self.bytes, self.held = 0, []
        super().__init__(self.pack, lambda t: t)

    def __enter__(self):
        super().__enter__()
        return self

    def __exit__(self, *exc):
        self.held.clear()
        return super().__exit__(*exc)

    def pack(self, t):
        s = t.untyped_storage()
        if s.data_ptr() not in self.seen:
            self.seen.add(s.data_ptr())
            self.bytes += s.nbytes()
            self.held.append(s)  # alive until the end: no later storage reuses its address
        return t.detach()  # t itself would tie an output to its own grad_fn: a cycle never freed
# --8<-- [end:saved_bytes]
