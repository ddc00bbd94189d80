"""Stage 3's steps (qwen/fast.py, qwen/quant.py) compute what the clear model computes: after every
step, applied in the book's order, fp32 logits equal the clear model's to 1e-4, with and without a
cache; bf16, int8, w8a8 and int4 are no further from fp32 than stated next to the clear bf16 error;
the result is still a qwen.model.Qwen made of the clear classes, whose tensors .to() moves."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from book.tiny import path as tiny_path
from qwen import fast, quant
from qwen.attention import Attention
from qwen.cache import Cache
from qwen.deltanet import GatedDeltaNet
from qwen.generate import generate
from qwen.mlp import MLP
from qwen.model import Qwen, from_pretrained
from qwen.quant import (
    Int4Linear,
    Int8Linear,
    W8A8Linear,
    dequantize_int8,
    int8_prompts,
    quantize_int8,
)
from tests.reference import max_diff, our_model, reference_model

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-4
FBGEMM = pytest.mark.skipif(
    "fbgemm" not in torch.backends.quantized.supported_engines,
    reason="w8a8 needs torch's fbgemm kernels, which only x86 builds of torch have",
)
HEADS = {"unequal": dict(n_k_head=2, n_v_head=4), "equal": dict(n_k_head=2, n_v_head=2)}
STEPS = list(fast.STEPS)


def save_checkpoint(clear, folder):
    """The clear model's weights and config as a checkpoint folder (text-only layout, sorted
    names)."""
    folder.mkdir(parents=True, exist_ok=True)
    W = {k: v.contiguous() for k, v in clear.state_dict().items() if k != "lm_head.weight"}
    save_file({"model." + k: W[k] for k in sorted(W)}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(clear.hf_config))
    return folder


@pytest.fixture(scope="module", params=list(HEADS))
def pair(request, tmp_path_factory):
    """(our clear fp32 model, its checkpoint folder, token ids): T = 150 spans 3 chunks, batch 2."""
    ref = reference_model(seed=0, **HEADS[request.param])
    clear = our_model(ref)
    clear.hf_config = ref.config.to_dict()
    ids = torch.randint(0, 512, (2, 150), generator=torch.Generator().manual_seed(1))
    return clear, save_checkpoint(clear, tmp_path_factory.mktemp("ckpt")), ids


def decoded(model, ids, prompt=40, steps=20):
    """Logits of a prompt, then of `steps` one-token decode steps, each fed the given ids."""
    cache = model.new_cache(batch=ids.shape[0], max_tokens=prompt + 8)  # room runs out: it grows
    out = [model(ids[:, :prompt], cache=cache)]
    out += [model(ids[:, t : t + 1], cache=cache) for t in range(prompt, prompt + steps)]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("n", range(1, len(STEPS) + 1), ids=STEPS)
@torch.no_grad()
def test_each_step_keeps_the_fp32_logits_of_the_clear_model(pair, n):
    """The steps up to and including STEPS[n - 1]: one call, and prefill + chunk + decode steps."""
    clear, folder, ids = pair
    model = fast.from_pretrained(folder, torch.float32, steps=STEPS[:n])
    assert list(model.steps) == STEPS[:n]
    max_diff(f"after {STEPS[n - 1]!r}: one call", model(ids), clear(ids), TOL)
    max_diff(
        f"after {STEPS[n - 1]!r}: prefill + 20 decode steps",
        decoded(model, ids),
        clear(ids[:, :60]),
        TOL,
    )
    cache = model.new_cache(batch=2)
    got = torch.cat([model(ids[:, a:b], cache=cache) for a, b in [(0, 40), (40, 90)]], dim=1)
    max_diff(
        f"after {STEPS[n - 1]!r}: two chunks across the 64 boundary", got, clear(ids[:, :90]), TOL
    )


@torch.no_grad()
def test_the_fast_model_is_the_clear_model_made_of_its_own_classes(pair):
    clear, folder, ids = pair
    model = fast.from_pretrained(folder, torch.float32)
    assert type(model) is not Qwen and isinstance(model, Qwen)
    layers = [
        layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn
        for layer in model.layers
    ]
    assert all(isinstance(m, (GatedDeltaNet, Attention)) for m in layers)
    assert all(isinstance(layer.mlp, MLP) for layer in model.layers)
    # every tensor is a parameter or a buffer, so .to() moves all of them (meta: no memory needed)
    model.to("meta")
    assert all(t.is_meta for t in [*model.parameters(), *model.buffers()])
    loose = [
        f"{name}.{k}"
        for name, m in model.named_modules()
        for k, v in vars(m).items()
        if isinstance(v, torch.Tensor)
    ]
    assert not loose, f"tensors that .to() would not move: {loose}"


@torch.no_grad()
def test_a_cache_is_the_callers_own_and_holds_what_the_clear_cache_holds(pair):
    """The model never replaces the caller's cache entries; the roomy cache reports the bytes it
    holds."""
    clear, folder, ids = pair
    model = fast.from_pretrained(folder, torch.float32)
    cache, clear_cache = model.new_cache(batch=2, max_tokens=60), clear.new_cache(batch=2)
    layers = list(cache.layers)
    for a, b in [(0, 40)] + [(t, t + 1) for t in range(40, 50)]:
        model(ids[:, a:b], cache=cache)
        clear(ids[:, a:b], cache=clear_cache)
    assert all(x is y for x, y in zip(cache.layers, layers))
    assert cache.seq_len == clear_cache.seq_len == 50
    assert cache.nbytes() == clear_cache.nbytes()
    # a plain Cache works too (the fast model does not need its own)
    plain = Cache(clear.cfg, batch=2)
    max_diff("fast model, plain cache", model(ids[:, :30], cache=plain), clear(ids[:, :30]), TOL)


def test_the_conv_state_does_not_pin_the_prompt(pair):
    """The DeltaNet cache keeps K - 1 columns in storage of their own, not a view of the whole
    window."""
    clear, folder, ids = pair
    model = fast.from_pretrained(folder, torch.float32)
    cache = model.new_cache(batch=2)
    with torch.no_grad():
        model(ids, cache=cache)
    conv = cache.layers[0].conv
    assert conv.untyped_storage().nbytes() == conv.nbytes


@torch.no_grad()
def test_bf16_int8_int4_and_w8a8_errors_next_to_the_clear_bf16_error(pair):
    """Each against fp32, over a prompt and 20 decode steps: the fast bf16 model (either activation
    choice) is no further than 1.5x the clear bf16 model's error; int8 at most 4x, int4 at most 16x;
    w8a8 at most 4x int8's. The errors are printed (pytest -s)."""
    clear, folder, ids = pair
    ref = decoded(clear, ids)
    clear16 = from_pretrained(folder, torch.bfloat16)
    err = max_diff("clear bf16 vs fp32", decoded(clear16, ids).float(), ref, 1.0)
    for act in ("bf16", "fp32"):
        m = fast.from_pretrained(folder, torch.bfloat16, activations=act)
        assert m.steps["activations"].startswith(act)
        max_diff(
            f"fast bf16, {act} activations (clear bf16: {err:.3f})",
            decoded(m, ids),
            ref,
            err * 1.5,
        )
    errs = {}
    for kind, bound in (("int8", 4 * err), ("int4", 16 * err)):
        got = decoded(fast.from_pretrained(folder, torch.bfloat16, quantize=kind), ids)
        errs[kind] = max_diff(f"{kind} vs fp32 (clear bf16: {err:.3f})", got, ref, bound)
        assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8
    if "fbgemm" in torch.backends.quantized.supported_engines:
        got = decoded(fast.from_pretrained(folder, torch.bfloat16, quantize="w8a8"), ids)
        max_diff(f"w8a8 vs fp32 (int8: {errs['int8']:.3f})", got, ref, 4 * max(errs["int8"], err))


