"""Generation: read the prompt once into a cache, then pick one token at a time and feed it back."""
# --8<-- [start:imports]
import torch

from qwen.checks import check_draw, check_prompt, check_sampling

STOP_IDS = (248046, 248044)     # <|im_end|> ends a chat turn, <|endoftext|> ends a document
# --8<-- [end:imports]


# --8<-- [start:penalize]
def penalize(logits, seen, generated, repetition_penalty=1.0, presence_penalty=0.0):
    """Discourage repeats: divide the positive logits (multiply the negative ones) of every seen
    token by repetition_penalty (prompt included, as in transformers); subtract presence_penalty
    from every generated one."""
    logits = logits.clone()
    if repetition_penalty != 1.0 and seen:
        idx = torch.tensor(sorted(set(seen)), device=logits.device)
        s = logits[idx]
        logits[idx] = torch.where(s > 0, s / repetition_penalty, s * repetition_penalty)
    if presence_penalty != 0.0 and generated:
        idx = torch.tensor(sorted(set(generated)), device=logits.device)
        logits[idx] -= presence_penalty                 # once per token, however often it appeared
    return logits
# --8<-- [end:penalize]


# --8<-- [start:sample]
def candidates(logits, top_k=0, top_p=1.0):
    """The tokens a draw may pick, likeliest first, with their probabilities: the top_k likeliest
    (0: all), then the fewest of those whose probabilities add up to top_p (the token that crosses
    top_p stays)."""
    if top_k > 0:
        logits, ids = torch.topk(logits, min(top_k, logits.numel()))    # sorted, likeliest first
    else:
        logits, ids = torch.sort(logits, descending=True)
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        keep = probs.cumsum(0) - probs < top_p          # the likelier tokens fall short of top_p
        probs, ids = probs[keep] / probs[keep].sum(), ids[keep]
    return probs, ids


def sample(logits, temperature=0.0, top_k=0, top_p=1.0, generator=None):
    """One token id from logits [vocab]: argmax at temperature 0, else a draw among candidates."""
    check_draw(temperature, top_k, top_p)
    if temperature == 0:
        return int(logits.argmax())
    # drawn on the CPU: a seed gives the same draws on any device
    logits = logits.float().cpu() / temperature
    probs, ids = candidates(logits, top_k, top_p)
    return int(ids[torch.multinomial(probs, 1, generator=generator)])
# --8<-- [end:sample]


# --8<-- [start:generate]
@torch.no_grad()
def generate(model, ids, max_new_tokens, temperature=0.0, top_k=0, top_p=1.0, presence_penalty=0.0,
             repetition_penalty=1.0, stop_ids=STOP_IDS, seed=None):
    """Yield up to max_new_tokens new token ids after the prompt `ids`;
    a stop id ends it and is not yielded. A bad argument is a ValueError that names it."""
    # bad arguments are refused here, before the prefill, in the same words for every model
    check_sampling(max_new_tokens, temperature, top_k, top_p, presence_penalty,
                   repetition_penalty, seed)
    ids = check_prompt(ids, model.cfg)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    device = model.embed_tokens.weight.device
    cache = model.new_cache(max_tokens=len(ids) + max_new_tokens)     # empty, room for all
    seen, generated = list(ids), []
    x = torch.tensor([seen], device=device)         # [1, T]: the whole prompt in one call (prefill)
    # the answer stops where the model's positions end
    for _ in range(min(max_new_tokens, model.cfg.max_position_embeddings - len(ids))):
        # next token's scores; the cache now holds x
        logits = model(x, cache=cache, last_only=True)[0, -1]
        if not torch.isfinite(logits).all():        # one cheap test per token, on every path
            raise ValueError(f"the model's scores for new token {len(generated) + 1} are NaN or "
                             "inf: its weights are damaged (qwen.weights.load_weights checks each "
                             "tensor) or overflow its dtype (try torch.float32)")
        logits = penalize(logits, seen, generated, repetition_penalty, presence_penalty)
        token = sample(logits, temperature, top_k, top_p, generator)
        if token in stop_ids:
            return
        yield token
        seen.append(token)
        generated.append(token)
        x = torch.tensor([[token]], device=device)  # [1, 1]: then one token per call (decode)
# --8<-- [end:generate]


# --8<-- [start:stream]
class TextStream:
    """Token ids in, text out once it is whole: a character split over two tokens waits for both."""

    def __init__(self, tokenizer):
        self.tokenizer, self.pending = tokenizer, []

    def push(self, token):
        """The new text that `token` completes ("" while a character is still cut in two)."""
        self.pending.append(token)
        text = self.tokenizer.decode(self.pending)
        if text.endswith("\ufffd"):                     # U+FFFD: the bytes so far end mid-character
            return ""
        self.pending = []
        return text

    def flush(self):
        """What is held back, at the end (bytes that never became a character print as U+FFFD)."""
        text, self.pending = self.tokenizer.decode(self.pending), []
        return text
# --8<-- [end:stream]
