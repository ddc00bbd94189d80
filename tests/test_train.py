"""Training the model we wrote: its loss equals transformers', every parameter's gradient equals
transformers' (fp32, relative 1e-4) on tiny configs no other test uses, checkpointing changes no
gradient, the training mode refuses what cannot train, and AdamW, its schedule and clipping equal
torch's."""

import gc
import math
import weakref

import pytest
import torch
import torch.nn.functional as F

from qwen import fast
from qwen.model import Qwen
from qwen.optim import AdamW, clip_grad_norm, lr_at
from qwen.train import (
    IGNORE,
    SavedBytes,
    cross_entropy,
    next_token_loss,
    next_token_targets,
    perplexity,
    trainable,
)
from qwen.weights import load
from tests.reference import max_diff, measured, our_config, reference_model

GRAD_TOL = 1e-4  # fp32: max |ours - theirs| over max |theirs|, per parameter
# tiny configs the parity tests do not use; lengths that are not multiples of the chunk (64)
CONFIGS = {
    # one key head for two value heads, one layer of each kind, T = 70: one chunk boundary
    "one_key_head": (
        dict(n_k_head=1, n_v_head=2, layer_types=("linear_attention", "full_attention")),
        70,
    ),
    # five layers, the head untied from the embedding, T = 129: three chunks, the last of one step
    "untied_five_layers": (
        dict(
            layer_types=("linear_attention",) * 3 + ("full_attention", "linear_attention"),
            tie_word_embeddings=False,
            intermediate_size=96,
        ),
        129,
    ),
    # equal heads, a 3-tap conv, keys narrower than values, wider attention heads, T = 200
    "conv3_wide_values": (
        dict(
            n_k_head=4,
            n_v_head=4,
            linear_conv_kernel_dim=3,
            linear_key_head_dim=8,
            linear_value_head_dim=24,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=48,
        ),
        200,
    ),
}


def twins(config, seed=0):
    """A transformers reference model and ours with copies of its weights, both in train mode."""
    ref = reference_model(seed=seed, **config).train()
    W = {k.removeprefix("model."): v.detach().clone() for k, v in ref.state_dict().items()}
    if ref.config.tie_word_embeddings:
        W.pop("lm_head.weight")
    return ref, trainable(load(Qwen(our_config(ref.config)), W))


def ids_for(ref, T, batch=2, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, ref.config.vocab_size, (batch, T), generator=gen)


# ----------------------------------------------------------------------------------------- the loss
def test_cross_entropy_equals_torchs_with_ignored_targets():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 37, generator=gen) * 3
    targets = torch.randint(0, 37, (50,), generator=gen)
    targets[::4] = IGNORE
    assert torch.allclose(cross_entropy(logits, targets), F.cross_entropy(logits, targets))


def test_bf16_logits_are_summed_in_fp32():
    """A wide vocabulary in bf16: summing e^z in bf16 would be off by far more than this."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 50_000, generator=gen).bfloat16()
    targets = torch.randint(0, 50_000, (8,), generator=gen)
    want = F.cross_entropy(logits.float(), targets)
    assert abs(cross_entropy(logits, targets) - want) < 1e-5


def test_next_token_targets_shift_and_mask():
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.tensor([[False, False, True, True]])  # the prompt is 5, 6: only 7 and 8 are scored
    assert next_token_targets(ids).tolist() == [[6, 7, 8, IGNORE]]
    assert next_token_targets(ids, mask).tolist() == [[IGNORE, 7, 8, IGNORE]]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_loss_equals_transformers(name):
    config, T = CONFIGS[name]
    ref, ours = twins(config)
    ids = ids_for(ref, T)
    with torch.no_grad():
        theirs = ref(ids, labels=ids).loss
        mine = next_token_loss(ours(ids), ids)
    max_diff("loss", mine, theirs, 1e-5)


def test_masked_loss_equals_transformers_labels():
    """transformers' labels with -100 where the mask is False: the same loss."""
    ref, ours = twins(CONFIGS["one_key_head"][0])
    ids = ids_for(ref, 40)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, :15] = False
    labels = ids.masked_fill(~mask, IGNORE)
    with torch.no_grad():
        max_diff(
            "masked loss", next_token_loss(ours(ids), ids, mask), ref(ids, labels=labels).loss, 1e-5
        )


def test_perplexity_of_a_uniform_model_is_its_vocabulary():
    class Uniform(torch.nn.Module):
        def forward(self, ids):
            return torch.zeros(*ids.shape, 123)

    ppl, n = perplexity(Uniform(), torch.arange(100) % 123, window=16)
    assert n == 99 and abs(ppl - 123) < 1e-3


