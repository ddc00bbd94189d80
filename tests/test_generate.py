"""Generation: greedy decoding equals transformers' generate, sampling is seeded and truncated as
specified, and the text stream never shows half a character."""

import random

import pytest
import torch
from reference import our_model, reference_model
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from qwen.generate import TextStream, candidates, generate, penalize, sample

PROMPTS = [[1, 2, 3], [7] * 9, list(range(100, 140))]


@pytest.fixture(scope="module")
def models():
    ref = reference_model(seed=1)
    return ref, our_model(ref)


def test_greedy_equals_transformers_generate(models):
    ref, ours = models
    for prompt in PROMPTS:
        theirs = ref.generate(
            torch.tensor([prompt]), max_new_tokens=32, do_sample=False, pad_token_id=0
        )
        assert list(generate(ours, prompt, 32, stop_ids=())) == theirs[0, len(prompt) :].tolist()


def test_a_stop_id_ends_generation_and_is_not_yielded(models):
    _, ours = models
    free = list(generate(ours, PROMPTS[0], 12, stop_ids=()))
    stop = free[5]
    first = free.index(stop)
    assert list(generate(ours, PROMPTS[0], 12, stop_ids=(stop,))) == free[:first]


def test_seeded_sampling_is_reproducible(models):
    _, ours = models
    kw = dict(temperature=1.0, top_k=50, top_p=0.9, seed=123, stop_ids=())
    a = list(generate(ours, PROMPTS[1], 20, **kw))
    assert a == list(generate(ours, PROMPTS[1], 20, **kw))
    assert a != list(generate(ours, PROMPTS[1], 20, **{**kw, "seed": 124}))
    assert a != list(generate(ours, PROMPTS[1], 20, stop_ids=()))  # not simply greedy


def test_temperature_zero_is_argmax_and_top_k_1_is_argmax_at_any_temperature():
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    best = int(logits.argmax())
    assert sample(logits) == best
    gen = torch.Generator().manual_seed(0)
    assert {sample(logits, temperature=5.0, top_k=1, generator=gen) for _ in range(50)} == {best}


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (40, 1.0), (0, 0.5), (0, 0.9), (20, 0.8)])
def test_truncation_keeps_the_same_tokens_as_transformers(top_k, top_p):
    logits = (
        torch.randn(2000, generator=torch.Generator().manual_seed(top_k + int(100 * top_p))) * 3
    )
    theirs = logits[None]
    if top_k:
        theirs = TopKLogitsWarper(top_k)(None, theirs)
    if top_p < 1:
        theirs = TopPLogitsWarper(top_p)(None, theirs)
    probs, ids = candidates(logits, top_k, top_p)
    assert sorted(ids.tolist()) == theirs[0].isfinite().nonzero()[:, 0].tolist()
    # renormalised over the kept tokens
    assert torch.allclose(probs, torch.softmax(theirs[0], 0)[ids])
    assert (probs[:-1] >= probs[1:]).all()  # likeliest first


def test_draws_follow_the_softmax_of_logits_over_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    gen = torch.Generator().manual_seed(0)
    for temperature in (0.5, 1.0, 2.0):
        draws = torch.tensor([sample(logits, temperature, generator=gen) for _ in range(4000)])
        freq = torch.bincount(draws, minlength=4) / 4000
        assert torch.allclose(freq, torch.softmax(logits / temperature, 0), atol=0.03), (
            temperature,
            freq,
        )


def test_repetition_penalty_equals_transformers():
    logits = torch.randn(100, generator=torch.Generator().manual_seed(0))
    seen = [3, 5, 5, 17, 42, 99]
    theirs = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([seen]), logits[None].clone())[0]
    assert torch.allclose(penalize(logits, seen, [], repetition_penalty=1.3), theirs)


def test_presence_penalty_subtracts_once_from_each_generated_token_only():
    logits = torch.zeros(10)
    out = penalize(logits, seen=[1, 2, 2, 2, 3], generated=[2, 2, 2, 3], presence_penalty=1.5)
    assert out.tolist() == [0, 0, -1.5, -1.5, 0, 0, 0, 0, 0, 0]  # prompt-only token 1 is untouched
    assert logits.tolist() == [0] * 10  # the input is not modified


def stream(tokenizer, ids):
    s = TextStream(tokenizer)
    return [s.push(i) for i in ids] + [s.flush()]


def test_stream_of_multibyte_text_prints_whole_characters_only(tokenizer):
    text = "你好，世界！😀👍🏽 naïve café ﷽ 𝕏 و السلام"
    ids = tokenizer.encode(text).ids
    pieces = stream(tokenizer, ids)
    assert len(ids) > len(text.split())  # some characters are split across tokens (the emoji)
    assert "".join(pieces) == tokenizer.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)


def test_stream_concatenation_equals_the_final_decode_for_any_ids(tokenizer):
    rng = random.Random(0)
    for trial in range(500):
        top = 300 if trial % 2 else 248_077  # single-byte tokens stress half-finished characters
        ids = [rng.randrange(top) for _ in range(rng.randrange(1, 12))]
        assert "".join(stream(tokenizer, ids)) == tokenizer.decode(ids), ids
