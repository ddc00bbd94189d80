"""The MTP head and self-speculative decoding: the head loads with the loader's checks and has
the checkpoint's size; speculation yields greedy's tokens exactly, whether its guesses are right
or wrong; a rejected guess leaves the caches as if it had never been made; speculative sampling's
rule keeps the model's distribution (a chi-square test that a wrong rule fails)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from book import tiny
from qwen import mtp as M
from qwen.cache import DeltaNetCache, KVCache
from qwen.generate import generate
from qwen.model import from_pretrained
from qwen.weights import CheckpointError, Config

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3


@pytest.fixture(scope="module")
def model():
    return from_pretrained(tiny.path())


@pytest.fixture(scope="module")
def head():
    return M.mtp_from_pretrained(tiny.path())


@pytest.fixture(scope="module")
def greedy(model):
    return list(generate(model, PROMPT, 200, stop_ids=()))


def test_the_head_has_the_checkpoints_size_at_the_08b_shapes():
    with torch.device("meta"):
        head = M.MTP(Config.load(ROOT / "book" / "data" / "qwen3.5-0.8b"))
    # fc 1024 x 2048, a full-attention layer with its dense MLP, three norms: the 20.45M that the
    # checkpoint's byte count gives for mtp.*
    assert sum(p.numel() for p in head.parameters()) == 20_452_864
    assert head.fc.weight.shape == (1024, 2048)


def copy_with(tmp_path, change):
    for f in tiny.path().iterdir():
        if f.is_file() and f.name != tiny.MANIFEST:
            shutil.copy(f, tmp_path / f.name)
    file = tmp_path / tiny.WEIGHTS_FILE
    W = load_file(file)
    change(W)
    save_file(W, file, metadata={"format": "pt"})
    index = tmp_path / "model.safetensors.index.json"
    raw = json.loads(index.read_text())
    raw["weight_map"] = {k: tiny.WEIGHTS_FILE for k in sorted(W)}
    index.write_text(json.dumps(raw))
    return tmp_path


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda W: W.pop("mtp.fc.weight"), "missing from the checkpoint: mtp.fc.weight"),
        (
            lambda W: W.update({"mtp.layers.1.input_layernorm.weight": torch.zeros(64)}),
            "not used by MTP: mtp.layers.1.input_layernorm.weight",
        ),
        (lambda W: W.update({"mtp.fc.weight": torch.zeros(64, 64)}), "shape of mtp.fc.weight"),
        (lambda W: W["mtp.norm.weight"].fill_(float("inf")), "mtp.norm.weight holds NaN or inf"),
        (lambda W: [W.pop(k) for k in list(W) if k.startswith("mtp.")], "no mtp.* tensors"),
    ],
    ids=["missing", "extra", "shape", "inf", "none"],
)
def test_a_damaged_head_is_refused(tmp_path, change, says):
    with pytest.raises((ValueError, CheckpointError)) as e:
        M.mtp_from_pretrained(copy_with(tmp_path, change))
    assert says in str(e.value)


def test_speculation_with_the_heads_guesses_is_greedy(model, head, greedy):
    stats = M.Speculation()
    out = list(M.speculative_greedy(model, head, PROMPT, 200, stop_ids=(), stats=stats))
    assert out == greedy
    assert stats.drafted == 199 and stats.steps == 1 + stats.drafted


@pytest.mark.parametrize("right", [1 / 3, 2 / 3, 1.0])
def test_speculation_with_right_and_wrong_guesses_is_greedy(
    model, head, greedy, monkeypatch, right
):
    """An oracle guesses the true token at a share of the steps, the head the others: every
    mixture of accepted and rejected guesses must give greedy's tokens, in fewer calls."""
    guess = M.mtp_guess

    def oracle(model_, mtp_, hidden, next_ids, positions, cache):
        own = guess(model_, mtp_, hidden, next_ids, positions, cache)
        i = int(positions[-1]) + 2 - len(PROMPT)  # the generated token it guesses
        return greedy[i] if i < len(greedy) and (i * right) % 1 < right - 1e-9 else own

    monkeypatch.setattr(M, "mtp_guess", oracle)
    stats = M.Speculation()
    out = list(M.speculative_greedy(model, head, PROMPT, 200, stop_ids=(), stats=stats))
    assert out == greedy
    # a call of the model per guess, after the prompt's; each right guess saves one
    assert stats.accepted > 0 and stats.steps == 1 + stats.drafted
    assert 1 + stats.drafted + stats.accepted in (200, 201)  # the last bonus may be past the end
    if right == 1.0:
        assert stats.steps == 101  # the prompt, then two tokens a call