@FBGEMM
def test_w8a8_matvec_is_within_half_an_activation_step_of_the_int8_weights():
    """One decode row: x is rounded to 7 bits between min(x, 0) and max(x, 0), so each output is off
    by at most half a step times the row's sum of |weights|. Many rows (prefill) in int8: each row
    rounded to steps of max|row| / 127, the same bound with that step; widened: Int8Linear's."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(96, 200, generator=gen) * torch.logspace(-2, 0, 96)[:, None]
    lin, ref_lin = W8A8Linear(w), Int8Linear(w)
    wd = dequantize_int8(ref_lin.q, ref_lin.s.float())
    for x in (torch.randn(1, 200, generator=gen), torch.rand(1, 200, generator=gen) * 30):
        step = (x.max().clamp(min=0) - x.min().clamp(max=0)) / 127
        bound = step / 2 * wd.abs().sum(1) * 1.01 + 1e-5
        err = (lin(x) - x @ wd.T).abs()
        assert (err <= bound).all(), f"off by {(err / bound).max():.2f} x the bound"
        assert err.max() > 0, "the activations were rounded"
    xs = torch.randn(3, 40, 200, generator=gen) * torch.logspace(-1, 1, 200)  # 120 rows: a prompt
    if int8_prompts()[0] == "int8":
        rows = xs.reshape(-1, 200)
        bound = rows.abs().amax(-1, keepdim=True) / 127 / 2 * wd.abs().sum(1) * 1.01 + 1e-5
        err = (lin(xs).reshape(-1, 96) - rows @ wd.T).abs()
        assert (err <= bound).all(), f"off by {(err / bound).max():.2f} x the bound"
        assert err.max() > 0, "the activations were rounded"
        assert not hasattr(lin, "q"), "q is kept in oneDNN's order instead, not twice"
    else:
        assert torch.equal(lin(xs), ref_lin(xs))


@FBGEMM
def test_w8a8_prompts_widen_where_int8_would_not_pay(monkeypatch):
    """A CPU without VNNI or AMX (AVX2's, whose byte products saturate) widens prompts, exactly as
    Int8Linear; the choice says why."""
    monkeypatch.setattr(quant, "cpu_flags", lambda: {"avx2", "fma"})
    how, why = quant.int8_prompts.__wrapped__()
    assert how == "widen" and "VNNI" in why
    monkeypatch.setattr(quant, "int8_prompts", lambda: (how, why))
    w = torch.randn(40, 64)
    lin, ref_lin = W8A8Linear(w), Int8Linear(w)
    xs = torch.randn(2, 30, 64)
    assert hasattr(lin, "q") and not hasattr(lin, "blocked")
    assert torch.equal(lin(xs), ref_lin(xs))


@FBGEMM
def test_w8a8_prompts_widen_where_onednn_would_saturate():
    """oneDNN capped below VNNI adds byte products in 16 bits and saturates: whatever the CPU, the
    worst-case multiply catches it and prompts widen."""
    code = "from qwen.quant import int8_prompts; print(int8_prompts()[0])"
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["widen"]


def test_w8a8_without_fbgemm_says_what_to_use_instead(monkeypatch):
    monkeypatch.setattr(type(torch.backends.quantized), "supported_engines", ["qnnpack"])
    with pytest.raises(RuntimeError, match='fbgemm.*use quantize="int8"'):
        W8A8Linear(torch.randn(8, 8))


def test_int8_rounds_each_weight_to_half_a_step_of_its_row():
    w = torch.randn(64, 48) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different sizes
    q, s = quantize_int8(w)
    assert q.dtype == torch.int8 and s.shape == (64,)
    assert ((dequantize_int8(q, s) - w).abs() <= s[:, None] / 2 + 1e-7).all()
    assert (q.abs().amax(1) == 127).all(), "the largest weight of each row uses the full range"


def test_int4_kernel_equals_its_dequantized_weight():
    """torch's int4 kernel computes x @ dequantized(w).T (to bf16 rounding), each weight within half
    a step of its group, for one row and for many."""
    from qwen.quant import dequantize_int4, quantize_int4

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 128, generator=gen) * torch.logspace(-2, 0, 64)[:, None]
    q, s, z = quantize_int4(w)
    assert ((dequantize_int4(q, s, z) - w).abs() <= s.repeat_interleave(32, 1) / 2 + 1e-6).all()
    lin = Int4Linear(w)
    for x in (torch.randn(1, 128, generator=gen), torch.randn(40, 128, generator=gen)):
        ref = x @ dequantize_int4(q, s, z).T
        assert ((lin(x) - ref).norm() / ref.norm()) < 1e-2
    with pytest.raises(ValueError, match="divide by 32"):
        Int4Linear(torch.randn(8, 40))


def test_greedy_tokens_equal_the_clear_model_on_the_tiny_model():
    folder = tiny_path()
    ids = list(range(1000, 1040))
    clear = from_pretrained(folder)
    model = fast.from_pretrained(folder)
    assert list(generate(model, ids, 24)) == list(generate(clear, ids, 24))
    kinds = (
        ("int8", "int4", "w8a8")
        if "fbgemm" in torch.backends.quantized.supported_engines
        else ("int8", "int4")
    )
    for q in kinds:
        assert (
            len(list(generate(fast.from_pretrained(folder, torch.bfloat16, quantize=q), ids, 4)))
            == 4
        )


def test_mapped_load_views_the_file_and_joins_projections_without_copies():
    folder = tiny_path()
    steps = [s for s in STEPS if s != "packed weights"]  # packing copies: not here
    model = fast.from_pretrained(folder, torch.bfloat16, steps=steps)
    file = next(folder.glob("*.safetensors"))
    w = model.layers[0].mlp.gate_up_proj.proj.weight  # gate_proj | up_proj
    assert w.untyped_storage().nbytes() == file.stat().st_size, "a view of the mapped file"
    assert model.lm_head.weight is model.embed_tokens.weight, "tied: one table"
    assert not any(p.requires_grad for p in model.parameters())


def _rss():
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmRSS")) << 10


@pytest.mark.skipif(
    sys.platform != "linux", reason="give_back is madvise on Linux; elsewhere a no-op"
)
def test_give_back_returns_the_files_pages_and_keeps_every_value(tmp_path):
    """After a copy replaced a mapped weight, its pages leave the process's memory; the file's
    tensors still read the same (a page read again comes back from the file), and a tensor that
    is not in the file's map is never touched."""
    gen = torch.Generator().manual_seed(0)
    save_file(
        {"a": torch.randn(4096, 2048, generator=gen).bfloat16(), "b": torch.randn(1000, 3)},
        tmp_path / "w.safetensors",
    )
    W = fast.mmap_safetensors(tmp_path / "w.safetensors")
    holder = torch.nn.Module()
    holder.maps = {t.untyped_storage().data_ptr(): t.untyped_storage() for t in W.values()}
    sums = {k: t.double().sum().item() for k, t in W.items()}  # every page read: resident
    before = _rss()
    fast.give_back(holder, W["a"])
    assert before - _rss() > 12e6, "16 MiB of the file's pages leave the process"
    assert {k: t.double().sum().item() for k, t in W.items()} == sums
    own = torch.randn(4096, 2048, generator=gen)
    copy = own.clone()
    fast.give_back(holder, own)  # memory of its own: left alone
    assert torch.equal(own, copy)


def test_the_activation_choice_is_measured_and_recorded(monkeypatch):
    """auto: the faster of two measured matmuls; the choice and its reason are in model.steps."""
    folder = tiny_path()
    for faster, slower in (("bf16", "fp32"), ("fp32", "bf16")):
        monkeypatch.setattr(fast, "matmul_speeds", lambda: {faster: 1.0, slower: 3.0})
        model = fast.from_pretrained(folder, torch.bfloat16)
        assert model.steps["activations"].startswith(f"{faster} (a 128-row matmul")
        assert model.activations == faster
        assert isinstance(model.embed_tokens, fast.WideEmbedding) == (faster == "fp32")


@pytest.mark.skipif(
    not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU's oneDNN has no bf16 kernels: the packing step keeps plain weights",
)
def test_packed_weights_compute_what_the_plain_bf16_weight_computes(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(96, 64, generator=gen).bfloat16()
    lin = fast.PackedLinear(w)
    for x in (torch.randn(1, 64, generator=gen), torch.randn(2, 40, 64, generator=gen)):
        ref = torch.nn.functional.linear(x.bfloat16(), w).float()
        got = lin(x)
        assert got.dtype == x.dtype and got.shape == ref.shape
        assert ((got - ref).norm() / ref.norm()) < 1e-2
    folder = tiny_path()
    for packed, plain, kind in ((1.0, 2.0, fast.PackedLinear), (2.0, 1.0, torch.nn.Linear)):
        monkeypatch.setattr(fast, "gemv_speeds", lambda: {"plain": plain, "packed": packed})
        model = fast.from_pretrained(folder, torch.bfloat16)
        assert model.steps["packed weights"].startswith("packed" if packed < plain else "plain")
        assert isinstance(model.layers[0].mlp.down_proj, kind)
    assert (
        "packed weights" not in fast.from_pretrained(folder, torch.bfloat16, quantize="int8").steps
    )


SUBNORMAL = torch.finfo(torch.float32).tiny  # 1.2e-38: below it (and above 0), fp32 is subnormal


def subnormals(t):
    return int(((t != 0) & (t.abs() < SUBNORMAL)).sum())


def test_cut_exp_is_exp_down_to_the_cut_and_zero_below_it():
    x = torch.tensor([0.0, -1.0, fast.CUT, fast.CUT - 1e-3, -90.0, -100.0, float("-inf")])
    got = fast.cut_exp(x)
    assert torch.equal(got[:3], x[:3].exp())
    assert torch.equal(got[3:], torch.zeros(4))
    assert subnormals(x.exp()) == 2 and subnormals(got) == 0  # e^-90, e^-100: subnormal in fp32


def delta_inputs(gen, B, H, T, d, fastest):
    """q, k, v, g, beta of the gated delta rule, drawn from gen: unit keys and queries (queries
    scaled as attention's), log decays per token down to -fastest."""
    from qwen.deltanet import l2norm

    q = l2norm(torch.randn(B, H, T, d, generator=gen)) * d**-0.5
    k = l2norm(torch.randn(B, H, T, d, generator=gen))
    v = torch.randn(B, H, T, d, generator=gen)
    g = -torch.rand(B, H, T, generator=gen) * fastest
    beta = torch.rand(B, H, T, generator=gen)
    return q, k, v, g, beta


def test_a_prompt_with_fast_decays_is_the_same_without_subnormals():
    """Decays as a random model's (down to e^-60 per token): the clear rule makes subnormal decay
    factors, the cut one none, and their outputs and states agree to fp32's rounding."""
    from qwen.deltanet import chunk_gated_delta_rule

    gen = torch.Generator().manual_seed(0)
    B, H, T, d = 1, 4, 128, 32
    q, k, v, g, beta = delta_inputs(gen, B, H, T, d, fastest=60)
    gamma = g.view(B, H, 2, 64).cumsum(-1)
    assert subnormals(gamma.exp()) > 0 and subnormals(fast.cut_exp(gamma)) == 0
    for state in (None, torch.randn(B, H, d, d, generator=gen)):
        o, S = chunk_gated_delta_rule(q, k, v, g, beta, state)
        o_cut, S_cut = chunk_gated_delta_rule(q, k, v, g, beta, state, exp=fast.cut_exp)
        for cut, clear in ((o_cut, o), (S_cut, S)):
            assert (cut - clear).abs().max() <= 1e-6 * clear.abs().max()
        assert subnormals(o_cut) == 0


@pytest.mark.parametrize("T", [1, 63, 64, 65, 150])
def test_one_solve_per_chunk_is_chapter_7s_rule(T):
    """V' solved for in the loop equals U - W S of chapter 7, from zero and from a given state,
    on lengths inside, at and across the chunk border."""
    from qwen.deltanet import chunk_gated_delta_rule

    gen = torch.Generator().manual_seed(T)
    B, H, d = 2, 3, 16
    q, k, v, g, beta = delta_inputs(gen, B, H, T, d, fastest=3)
    for state in (None, torch.randn(B, H, d, d, generator=gen)):
        want = chunk_gated_delta_rule(q, k, v, g, beta, None if state is None else state.clone())
        got = fast.chunk_rule_one_solve(q, k, v, g, beta, None if state is None else state.clone())
        for a, b in zip(got, want):
            assert a.shape == b.shape
            assert (a - b).abs().max() <= 1e-5 * b.abs().max()


def test_one_solve_per_chunk_makes_no_w_and_no_subnormals():
    """Decays down to e^-60 per token: even with every factor cut, chapter 7's W = M^-1 (beta
    e^gamma K) holds subnormal numbers; the step never forms W, and its output holds none."""
    gen = torch.Generator().manual_seed(1)
    B, H, T, d = 1, 4, 128, 32
    q, k, v, g, beta = delta_inputs(gen, B, H, T, d, fastest=60)
    gamma = g.view(B, H, 2, 64).cumsum(-1)
    C = 64
    decay = fast.cut_exp(
        (gamma[..., :, None] - gamma[..., None, :]).masked_fill(
            ~torch.ones(C, C, dtype=torch.bool).tril(), float("-inf")
        )
    )
    kb = k.view(B, H, 2, C, d) * beta.view(B, H, 2, C, 1)
    M = ((kb @ k.view(B, H, 2, C, d).transpose(-1, -2)) * decay).tril(-1) + torch.eye(C)
    W = torch.linalg.solve_triangular(M, kb * fast.cut_exp(gamma)[..., None], upper=False)
    assert subnormals(W) > 0
    o, S = fast.chunk_rule_one_solve(q, k, v, g, beta, torch.randn(B, H, d, d, generator=gen))
    assert subnormals(o) == 0 and subnormals(S) == 0


def test_one_solve_per_chunk_leaves_other_devices_chapter_7s_batched_solves(monkeypatch):
    layer = GatedDeltaNet.__new__(fast.OneSolveDeltaNet)
    called = []
    monkeypatch.setattr(fast, "chunk_rule_one_solve", lambda *a: called.append("cpu") or a[:2])
    q = torch.zeros(1, 1, 5, 4, device="meta")
    layer.delta_rule(q, q, q, q[..., 0], q[..., 0], None)  # meta: not a CPU
    assert called == []
    q = torch.zeros(1, 1, 5, 4)
    layer.delta_rule(q, q, q, q[..., 0], q[..., 0], None)
    assert called == ["cpu"]


@torch.no_grad()
def test_weight_first_prompts_follow_the_measurement_and_keep_the_logits(pair, monkeypatch):
    """Whichever order measures faster is the one the model uses; the weight first gives the clear
    model's fp32 logits, and the layers' int8 projections, widened for a prompt, follow it with the
    same products (the head keeps its own)."""
    clear, folder, ids = pair
    int8 = {}
    for first, then in (("weight first", "x first"), ("x first", "weight first")):
        monkeypatch.setattr(fast, "product_orders", lambda dtype: {first: 1.0, then: 2.0})
        model = fast.from_pretrained(folder, torch.float32)
        assert model.steps["weight-first prompts"].startswith(f"{first} (a 128-row product")
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert linears and all(
            isinstance(m, fast.WeightFirstLinear) == (first == "weight first") for m in linears
        )
        max_diff(f"{first}: one call", model(ids), clear(ids), TOL)
        max_diff(f"{first}: prefill + decode", decoded(model, ids), clear(ids[:, :60]), TOL)
        q = fast.from_pretrained(folder, torch.float32, quantize="int8")
        kinds = {type(m) for m in q.layers.modules() if isinstance(m, Int8Linear)}
        assert kinds and all(
            issubclass(k, fast.WeightFirstInt8Linear) == (first == "weight first") for k in kinds
        )
        int8[first] = q(ids)
    max_diff("int8 prompt, weight first vs x first", int8["weight first"], int8["x first"], TOL)


def test_weight_first_prompts_are_measured_on_a_cpu_only(pair):
    clear, folder, ids = pair
    model = fast.from_pretrained(folder, torch.float32, steps=["mapped load"]).to("meta")
    assert fast.weight_first_prompts(model) == "x first (measured on a CPU only)"
    assert not any(isinstance(m, fast.WeightFirstLinear) for m in model.modules())


def test_bad_options_and_checkpoints_say_what_is_wrong(pair):
    clear, folder, ids = pair
    with pytest.raises(ValueError, match='quantize=.int2.*"int8"'):
        fast.from_pretrained(folder, quantize="int2")
    with pytest.raises(ValueError, match="steps \\['warp'\\]"):
        fast.from_pretrained(folder, steps=["warp"])
    with pytest.raises(ValueError, match="activations=.fp8"):
        fast.from_pretrained(folder, torch.bfloat16, activations="fp8")


def test_the_fast_loader_names_what_the_clear_loader_names(pair, tmp_path):
    """One loader: a missing tensor, a misshapen one and an integer one are named the same way."""
    clear, folder, ids = pair
    from safetensors.torch import load_file

    W = load_file(folder / "model.safetensors")
    cases = {
        "missing": lambda W: W.pop("model.layers.0.mlp.up_proj.weight"),
        "shape": lambda W: W.update({"model.norm.weight": torch.zeros(3)}),
        "dtype": lambda W: W.update({"model.norm.weight": torch.zeros(64, dtype=torch.int32)}),
    }
    for case, damage in cases.items():
        bad = tmp_path / case
        bad.mkdir()
        (bad / "config.json").write_text((folder / "config.json").read_text())
        V = dict(W)
        damage(V)
        save_file(V, bad / "model.safetensors")
        errors = []
        for load in (from_pretrained, fast.from_pretrained):
            with pytest.raises(ValueError) as e:
                load(bad)
            errors.append(str(e.value).split(": ", 1)[-1] if case == "dtype" else str(e.value))
        assert errors[0] == errors[1] or case == "dtype", errors
        assert {
            "missing": "missing from the checkpoint",
            "shape": "shape of norm.weight",
            "dtype": "I32",
        }[case] in errors[1], errors


def test_bench_write_never_puts_a_smoke_run_in_the_book(tmp_path):
    """--write records the 0.8B runs only: a --tiny run, or --from-json of one, is refused and
    writes nothing."""
    before = {p: p.read_bytes() for p in (ROOT / "docs" / "outputs").glob("bench_*")}
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--tiny", "--write"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "smoke test" in r.stderr and "--json" in r.stderr
    tiny_run = tmp_path / "tiny.json"
    tiny_run.write_text(json.dumps({"model": "tiny test model", "steps": []}))
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench.py"),
            "--from-json",
            str(tiny_run),
            "--write",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "0.8B runs only" in r.stderr
    assert {p: p.read_bytes() for p in (ROOT / "docs" / "outputs").glob("bench_*")} == before


def fake_llama_bench(tmp_path):
    """A stand-in llama-bench that reports 100 tok/s for prompts and 10 for generation and logs the
    arguments it got: (its path, the log)."""
    fake = tmp_path / "llama-bench"
    log = tmp_path / "calls.txt"
    fake.write_text(f"""#!{sys.executable}
import json, sys
a = sys.argv[1:]
if a == ["--version"]:
    sys.exit(print("version: 0 (a stand-in)"))
open({str(log)!r}, "a").write(" ".join(a) + "\\n")
p, n, d = (int(a[a.index(f) + 1]) for f in ("-p", "-n", "-d"))
print(json.dumps([{{"n_prompt": p, "n_gen": n, "n_depth": d, "avg_ts": 100.0 if p else 10.0}}]))
""")
    fake.chmod(0o755)
    return fake, log


def test_bench_smoke_prints_the_table_and_valid_json(tmp_path):
    """One smoke run of the whole bench on the tiny model, transformers and llama.cpp (a stand-in
    llama-bench, through its JSON) taking their turns in the interleaved order."""
    fake, log = fake_llama_bench(tmp_path)
    gguf = tmp_path / "m-q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "bench.json"
    args = [
        sys.executable,
        str(ROOT / "scripts" / "bench.py"),
        "--tiny",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--llama-bench",
        str(fake),
        "--json",
        str(out),
    ]
    r = subprocess.run(
        args + ["--gguf", f"q8_0={gguf}"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "decode after" in r.stdout and "bounds: decode bf16" in r.stdout
    res = json.loads(out.read_text())
    assert set(res["decode"][next(iter(res["decode"]))]) >= {
        "ours clear",
        "ours fast",
        "ours int8",
        "transformers",
    }
    assert res["limits"]["read_GBps"] > 0
    # the longer context is timed in turn with the first one, on the fast path
    pair = res["context_pairs"]["48"]
    assert pair["short"] == 16 and pair["ratio"] > 0 and pair["long_tok_s"] > 0
    assert "timed in turn" in r.stdout
    # the steps, from the clear model to int4, each timed in turn with the one before; the CPU named
    steps = [r["step"] for r in res["steps"]]
    assert steps[:2] == ["clear", "mapped load"] and steps[-1] == "int4" and "activations" in steps
    assert all(r["prefill_tok_s"] > 0 and r["decode_tok_s"] > 0 for r in res["steps"])
    assert all("decode_x_prev" in r for r in res["steps"][1:])
    assert "aten::mm" in {o["op"] for o in res["steps"][0]["profile"]["ops"]}
    # the fastest bf16 model's step and each quantized one's, split: the same products, each in
    # its own format's kernel, take part of the step
    splits = {r["step"]: r["split"] for r in res["steps"] if "split" in r}
    assert set(splits) == {"weight-first prompts", "int8", "w8a8", "int4"} - (
        set() if "w8a8" in steps else {"w8a8"}
    )
    assert len({s["matmuls"] for s in splits.values()}) == 1
    # both timed (one repeat each in this smoke run, beside the other worker: which is the larger
    # is noise on the tiny model, so only that both were measured); the step makes more operator
    # calls than it has products
    assert all(s["matmul_ms"] > 0 and s["step_ms"] > 0 for s in splits.values())
    assert all(s["calls"] > s["matmuls"] > 0 for s in splits.values())
    assert res["cpu"]["name"] and isinstance(res["cpu"]["flags"], list)
    assert any(line.startswith("in-place state") for line in r.stdout.splitlines())
    # llama.cpp: the stand-in's figures where its turns are, its arguments, its version
    first = next(iter(res["decode"]))
    assert round(res["decode"][first]["llama.cpp q8_0"]["tok_s"], 6) == 10.0
    assert round(res["prefill"][next(iter(res["prefill"]))]["llama.cpp q8_0"]["tok_s"], 6) == 100.0
    assert any(line.startswith("llama.cpp q8_0") for line in r.stdout.splitlines())
    assert res["llama_cpp"] == "version: 0 (a stand-in)"
    ref = res["steps_reference"]["llama.cpp q8_0"]  # next to the steps, timed with the clear model
    assert (round(ref["prefill_tok_s"], 6), round(ref["decode_tok_s"], 6)) == (100.0, 10.0)
    calls = log.read_text().splitlines()
    assert f"-d {first}" in " ".join(calls) and all("-t 1" in c and "-r 1" in c for c in calls)
    r = subprocess.run(
        args + ["--gguf", f"q8_0={tmp_path / 'absent.gguf'}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode != 0 and "absent.gguf: no such file" in r.stderr


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_times_two_contexts_in_turn_each_after_its_own_prompt(monkeypatch):
    """The paired context ratio: each side prefills its own prompt once, then they decode in A B B A
    order, and
    the ratio is the median of (short's time / long's time) over the turns."""
    from qwen.weights import Config

    bench, cfg, calls = _bench(), Config.load(tiny_path()), []

    class Model:  # a stand-in that records what it is called with
        def __init__(self):
            self.cfg = cfg

        def new_cache(self, batch=1, max_tokens=None):
            return Cache(cfg, batch)

        def __call__(self, ids, cache, last_only):
            calls.append((ids.shape[1], id(cache)))
            return torch.zeros(1, 1, 5)

    ids = torch.zeros(1, 48, dtype=torch.long)
    clock = iter(range(10_000))
    monkeypatch.setattr(
        bench.time, "perf_counter", lambda: next(clock)
    )  # each timed call "takes" 1 tick
    out = bench.context_pairs(Model(), ids, 16, [48], new_tokens=2, repeats=3)
    prefills = [n for n, _ in calls if n > 1]
    assert prefills == [16, 48]
    caches = [c for n, c in calls if n == 1][4:]  # after the warm-up's 2 + 2 steps
    short, long = calls[0][1], calls[[n for n, _ in calls].index(48)][1]
    turns = [caches[i] for i in range(0, len(caches), 2)]  # 2 steps per timed call
    assert turns == [short, long, long, short, short, long]
    assert out[48]["short"] == 16 and out[48]["ratio"] == 1.0


def test_bench_figure_plots_the_lengths_read_back_from_json_as_numbers():
    """--from-json reads the lengths back as strings: the curve must still have one point per length
    on its
    log axis, not categories (with which the log axis keeps one point of two)."""
    import matplotlib

    from book import bench_report

    matplotlib.use("Agg")
    res = json.loads(
        json.dumps({"long_prefill": {4096: 50.0, 1024: 80.0}})
    )  # keys now "4096", "1024"
    line = bench_report.draw_long(res, lambda zh, en: en).axes[0].lines[0]
    assert list(line.get_xdata()) == [1024, 4096]
    assert [round(y, 1) for y in line.get_ydata()] == [12.5, 20.0]
    # the prefill rows join the fast path's curve, and the other systems are drawn where they were
    # timed
    res["prefill"] = {"128": {"ours fast": {"tok_s": 100.0}, "transformers": {"tok_s": 10.0}}}
    ours, hf = bench_report.draw_long(res, lambda zh, en: en).axes[0].lines
    assert list(ours.get_xdata()) == [128, 1024, 4096] and list(hf.get_xdata()) == [128]
    assert [round(y, 1) for y in hf.get_ydata()] == [
        100.0
    ] and hf.get_label() == "transformers (bf16)"