def test_perplexity_windows_score_every_token_once(tiny_model):
    from qwen.model import from_pretrained

    model = from_pretrained(tiny_model)
    ids = torch.randint(0, model.cfg.vocab_size, (90,), generator=torch.Generator().manual_seed(0))
    whole, n = perplexity(model, ids, window=200)
    with torch.no_grad():
        want = math.exp(next_token_loss(model(ids[None]), ids[None]).item())
    assert n == 89 and abs(whole - want) / want < 1e-5
    assert perplexity(model, ids, window=30)[1] == 89


@pytest.mark.parametrize(
    "logits, targets, message",
    [
        (torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), "flatten"),
        (torch.zeros(4, 5), torch.zeros(4), "token ids"),
        (torch.zeros(4, 5), torch.full((4,), IGNORE), "no target"),
        (torch.zeros(4, 5), torch.tensor([0, 1, 5, 2]), "outside the vocabulary"),
        (torch.zeros(4, 5), torch.tensor([0, 1, -1, 2]), "outside the vocabulary"),
    ],
)
def test_cross_entropy_says_what_is_wrong(logits, targets, message):
    with pytest.raises((ValueError, TypeError), match=message):
        cross_entropy(logits, targets)


# ------------------------------------------------------------------------------------ the gradients
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_gradient_equals_transformers(name):
    """One backward of the mean next-token loss; every parameter's gradient, through the chunked
    DeltaNet across a chunk boundary, attention, the MLPs, the norms and the embedding."""
    config, T = CONFIGS[name]
    ref, ours = twins(config)
    ids = ids_for(ref, T)
    ref(ids, labels=ids).loss.backward()
    next_token_loss(ours(ids), ids).backward()
    theirs = dict(ref.named_parameters())
    worst = 0.0
    for n, p in ours.named_parameters():
        g = theirs["model." + n if "model." + n in theirs else n].grad
        assert p.grad is not None, f"{n} got no gradient"
        rel = ((p.grad - g).abs().max() / g.abs().max()).item()
        print(f"{n}: {rel:.1e}")
        worst = max(worst, rel)
        assert rel <= GRAD_TOL, f"{n}: relative difference {rel:.2e} > {GRAD_TOL:.0e}"
    # the worst parameter, recorded for the chapter (tests/parity_report.py)
    measured("grad rel", worst, GRAD_TOL)


def test_recurrent_form_gradients_equal_the_chunked_forms():
    """Decoding one token at a time after a prompt (the recurrent form) has the gradient of the
    whole sequence read at once (the chunked form)."""
    ref, ours = twins(CONFIGS["one_key_head"][0])
    ids = ids_for(ref, 12, batch=1)

    def grads(step_by_step):
        ours.zero_grad()
        if step_by_step:
            cache = ours.new_cache()
            logits = torch.cat(
                [ours(ids[:, :5], cache)] + [ours(ids[:, t : t + 1], cache) for t in range(5, 12)],
                dim=1,
            )
        else:
            logits = ours(ids)
        next_token_loss(logits, ids).backward()
        return {n: p.grad.clone() for n, p in ours.named_parameters()}

    a, b = grads(False), grads(True)
    for n in a:
        assert ((a[n] - b[n]).abs().max() / a[n].abs().max()) < 1e-4, n


