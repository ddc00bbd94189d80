"""The chunked gated delta rule's backward by hand (chapter 19): its gradients equal autograd's
through qwen/deltanet.py (fp32, 1e-5 of the largest entry) on lengths that are not multiples of the
chunk, with and without an initial state; gradcheck in float64; a whole model trained through it
gets the plain model's gradients; it keeps at most 0.6 of autograd's bytes at the 0.8B's sizes."""

import copy

import pytest
import torch

from qwen.backward import (
    ChunkGatedDeltaRule,
    HandDeltaNet,
    chunk_gated_delta_rule_hand,
    hand_backward,
)
from qwen.deltanet import GatedDeltaNet, chunk_gated_delta_rule, l2norm
from qwen.fast import swap
from qwen.train import SavedBytes, next_token_loss, trainable
from tests.reference import our_model, reference_model

TOL = 1e-5  # fp32: max |hand - autograd| over max |autograd|, per input
NAMES = ("q", "k", "v", "g", "beta", "state")


def inputs(B, H, T, dk, dv, state, dtype=torch.float32, seed=0):
    """Inputs of the kind the layer makes: unit keys, scaled queries, g <= 0, beta in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(B, H, T, dk, generator=gen, dtype=dtype)) * dk**-0.5
    k = l2norm(torch.randn(B, H, T, dk, generator=gen, dtype=dtype))
    v = torch.randn(B, H, T, dv, generator=gen, dtype=dtype)
    g = -torch.rand(B, H, T, generator=gen, dtype=dtype)
    beta = torch.rand(B, H, T, generator=gen, dtype=dtype)
    S = torch.randn(B, H, dk, dv, generator=gen, dtype=dtype) if state else None
    return [x.requires_grad_() for x in (q, k, v, g, beta)] + [
        None if S is None else S.requires_grad_()
    ]


def grads(rule, xs, use_out=True, seed=5):
    """Outputs and the gradients of a random linear function of (o, final state)."""
    o, S = rule(*xs)
    gen = torch.Generator().manual_seed(seed)
    loss = (S * torch.randn(S.shape, generator=gen, dtype=S.dtype)).sum()
    if use_out:
        loss = loss + (o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum()
    wrt = [x for x in xs if x is not None]
    return o, S, torch.autograd.grad(loss, wrt, allow_unused=True, materialize_grads=True)


def rel(ours, theirs):
    scale = theirs.abs().max().item()
    return (ours - theirs).abs().max().item() / (scale if scale > 0 else 1.0)


@pytest.mark.parametrize("state", [False, True], ids=["no_state", "state"])
@pytest.mark.parametrize("T", [1, 63, 65, 150])
def test_gradients_equal_autograds(T, state):
    xs = inputs(2, 3, T, 8, 12, state)  # keys narrower than values
    o0, S0, want = grads(chunk_gated_delta_rule, xs)
    o1, S1, got = grads(chunk_gated_delta_rule_hand, xs)
    assert torch.equal(o0, o1) or rel(o1, o0) < 1e-6
    assert rel(S1, S0) < 1e-6
    for name, a, b in zip(NAMES, got, want):
        assert a.shape == b.shape, name
        assert rel(a, b) <= TOL, f"{name}: {rel(a, b):.2e}"


def test_only_the_final_state_used_and_a_short_chunk():
    """A loss of the final state alone (no gradient comes back for o), and chunks of 16."""
    xs = inputs(1, 2, 40, 16, 16, True, seed=3)
    _, _, want = grads(lambda *a: chunk_gated_delta_rule(*a, chunk_size=16), xs, use_out=False)
    _, _, got = grads(lambda *a: chunk_gated_delta_rule_hand(*a, chunk_size=16), xs, False)
    for name, a, b in zip(NAMES, got, want):
        assert rel(a, b) <= TOL, f"{name}: {rel(a, b):.2e}"


def test_gradcheck_float64():
    """Finite differences against the hand-written backward: two chunks of 4, the second padded."""
    xs = inputs(1, 2, 7, 3, 4, True, dtype=torch.float64, seed=1)
    assert torch.autograd.gradcheck(lambda *a: ChunkGatedDeltaRule.apply(*a, 4), xs)


class Float64DeltaNet(GatedDeltaNet):
    """The truth to measure rounding against: the delta rule in float64."""

    def delta_rule(self, q, k, v, g, beta, state):
        o, S = chunk_gated_delta_rule(*(x.double() for x in (q, k, v, g, beta)))
        return o.float(), S.float()


def test_a_second_derivative_is_refused_not_wrong():
    xs = inputs(1, 1, 5, 4, 4, False)
    o, S = chunk_gated_delta_rule_hand(*xs)
    (dq,) = torch.autograd.grad(o.sum(), xs[0], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        dq.sum().backward()


def test_a_model_with_the_step_gets_the_plain_models_gradients():
    """Every parameter's gradient, the model with hand_backward against the plain model. Some sum
    many terms of both signs (A_log, dt_bias: one entry per head, summed over every token), and
    there fp32 autograd itself is off the float64 delta rule by a few 1e-4 of the largest entry: so
    the hand-written backward must be as close to float64 as autograd's (within 1.5x, or 1e-6)."""
    plain = trainable(our_model(reference_model(seed=2)))
    hand = hand_backward(copy.deepcopy(plain))
    truth = copy.deepcopy(plain)
    for m in truth.modules():
        if isinstance(m, GatedDeltaNet):
            swap(m, Float64DeltaNet)
    assert all(type(m) is HandDeltaNet for m in hand.modules() if isinstance(m, GatedDeltaNet))
    ids = torch.randint(
        0, plain.cfg.vocab_size, (2, 70), generator=torch.Generator().manual_seed(0)
    )
    for m in (plain, hand, truth):
        next_token_loss(m(ids), ids).backward()
    want, exact = dict(plain.named_parameters()), dict(truth.named_parameters())
    for name, p in hand.named_parameters():
        assert p.grad is not None, name
        theirs = rel(want[name].grad, exact[name].grad)
        ours = rel(p.grad, exact[name].grad)
        assert ours <= 1.5 * theirs + 1e-6, f"{name}: {ours:.1e} off, autograd {theirs:.1e}"
        assert rel(p.grad, want[name].grad) <= 1e-3, name
    # with chapter 18's checkpointing too: the layers recompute, the gradients do not move
    both = hand_backward(trainable(copy.deepcopy(plain), checkpointing=True))
    both.zero_grad()
    next_token_loss(both(ids), ids).backward()
    for name, p in both.named_parameters():
        assert rel(p.grad, dict(hand.named_parameters())[name].grad) <= 1e-6, name


