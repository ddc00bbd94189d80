"""Our model equals transformers' Qwen3_5ForCausalLM, part by part and as a whole, on tiny random
models."""

import copy

import pytest
import torch
from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from qwen.cache import Cache
from qwen.deltanet import chunk_gated_delta_rule, l2norm, recurrent_gated_delta_rule
from qwen.model import from_pretrained
from qwen.norm import RMSNorm, RMSNormGated
from qwen.rope import RotaryEmbedding, apply_rope
from tests.reference import max_diff, our_model, randomize, reference_model, tiny_text_config

TOL = 1e-4  # fp32, max abs difference of outputs of order one
# DeltaNet k/v heads
HEADS = {"unequal": dict(n_k_head=2, n_v_head=4), "equal": dict(n_k_head=2, n_v_head=2)}


@pytest.fixture(scope="module", params=list(HEADS))
def pair(request):
    """(transformers reference, our model with the same weights, token ids): T = 150 spans 3 chunks,
    batch 2."""
    ref = reference_model(seed=0, **HEADS[request.param])
    ids = torch.randint(
        0, ref.config.vocab_size, (2, 150), generator=torch.Generator().manual_seed(1)
    )
    return ref, our_model(ref), ids


def captured(ref, ids, module):
    """The input and output of a reference submodule during a full forward pass."""
    seen = {}

    def hook(m, args, kwargs, out):
        seen["x"] = args[0] if args else kwargs["hidden_states"]
        seen["y"] = out[0] if isinstance(out, tuple) else out

    handle = module.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        ref(ids)
    handle.remove()
    return seen["x"], seen["y"]


def test_rmsnorm_is_zero_centred():
    x, w = torch.randn(2, 7, 64), torch.randn(64) * 0.5
    theirs, ours = hf.Qwen3_5RMSNorm(64, eps=1e-6), RMSNorm(64, eps=1e-6)
    theirs.weight.data, ours.weight.data = w, w
    max_diff("RMSNorm fp32", ours(x), theirs(x), 1e-6)
    max_diff("RMSNorm bf16", ours(x.bfloat16()), theirs(x.bfloat16()), 0)


def test_gated_rmsnorm_uses_plain_weight_and_silu_gate():
    x, z, w = torch.randn(2, 7, 4, 16), torch.randn(2, 7, 4, 16), 1 + torch.randn(16) * 0.5
    theirs, ours = hf.Qwen3_5RMSNormGated(16, eps=1e-6), RMSNormGated(16, eps=1e-6)
    theirs.weight.data, ours.weight.data = w, w
    max_diff("RMSNormGated fp32", ours(x, z), theirs(x, z), 1e-6)
    max_diff(
        "RMSNormGated bf16", ours(x.bfloat16(), z.bfloat16()), theirs(x.bfloat16(), z.bfloat16()), 0
    )


def test_rope_rotates_a_quarter_of_each_head_by_absolute_position():
    cfg = tiny_text_config()
    rope = RotaryEmbedding(cfg.head_dim, 0.25, 1e7)
    assert "inv_freq" not in rope.state_dict()  # computed, never loaded
    pos = torch.arange(1000, 1150)  # far positions: theta and fp32 angles matter
    q, k = torch.randn(2, 4, 150, 32), torch.randn(2, 2, 150, 32)
    cos_t, sin_t = hf.Qwen3_5TextRotaryEmbedding(cfg)(q, pos[None].expand(2, -1))
    cos, sin = rope(pos)
    max_diff("RoPE cos/sin", torch.stack([cos, sin]), torch.stack([cos_t[0], sin_t[0]]), 1e-6)
    q_t, k_t = hf.apply_rotary_pos_emb(q, k, cos_t, sin_t)
    max_diff("RoPE q", apply_rope(q, cos, sin), q_t, 1e-6)
    max_diff("RoPE k", apply_rope(k, cos, sin), k_t, 1e-6)
    # 32 * 0.25 = 8 dims turn, 24 pass
    assert torch.equal(apply_rope(q, cos, sin)[..., 8:], q[..., 8:])


def test_attention(pair):
    ref, ours, ids = pair
    x, y = captured(ref, ids, ref.model.layers[3].self_attn)
    cos, sin = ours.rotary_emb(torch.arange(ids.shape[1]))
    max_diff("attention", ours.layers[3].self_attn(x, cos, sin), y, TOL)


def test_deltanet(pair):
    ref, ours, ids = pair
    x, y = captured(ref, ids, ref.model.layers[1].linear_attn)
    max_diff(
        f"deltanet ({ref.config.linear_num_key_heads}k/{ref.config.linear_num_value_heads}v heads)",
        ours.layers[1].linear_attn(x),
        y,
        TOL,
    )


def test_mlp(pair):
    ref, ours, ids = pair
    x, y = captured(ref, ids, ref.model.layers[0].mlp)
    max_diff("mlp", ours.layers[0].mlp(x), y, TOL)


@pytest.mark.parametrize("i", [0, 3], ids=["deltanet_layer", "attention_layer"])
def test_decoder_layer(pair, i):
    ref, ours, ids = pair
    x, y = captured(ref, ids, ref.model.layers[i])
    cos, sin = ours.rotary_emb(torch.arange(ids.shape[1]))
    max_diff(f"decoder layer {i}", ours.layers[i](x, cos, sin), y, TOL)


def test_model_logits(pair):
    ref, ours, ids = pair
    assert ours.lm_head.weight is ours.embed_tokens.weight  # tied: one Parameter
    with torch.no_grad():
        theirs = ref(ids).logits
    max_diff(f"model logits {tuple(ids.shape)}", ours(ids), theirs, TOL)