def test_checkpointing_gives_the_same_gradients_and_keeps_less():
    ref, plain = twins(CONFIGS["untied_five_layers"][0])
    _, ckpt = twins(CONFIGS["untied_five_layers"][0])
    trainable(ckpt, checkpointing=True)
    ids = ids_for(ref, 129)
    kept = {}
    for name, model in (("plain", plain), ("checkpointed", ckpt)):
        with SavedBytes(model) as saved:
            loss = next_token_loss(model(ids), ids)
        loss.backward()
        kept[name] = saved.bytes
    for (n, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert torch.equal(p.grad, q.grad), n
    assert kept["checkpointed"] < kept["plain"] / 2


def test_saved_bytes_counts_exactly_and_frees_what_it_counted():
    """An output saved for its own backward (sigmoid keeps its result) is counted once and freed
    with its graph: a pack hook that handed back the tensor itself would keep it forever."""
    lin = torch.nn.Linear(8, 8)
    with SavedBytes(lin) as saved:
        y = torch.sigmoid(lin(torch.randn(4, 8, requires_grad=True)))
    assert saved.bytes == 2 * 4 * 8 * 4  # linear's input and sigmoid's output, fp32; no weight
    alive = weakref.ref(y)
    del y
    gc.collect()
    assert alive() is None, "the forward's activations outlived their graph"


@pytest.mark.parametrize("first", ["weight first", "x first"])
def test_trainable_refuses_a_quantized_model(tiny_model, monkeypatch, first):
    """The message names the quantized class, the same whichever order of a prompt's products
    chapter 15's step measured faster on this machine."""
    then = "x first" if first == "weight first" else "weight first"
    monkeypatch.setattr(fast, "product_orders", lambda dtype: {first: 1.0, then: 2.0})
    model = fast.from_pretrained(tiny_model, quantize="int8")
    with pytest.raises(ValueError, match=r"\(Int8Linear\): a quantized or packed model cannot be"):
        trainable(model)


def test_a_trainable_fast_model_has_the_clear_models_gradients(tiny_model):
    """The steps that keep a backward (joined projections, fused norms, sdpa prompts...) change
    no gradient; packed and quantized weights are left out."""
    from qwen.model import from_pretrained

    steps = [s for s in fast.STEPS if s not in ("mapped load", "packed weights")]
    quick = trainable(fast.from_pretrained(tiny_model, steps=steps, activations="fp32"))
    clear = trainable(from_pretrained(tiny_model))
    ids = torch.randint(0, 1000, (1, 70), generator=torch.Generator().manual_seed(0))
    for m in (quick, clear):
        next_token_loss(m(ids), ids).backward()
    g_clear = clear.embed_tokens.weight.grad
    g_quick = quick.embed_tokens.weight.grad
    # how far fp32 rounding alone moves this gradient: every weight of the clear model changed by
    # a few units in its last place. A random tiny model's gradient is ill-conditioned (on an
    # AVX2 EPYC such a change moved it by 7e-4 of its largest value), so the steps, which only
    # sum in another order, are held to a few times that, not to a fixed 1e-4 that one CPU's
    # kernels happen to meet; a wrong backward is off by the gradient itself.
    noisy = trainable(from_pretrained(tiny_model))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in noisy.parameters():
            p.mul_(1 + 6e-8 * torch.randn(p.shape, generator=gen))
    next_token_loss(noisy(ids), ids).backward()

    def rel(g):
        return ((g - g_clear).abs().max() / g_clear.abs().max()).item()

    rounding = max(rel(noisy.embed_tokens.weight.grad), 1e-6)
    assert rel(g_quick) < 4 * rounding, (
        f"the fast model's gradient is {rel(g_quick):.1e} of the largest away from the clear "
        f"model's; fp32 rounding of the weights moves it {rounding:.1e}"
    )
    assert quick.layers[0].mlp.down_proj.weight.grad is not None


# ------------------------------------------------------------------------------------ the optimizer
def test_adamw_and_clipping_equal_torchs():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    mine = AdamW(a.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    theirs = torch.optim.AdamW(b.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    for _ in range(20):
        x = torch.randn(5, 8)
        for m, opt in ((a, mine), (b, theirs)):
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
        n1 = clip_grad_norm(list(a.parameters()), 0.5)
        n2 = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
        assert torch.allclose(n1, n2)
        mine.step()
        theirs.step()
    assert torch.allclose(a.weight, b.weight, atol=1e-6)


def test_adamw_state_round_trips():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    opt = AdamW(m.parameters())
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    again = AdamW(m.parameters())
    again.load_state_dict(opt.state_dict())
    assert again.t == 1 and all(torch.equal(x, y) for x, y in zip(again.m, opt.m))
    with pytest.raises(ValueError, match="another model"):
        AdamW(torch.nn.Linear(4, 4, bias=False).parameters()).load_state_dict(opt.state_dict())


def test_adamw_needs_trainable_parameters():
    with pytest.raises(ValueError, match="requires grad"):
        AdamW(torch.nn.Linear(2, 2).requires_grad_(False).parameters())


def test_lr_warms_up_then_decays_to_its_floor():
    lrs = [lr_at(s, total=100, peak=1.0, warmup=10, floor=0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.1)


def test_bench_train_smoke():
    """scripts/bench_train.py end to end on tiny sizes: every system runs and is reported."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "scripts/bench_train.py", "--smoke", "--repeats", "1"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in ("transformers", "ours, clear", "ours, + checkpointing", "autograd (ch07 code)"):
        assert row in proc.stdout
