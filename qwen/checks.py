"""The library's checks of what a caller passes in: one place, so the clear and the fast model say
the same thing about the same bad value. Each failure is a ValueError that names the argument,
the value, and what it may be."""
import math
import numbers

import torch


def whole(x):
    """An int (numpy's too), not a bool: True would quietly mean 1."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def real(x):
    """A finite int or float, not a bool: NaN and inf pass every `<` test the wrong way."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def require(ok, name, value, rule):
    if not ok:
        raise ValueError(f"{name}={value!r}: must be {rule}")


def check_draw(temperature, top_k, top_p):
    """Refuse a way to draw a token that would fail in torch.multinomial, or mean another."""
    require(real(temperature) and temperature >= 0, "temperature", temperature,
            "a finite number >= 0 (0 is greedy)")
    require(whole(top_k) and top_k >= 0, "top_k", top_k,
            "a whole number >= 0 (0 keeps every token)")
    require(real(top_p) and 0 < top_p <= 1, "top_p", top_p,
            "a number in (0, 1] (1 keeps every token)")


def check_sampling(max_new_tokens, temperature, top_k, top_p, presence_penalty,
                   repetition_penalty, seed):
    """Refuse a setting that would fail later with a cryptic error, or quietly mean another."""
    require(whole(max_new_tokens) and max_new_tokens >= 0, "max_new_tokens", max_new_tokens,
            "a whole number >= 0")
    check_draw(temperature, top_k, top_p)
    require(real(presence_penalty), "presence_penalty", presence_penalty,
            "a finite number (0 turns it off)")
    require(real(repetition_penalty) and repetition_penalty > 0, "repetition_penalty",
            repetition_penalty, "a finite number > 0 (1 turns it off)")
    # torch takes seeds in [0, 2**64); it would wrap a negative one onto another seed
    require(seed is None or whole(seed) and 0 <= seed < 2**64, "seed", seed,
            "None or a whole number in [0, 2**64)")


def token_ids(ids, vocab_size, name="ids"):
    """`ids` (a list or a 1-D integer tensor) as a list of ints, each a token of the vocabulary:
    a negative id would index from the end of the table, a float one would be truncated."""
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{name} is text ({ids[:20]!r}): give token ids, "
                         "such as tokenizer.encode(text).ids")
    if torch.is_tensor(ids):
        require(ids.dim() == 1 and not ids.is_floating_point(), name, ids,
                "a list or a 1-D integer tensor of token ids")
        ids = ids.tolist()
    try:
        ids = list(ids)
    except TypeError:
        raise ValueError(f"{name}={ids!r}: must be a list of token ids") from None
    for i, t in enumerate(ids):
        if not (whole(t) and 0 <= t < vocab_size):
            raise ValueError(f"{name}[{i}] is {t!r}: a token id is a whole number from 0 to "
                             f"{vocab_size - 1} (the vocabulary); take ids from the tokenizer")
    return [int(t) for t in ids]


def check_id_tensor(ids, vocab_size):
    """The model's input, ids [B, T]: integers from the vocabulary. A negative id would quietly read
    the table from its end, one past it would fail deep inside the embedding."""
    if not (torch.is_tensor(ids) and ids.dim() == 2 and not ids.is_floating_point()
            and not ids.is_complex() and ids.dtype != torch.bool):
        raise ValueError(f"ids: must be an integer tensor [batch, tokens], not {ids!r:.80}")
    if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)][0].item()
        raise ValueError(f"ids holds {bad}: a token id is a whole number from 0 to "
                         f"{vocab_size - 1} (the vocabulary); take ids from the tokenizer")


def check_prompt(ids, cfg):
    """A prompt the model can read: at least one token, fewer than its max_position_embeddings."""
    ids = token_ids(ids, cfg.vocab_size)
    if not ids:
        raise ValueError("ids is empty: the model needs at least one prompt token to continue")
    if len(ids) >= cfg.max_position_embeddings:
        raise ValueError(f"the prompt is {len(ids)} tokens; the model reads at most "
                         f"{cfg.max_position_embeddings} (max_position_embeddings), answer "
                         "included: shorten the prompt")
    return ids