def test_decode_steps_still_use_the_recurrence():
    model = our_model(reference_model(seed=2))
    hand = hand_backward(copy.deepcopy(model))
    ids = torch.randint(0, model.cfg.vocab_size, (1, 9), generator=torch.Generator().manual_seed(1))
    outs = []
    for m in (model, hand):
        cache = m.new_cache()
        with torch.no_grad():
            outs.append(torch.cat([m(ids[:, :5], cache), m(ids[:, 5:6], cache)], dim=1))
    assert rel(outs[1], outs[0]) < 1e-6


def test_keeps_under_0_6_of_autograds_bytes_at_the_08b_shapes():
    """dk = dv = 128, batch 1, T = 4096: the inputs and one state per chunk. Two of the 0.8B's 16
    heads, to stay quick: both counts are linear in the heads (scripts/ch19_backward.py measures
    1 to 16), so the ratio is the same."""
    B, H, T, d = 1, 2, 4096, 128
    xs = [torch.zeros(B, H, T, d, requires_grad=True) for _ in range(3)]
    xs += [torch.zeros(B, H, T, requires_grad=True) for _ in range(2)]
    kept = {}
    for rule in (chunk_gated_delta_rule, chunk_gated_delta_rule_hand):
        counter = SavedBytes()
        with counter:
            rule(*xs)
        kept[rule] = counter.bytes
    n = T // 64
    assert kept[chunk_gated_delta_rule_hand] == 4 * (3 * B * H * T * d + 2 * B * H * T) + (
        4 * B * H * n * d * d
    )
    assert kept[chunk_gated_delta_rule_hand] <= 0.6 * kept[chunk_gated_delta_rule]


@pytest.mark.parametrize(
    "change, error, words",
    [
        (dict(q=torch.zeros(2, 3, 5)), ValueError, "[B, H, T, dk]"),
        (dict(g=torch.zeros(2, 3, 6)), ValueError, "[B, H, T]"),
        (dict(state=torch.zeros(2, 3, 8, 8)), ValueError, "[B, H, dk, dv]"),
        (dict(v=torch.zeros(2, 3, 5, 12, dtype=torch.int64)), TypeError, "floating point"),
        (dict(beta=torch.zeros(2, 3, 5, dtype=torch.float64)), TypeError, "one dtype"),
        (dict(chunk_size=0), ValueError, "chunk_size"),
    ],
)
def test_bad_input_says_what_is_wrong(change, error, words):
    q, k, v, g, beta, S = (x.detach() for x in inputs(2, 3, 5, 8, 12, True))
    args = dict(q=q, k=k, v=v, g=g, beta=beta, state=S, chunk_size=64) | change
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        chunk_gated_delta_rule_hand(**args)


def test_hand_backward_needs_deltanet_layers():
    with pytest.raises(ValueError, match="no GatedDeltaNet"):
        hand_backward(torch.nn.Linear(2, 2))
