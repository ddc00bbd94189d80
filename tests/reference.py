"""Tiny transformers reference models with every parameter random, and our model loaded with the
same weights."""

import json
import os
import tempfile
from pathlib import Path

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

from qwen.model import Qwen
from qwen.weights import Config, load

ROPE = {
    "rope_type": "default",
    "rope_theta": 1e7,
    "partial_rotary_factor": 0.25,
    # the real rope settings; 2 + 1 + 1 = 8 / 2
    "mrope_section": [2, 1, 1],
    "mrope_interleaved": True,
}


def tiny_text_config(
    n_k_head=2, n_v_head=4, layer_types=("linear_attention",) * 3 + ("full_attention",), **other
):
    """A Qwen3_5TextConfig with both layer types and tiny dims; every field that matters is set
    explicitly (`other` overrides any of them)."""
    fields = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(layer_types),
        layer_types=list(layer_types),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=n_k_head,
        linear_num_value_heads=n_v_head,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        rope_parameters=dict(ROPE),
    )
    return Qwen3_5TextConfig(**{**fields, **other})


@torch.no_grad()
def randomize(model, seed=0):
    """Overwrite every parameter: zero norm offsets or unit gates would hide a missing `1 +` or a
    swapped weight."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            # decay rates as at init
            p.copy_(torch.empty(p.shape).uniform_(0.01, 16, generator=gen).log())
        elif name.endswith("linear_attn.norm.weight"):
            p.copy_(1 + torch.randn(p.shape, generator=gen) * 0.1)  # the gated norm: a plain scale
        elif name.endswith("norm.weight"):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)  # zero-centred: an offset from 1
        elif name.endswith("embed_tokens.weight"):
            p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)  # logits of order one
        # std 0.35/sqrt(fan_in): at gain 1 a random net amplifies fp32 rounding 30x more
        elif p.ndim >= 2:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.35 * p[0].numel() ** -0.5)
        else:
            p.copy_(torch.randn(p.shape, generator=gen))  # dt_bias
    return model


def reference_model(seed=0, **config):
    """transformers' Qwen3_5ForCausalLM in fp32, eval mode, every parameter random."""
    torch.manual_seed(seed)
    return randomize(Qwen3_5ForCausalLM(tiny_text_config(**config)).eval(), seed)


def our_config(hf_config):
    """Our Config read from the config.json that transformers would save."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(hf_config.to_dict()))
        return Config.load(d)


def our_model(ref):
    """Our Qwen with the reference model's weights (shared, not copied)."""
    W = {k.removeprefix("model."): v for k, v in ref.state_dict().items() if k != "lm_head.weight"}
    return load(Qwen(our_config(ref.config)), W).requires_grad_(False)


# (test, name, max |diff|, tolerance) of every comparison: tests/parity_report.py records them
MEASURED = []


def max_rel(name, ours, theirs, tol):
    """The largest |ours - theirs| relative to the largest |theirs| (a gradient's own scale),
    recorded like max_diff and asserted within tol."""
    d = ((ours.float() - theirs.float()).abs().max() / theirs.float().abs().max()).item()
    return measured(name, d, tol)


def measured(name, d, tol):
    """Record a difference measured elsewhere (for tests/parity_report.py) and assert it."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].rpartition("::")[2]
    MEASURED.append((test, name, d, tol))
    print(f"{name}: {d:.2e}  (tolerance {tol:.0e})")
    assert d <= tol, f"{name}: {d:.3e} > {tol:.0e}"
    return d


def max_diff(name, ours, theirs, tol):
    """Print the measured max |ours - theirs| (visible with pytest -s) and assert it is within
    tol."""
    d = (ours.float() - theirs.float()).abs().max().item()
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].rpartition("::")[2]
    MEASURED.append((test, name, d, tol))
    print(f"{name}: max |diff| = {d:.2e}  (tolerance {tol:.0e})")
    assert d <= tol, f"{name}: max |diff| {d:.3e} > {tol:.0e}"
    return d
