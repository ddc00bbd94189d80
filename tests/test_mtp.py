"""The MTP head and self-speculative decoding: the head loads with the loader's checks and has
the checkpoint's size; speculation yields greedy's tokens exactly, whether its guesses are right
or wrong; a rejected guess leaves the caches as if it had never been made; speculative sampling's
rule keeps the model's distribution (a chi-square test that a wrong rule fails); a head trained
with the next-next-token loss on a model trained here learns, leaves the model as it was, and
speculates greedy's tokens with fewer calls (an untrained head's are hardly ever accepted)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from book import tiny
from qwen import mtp as M
from qwen import pretrain as pt
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


# ----------------------------------------------------------- a head trained on a model trained here
def rising_text(n, vocab=40, seed=0):
    """Runs of rising ids restarted at random (one token in five): the token after next is
    predictable from the next one, so a head can learn it."""
    g = torch.Generator().manual_seed(seed)
    ids, x = [], 0
    for _ in range(n):
        restart = torch.rand(1, generator=g) < 0.2
        x = int(torch.randint(0, vocab, (1,), generator=g)) if restart else (x + 1) % vocab
        ids.append(x)
    return torch.tensor(ids)


@pytest.fixture(scope="module")
def trained():
    """A small 3:1 model trained on rising_text, then an MTP head trained on it, the model frozen:
    (model, head, validation windows, (loss, accuracy) before the head's training, the model's
    weights unchanged by it)."""
    torch.manual_seed(0)
    cfg = pt.small_config(40, layers=4, hidden=32, intermediate=48)
    model = pt.new_model(cfg, seed=0)
    train, val = rising_text(6000), rising_text(1024, seed=1)
    pt.pretrain(
        model,
        train,
        val,
        100,
        batch=8,
        length=32,
        lr=1e-2,
        eval_every=100,
        eval_windows=8,
        autocast=False,
        progress=False,
    )
    model.requires_grad_(False).eval()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    head = M.new_mtp(cfg, seed=1)
    windows = val.view(-1, 32)
    before = M.mtp_accuracy(model, head, windows)
    M.train_mtp(model, head, train, 100, batch=8, length=32, lr=1e-2)  # accuracy 0.80, as at 150
    same = all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())
    return model, head.eval().requires_grad_(False), windows, before, same


def test_the_next_next_token_loss_trains_the_head_and_not_the_model(trained):
    model, head, windows, (loss0, acc0), same = trained
    loss, acc = M.mtp_accuracy(model, head, windows)
    assert same, "train_mtp changed the model's weights: only the head may learn"
    # a restart (1 in 5) makes token i + 2 unknowable; else it is token i + 1's successor
    assert acc0 < 0.1 and acc > 0.6, (acc0, acc)
    assert loss < loss0 - 1.0, (loss0, loss)
    # the head starts with its norms at scale 1 (w = 0 in 1 + w), as chapter 21's model does
    fresh = M.new_mtp(model.cfg, seed=1)
    assert all(not m.weight.any() for m in fresh.modules() if isinstance(m, M.RMSNorm))


def speculate(model, head, prompts, n):
    stats, equal = M.Speculation(), True
    for p in prompts:
        spec = list(M.speculative_greedy(model, head, p, n, stop_ids=(), stats=stats))
        equal &= spec == list(generate(model, p, n, stop_ids=()))
    return equal, stats


def test_a_trained_head_speculates_greedys_tokens_with_fewer_calls(trained):
    model, head, windows, _, _ = trained
    prompts = [windows[i, :12].tolist() for i in (0, 10, 20)]
    equal, stats = speculate(model, head, prompts, 100)  # 300 tokens
    assert equal
    assert stats.acceptance > 0.5, stats.acceptance
    assert stats.steps < 0.75 * 300, stats.steps  # greedy: 300 calls


def test_the_acceptance_is_the_training_s(trained):
    """The same model with the head as it starts (untrained): greedy's tokens still, but hardly a
    guess accepted; the trained head's acceptance is what its training gave."""
    model, head, windows, _, _ = trained
    prompts = [windows[i, :12].tolist() for i in (0, 10, 20)]
    _, right = speculate(model, head, prompts, 60)
    equal, fresh = speculate(model, M.new_mtp(model.cfg, seed=1).eval(), prompts, 60)
    assert equal
    assert fresh.acceptance < 0.2 < 0.5 < right.acceptance, (fresh.acceptance, right.acceptance)


def test_the_training_run_smoke_prints_and_writes_nothing():
    outputs = ROOT / "docs" / "outputs"
    before = {p.name: p.stat().st_mtime_ns for p in outputs.glob("mtp_train*")}
    proc = subprocess.run(
        [sys.executable, "scripts/mtp_train.py", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tokens equal to greedy's: True" in proc.stdout
    assert "guesses accepted" in proc.stdout and "tok/s" in proc.stdout
    assert {p.name: p.stat().st_mtime_ns for p in outputs.glob("mtp_train*")} == before