def test_stop_tokens_and_the_budget_are_greedys(model, head, greedy):
    stop = greedy[57]
    want = list(generate(model, PROMPT, 200, stop_ids=(stop,)))
    assert list(M.speculative_greedy(model, head, PROMPT, 200, stop_ids=(stop,))) == want
    for n in (1, 2, 3, 17):
        assert list(M.speculative_greedy(model, head, PROMPT, n, stop_ids=())) == greedy[:n]


def snapshot(cache):
    out = []
    for c in cache.layers:
        if isinstance(c, KVCache):
            out += [c.k.clone(), c.v.clone()]
        elif isinstance(c, DeltaNetCache):
            out += [c.conv.clone(), c.state.clone()]
    return out


@torch.no_grad()
def test_a_rejected_guess_leaves_the_cache_as_one_token_would(model):
    ids = torch.tensor([PROMPT])
    layers = M.with_rollback(model)
    one, two = model.new_cache(), model.new_cache()
    model(ids, one)
    model(ids, two)
    model(torch.tensor([[11]]), one)  # the token alone
    for layer in layers:
        layer.keeping = True
    try:
        model(torch.tensor([[11, 12]]), two)  # with a guess after it, then the guess undone
    finally:
        for layer in layers:
            layer.keeping = False
    M.keep_tokens(model, two, len(PROMPT), 1)
    assert two.seq_len == one.seq_len == len(PROMPT) + 1
    for a, b in zip(snapshot(one), snapshot(two), strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    # and the next token reads the same
    assert torch.allclose(
        model(torch.tensor([[13]]), one), model(torch.tensor([[13]]), two), atol=1e-4, rtol=1e-4
    )


def test_a_step_longer_than_the_conv_window_cannot_be_undone(model):
    layers = M.with_rollback(model)
    cache = model.new_cache()
    model(torch.tensor([PROMPT]), cache)
    for layer in layers:
        layer.keeping = True
    try:
        with pytest.raises(ValueError, match="at most 3"):
            model(torch.tensor([[1, 2, 3, 4]]), cache)
    finally:
        for layer in layers:
            layer.keeping = False


def chi_square(rule, p, q, n=20000, seed=0):
    """Pearson's statistic of n tokens from `rule` (draft drawn from q) against p."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(len(p))
    for _ in range(n):
        draft = int(torch.multinomial(q, 1, generator=gen))
        counts[rule(p, q, draft, gen)[0]] += 1
    expected = n * p
    return float(((counts - expected) ** 2 / expected).sum())


def test_speculative_sampling_keeps_the_models_distribution():
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(6, generator=gen) * 1.5, 0)
    q = torch.softmax(torch.randn(6, generator=gen) * 1.5, 0)
    critical = 20.52  # chi-square, 5 degrees of freedom, p = 0.001
    assert chi_square(M.accept_or_resample, p, q) < critical

    def always_keep(p, q, draft, gen):  # the draft's distribution, not the model's
        return draft, True

    def resample_from_p(p, q, draft, gen):  # a rejection redrawn from p counts p twice
        if torch.rand((), generator=gen) * q[draft] <= p[draft]:
            return draft, True
        return int(torch.multinomial(p, 1, generator=gen)), False

    assert chi_square(always_keep, p, q) > critical
    assert chi_square(resample_from_p, p, q) > critical