def random_rule_inputs(B=2, H=3, T=150, dk=16, dv=8, seed=0):
    """Kernel inputs as the layer makes them: unit keys, scaled unit queries, log decays <= 0, beta
    in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(B, H, T, dk, generator=gen)) * dk**-0.5
    k = l2norm(torch.randn(B, H, T, dk, generator=gen))
    v = torch.randn(B, H, T, dv, generator=gen)
    # slow and fast heads
    g = -torch.rand(B, H, T, generator=gen) * torch.rand(B, H, 1, generator=gen) * 2
    beta = torch.rand(B, H, T, generator=gen)
    state = torch.randn(B, H, dk, dv, generator=gen)
    return q, k, v, g, beta, state


def test_recurrent_and_chunked_deltanet_agree():
    q, k, v, g, beta, state = random_rule_inputs()
    o_r, s_r = recurrent_gated_delta_rule(q, k, v, g, beta, state.clone())
    o_c, s_c = chunk_gated_delta_rule(q, k, v, g, beta, state.clone())
    max_diff("recurrent vs chunked output", o_c, o_r, 1e-5)
    max_diff("recurrent vs chunked state", s_c, s_r, 1e-5)
    o_64, _ = recurrent_gated_delta_rule(*(t.double() for t in (q, k, v, g, beta, state)))
    max_diff("chunked vs fp64 recurrent", o_c, o_64, 1e-5)
    tr = lambda t: t.transpose(1, 2)  # transformers wants [B, T, H, ...]
    o_t, s_t = hf.torch_chunk_gated_delta_rule(
        # it scales q itself
        tr(q) * 16**0.5,
        tr(k),
        tr(v),
        tr(g),
        tr(beta),
        initial_state=state.clone(),
        output_final_state=True,
    )
    max_diff("chunked vs transformers' chunked kernel", o_c, tr(o_t), 1e-5)
    max_diff("final state vs transformers'", s_c, s_t, 1e-5)


def tiny_vlm(seed=0):
    """A tiny Qwen3_5ForConditionalGeneration: the official naming, model.language_model.* and
    model.visual.*."""
    vision = dict(
        depth=1,
        hidden_size=16,
        num_heads=2,
        intermediate_size=32,
        in_channels=3,
        patch_size=4,
        temporal_patch_size=2,
        spatial_merge_size=2,
        out_hidden_size=64,
        num_position_embeddings=16,
    )
    cfg = Qwen3_5Config(
        text_config=tiny_text_config().to_dict(), vision_config=vision, tie_word_embeddings=True
    )
    torch.manual_seed(seed)
    return randomize(Qwen3_5ForConditionalGeneration(cfg).eval(), seed)


def test_from_pretrained_reads_the_official_layout(tmp_path):
    tiny_vlm().save_pretrained(tmp_path)
    ids = torch.randint(0, 512, (2, 100), generator=torch.Generator().manual_seed(2))
    ref = Qwen3_5ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ours = from_pretrained(tmp_path)
    assert ours.lm_head.weight is ours.embed_tokens.weight
    with torch.no_grad():
        theirs = ref(ids).logits
    max_diff("from_pretrained on a saved Qwen3_5ForConditionalGeneration", ours(ids), theirs, TOL)
    from qwen import fast

    max_diff(
        "qwen.fast.from_pretrained (every step) on the same checkpoint",
        fast.from_pretrained(tmp_path)(ids),
        theirs,
        TOL,
    )


def test_bf16():
    """bf16 rounds at 3 significant digits: stay within 0.1 of transformers in bf16, and no further
    from fp32."""
    ref = reference_model(seed=0)
    ref_bf16 = copy.deepcopy(ref).to(torch.bfloat16)
    ours = our_model(ref_bf16)
    ids = torch.randint(0, 512, (2, 150), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fp32, bf16 = ref(ids).logits, ref_bf16(ids).logits.float()
    logits = ours(ids)
    assert logits.dtype == torch.bfloat16
    max_diff("bf16 vs transformers bf16", logits, bf16, 0.1)
    hf_drift = (bf16 - fp32).abs().max().item()
    max_diff(
        f"bf16 vs transformers fp32 (transformers' own bf16 drift {hf_drift:.2f})",
        logits,
        fp32,
        hf_drift + 0.1,
    )
    assert (logits.argmax(-1) == bf16.argmax(-1)).float().mean() > 0.98


def test_cache_matches_full_recompute(pair):
    """Prefill 40, then a 10-token chunk, then one token at a time across the 64 boundary to 80."""
    ref, ours, ids = pair
    ids = ids[:, :80]
    full = ours(ids)
    cache = Cache(ours.cfg, batch=2)
    steps = [(0, 40), (40, 50)] + [(t, t + 1) for t in range(50, 80)]
    got = torch.cat([ours(ids[:, a:b], cache=cache) for a, b in steps], dim=1)
    assert cache.seq_len == 80
    max_diff("prefill + chunk + 30 decode steps vs full", got, full, TOL)


def test_cache_bytes_grow_only_for_attention():
    ref = reference_model(seed=0)
    ours, cfg = our_model(ref), ref.config
    cache = Cache(ours.cfg)
    ours(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    first = cache.nbytes()
    ours(torch.zeros(1, 7, dtype=torch.long), cache=cache)
    kv_per_token = (
        2 * cfg.num_key_value_heads * cfg.head_dim * 4 * cfg.layer_types.count("full_attention")
    )
    assert cache.nbytes()["kv"] - first["kv"] == 7 * kv_per_token
    assert cache.nbytes()["deltanet"] == first["deltanet"]
