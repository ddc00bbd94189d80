"""The fast path (qwen/fast.py, qwen/quant.py) computes what the clear model computes: fp32 logits to
1e-4, bf16 and int8 no further from fp32 than stated, the same greedy tokens, the same cache."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from book.tiny import path as tiny_path
from qwen import fast
from qwen.cache import Cache
from qwen.generate import generate
from qwen.model import from_pretrained
from qwen.quant import Int8Linear, W8A8Linear, dequantize_int8, quantize_int8
from tests.reference import max_diff, our_model, reference_model

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-4
FBGEMM = pytest.mark.skipif("fbgemm" not in torch.backends.quantized.supported_engines,
                            reason="w8a8 needs torch's fbgemm kernels, which only x86 builds of torch have")
HEADS = {"unequal": dict(n_k_head=2, n_v_head=4), "equal": dict(n_k_head=2, n_v_head=2)}


def weights(model):
    """{name: tensor} of a clear model, the tied head once (as a checkpoint stores it)."""
    return {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}


@pytest.fixture(scope="module", params=list(HEADS))
def pair(request):
    """(our clear fp32 model, its weights, token ids): T = 150 spans 3 DeltaNet chunks, batch 2."""
    clear = our_model(reference_model(seed=0, **HEADS[request.param]))
    ids = torch.randint(0, 512, (2, 150), generator=torch.Generator().manual_seed(1))
    return clear, weights(clear), ids


@torch.no_grad()
def test_fp32_logits_equal_the_clear_model(pair):
    clear, W, ids = pair
    max_diff("fast fp32 vs clear fp32", fast.FastQwen(clear.cfg, W)(ids), clear(ids), TOL)


@torch.no_grad()
def test_cache_prefill_chunk_and_decode_steps_equal_one_full_call(pair):
    clear, W, ids = pair
    model, full = fast.FastQwen(clear.cfg, W), clear(ids[:, :80])
    cache = Cache(clear.cfg, batch=2)
    steps = [(0, 40), (40, 50)] + [(t, t + 1) for t in range(50, 80)]     # crosses the 64 boundary
    got = torch.cat([model(ids[:, a:b], cache=cache) for a, b in steps], dim=1)
    assert cache.seq_len == 80
    max_diff("fast: prefill + chunk + 30 decode steps vs clear full", got, full, TOL)
    clear_cache = Cache(clear.cfg, batch=2)
    for a, b in steps:
        clear(ids[:, a:b], cache=clear_cache)
    assert cache.nbytes() == clear_cache.nbytes(), "the preallocated KV cache reports what it holds"


@torch.no_grad()
def test_bf16_and_int8_errors_next_to_the_clear_bf16_error(pair):
    """fast bf16 (fp32 activations) is no further from fp32 than the clear bf16 model; int8 weights
    cost at most 4x the clear bf16 error. The errors are printed (pytest -s)."""
    clear, W, ids = pair
    ref = clear(ids)
    clear_bf16 = from_weights_bf16(clear, W)(ids).float()
    bf16_err = max_diff("clear bf16 vs fp32", clear_bf16, ref, 1.0)
    W16 = {k: v.bfloat16() for k, v in W.items()}
    max_diff(f"fast bf16 vs fp32 (clear bf16: {bf16_err:.3f})",
             fast.FastQwen(clear.cfg, W16, torch.bfloat16)(ids), ref, bf16_err * 1.1)
    int8 = fast.FastQwen(clear.cfg, W16, torch.bfloat16, quantize="int8")(ids)
    max_diff(f"fast int8 vs fp32 (clear bf16: {bf16_err:.3f})", int8, ref, bf16_err * 4)
    assert (int8.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


@FBGEMM
@torch.no_grad()
def test_w8a8_decode_errors_next_to_the_int8_and_bf16_errors(pair):
    """w8a8 rounds each decode step's activations to 7 bits as well: measured over 20 decode steps after
    a prompt, against fp32, next to int8's and the clear bf16 model's errors (printed with pytest -s)."""
    clear, W, ids = pair
    W16 = {k: v.bfloat16() for k, v in W.items()}

    def decoded(model):
        cache = Cache(clear.cfg, batch=2)
        model(ids[:, :40], cache=cache)
        return torch.cat([model(ids[:, t:t + 1], cache=cache) for t in range(40, 60)], dim=1)
    ref = decoded(clear)
    bf16_err = max_diff("clear bf16 decode vs fp32", decoded(from_weights_bf16(clear, W)).float(), ref, 1.0)
    int8_err = max_diff("fast int8 decode vs fp32", decoded(fast.FastQwen(clear.cfg, W16, torch.bfloat16,
                                                                          quantize="int8")), ref, 1.0)
    w8a8 = decoded(fast.FastQwen(clear.cfg, W16, torch.bfloat16, quantize="w8a8"))
    max_diff(f"fast w8a8 decode vs fp32 (int8: {int8_err:.3f}, clear bf16: {bf16_err:.3f})",
             w8a8, ref, max(int8_err, bf16_err) * 4)
    assert (w8a8.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


@FBGEMM
def test_w8a8_matvec_is_within_half_an_activation_step_of_the_int8_weights():
    """One decode row: x is rounded to 7 bits between min(x, 0) and max(x, 0), so each output is off by at
    most half a step times the row's sum of |weights|; many rows (prefill) are exactly Int8Linear's."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(96, 200, generator=gen) * torch.logspace(-2, 0, 96)[:, None]
    lin, ref_lin = W8A8Linear(w), Int8Linear(w)
    wd = dequantize_int8(lin.q, lin.s.float())
    for x in (torch.randn(1, 200, generator=gen), torch.rand(1, 200, generator=gen) * 30):
        step = (x.max().clamp(min=0) - x.min().clamp(max=0)) / 127
        bound = step / 2 * wd.abs().sum(1) * 1.01 + 1e-5
        err = (lin(x) - x @ wd.T).abs()
        assert (err <= bound).all(), f"off by {(err / bound).max():.2f} x the bound"
        assert err.max() > 0, "the activations were rounded"
    xs = torch.randn(3, 40, 200, generator=gen)                        # 120 rows: the prefill path
    assert torch.equal(lin(xs), ref_lin(xs))


def test_w8a8_without_fbgemm_says_what_to_use_instead(monkeypatch):
    monkeypatch.setattr(type(torch.backends.quantized), "supported_engines", ["qnnpack"])
    with pytest.raises(RuntimeError, match='fbgemm.*use quantize="int8"'):
        W8A8Linear(torch.randn(8, 8))


def from_weights_bf16(clear, W):
    from qwen.model import Qwen
    from qwen.weights import load
    return load(Qwen(clear.cfg), {k: v.bfloat16() for k, v in W.items()}).requires_grad_(False)


def test_int8_rounds_each_weight_to_half_a_step_of_its_row():
    w = torch.randn(64, 48) * torch.logspace(-3, 1, 64)[:, None]      # rows of very different sizes
    q, s = quantize_int8(w)
    assert q.dtype == torch.int8 and s.shape == (64,)
    assert ((dequantize_int8(q, s) - w).abs() <= s[:, None] / 2 + 1e-7).all()
    assert (q.abs().amax(1) == 127).all(), "the largest weight of each row uses the full range"


def test_greedy_tokens_equal_the_clear_path_on_the_tiny_model():
    folder = tiny_path()
    ids = list(range(1000, 1040))
    clear = from_pretrained(folder, fast=False)
    model = from_pretrained(folder)                                    # the fast path by default
    assert isinstance(model, fast.FastQwen)
    assert list(generate(model, ids, 24)) == list(generate(clear, ids, 24))
    for q in ("int8", "w8a8") if "fbgemm" in torch.backends.quantized.supported_engines else ("int8",):
        assert len(list(generate(from_pretrained(folder, torch.bfloat16, quantize=q), ids, 4))) == 4


def test_from_pretrained_maps_the_file_and_joins_projections_without_copies():
    folder = tiny_path()
    model = fast.from_pretrained(folder, torch.bfloat16)
    file = next(folder.glob("*.safetensors"))
    w = model.layers[0].mlp.gate_up.proj.w                             # gate_proj | up_proj
    assert w.untyped_storage().nbytes() == file.stat().st_size, "a view of the mapped file"
    assert model.lm_head.w.data_ptr() == model.embed_tokens.weight.data_ptr(), "tied: one table"


def test_bad_options_and_checkpoints_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="int4"):
        from_pretrained(tiny_path(), quantize="int4")
    with pytest.raises(ValueError, match="needs the fast path"):
        from_pretrained(tiny_path(), fast=False, quantize="int8")
    clear = our_model(reference_model(seed=0))
    W = weights(clear)
    W.pop("layers.0.mlp.up_proj.weight")
    with pytest.raises(ValueError, match="no tensor layers.0.mlp.up_proj.weight"):
        fast.FastQwen(clear.cfg, fast.Checkpoint(W))


def test_bench_smoke_prints_the_table_and_valid_json(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--tiny", "--repeats", "1",
                        "--threads", "1", "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "decode after" in r.stdout and "bounds: decode bf16" in r.stdout
    res = json.loads(out.read_text())
    assert set(res["decode"][next(iter(res["decode"]))]) >= {"ours clear", "ours fast", "ours int8",
                                                            "transformers"}
    assert res["limits"]["read_GBps"] > 0
    # the longer context is timed in turn with the first one, on the fast path
    pair = res["context_pairs"]["48"]
    assert pair["short"] == 16 and pair["ratio"] > 0 and pair["long_tok_s"] > 0
    assert "timed in turn" in r.stdout


def _bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_times_two_contexts_in_turn_each_after_its_own_prompt(monkeypatch):
    """The paired context ratio: each side prefills its own prompt once, then they decode in A B B A order, and
    the ratio is the median of (short's time / long's time) over the turns."""
    from qwen.weights import Config
    bench, cfg, calls = _bench(), Config.load(tiny_path()), []

    class Model:                               # a stand-in that records what it is called with
        def __init__(self):
            self.cfg = cfg

        def __call__(self, ids, cache, last_only):
            calls.append((ids.shape[1], id(cache)))
            return torch.zeros(1, 1, 5)
    ids = torch.zeros(1, 48, dtype=torch.long)
    clock = iter(range(10_000))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))   # each timed call "takes" 1 tick
    out = bench.context_pairs(Model(), ids, 16, [48], new_tokens=2, repeats=3)
    prefills = [n for n, _ in calls if n > 1]
    assert prefills == [16, 48]
    caches = [c for n, c in calls if n == 1][4:]            # after the warm-up's 2 + 2 steps
    short, long = calls[0][1], calls[[n for n, _ in calls].index(48)][1]
    turns = [caches[i] for i in range(0, len(caches), 2)]   # 2 steps per timed call
    assert turns == [short, long, long, short, short, long]
    assert out[48]["short"] == 16 and out[48]["ratio"] == 1.0


def test_bench_figure_plots_the_lengths_read_back_from_json_as_numbers():
    """--from-json reads the lengths back as strings: the curve must still have one point per length on its
    log axis, not categories (with which the log axis keeps one point of two)."""
    import importlib.util

    import matplotlib
    matplotlib.use("Agg")
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = json.loads(json.dumps({"long_prefill": {4096: 50.0, 1024: 80.0}}))     # keys now "4096", "1024"
    line = bench.draw_long(res, lambda zh, en: en).axes[0].lines[0]
    assert list(line.get_xdata()) == [1024, 4096]
    assert [round(y, 1) for y in line.get_ydata()] == [12.5, 20.0]
    # the prefill rows join the fast path's curve, and the other systems are drawn where they were timed
    res["prefill"] = {"128": {"ours fast": {"tok_s": 100.0}, "transformers": {"tok_s": 10.0}}}
    ours, hf = bench.draw_long(res, lambda zh, en: en).axes[0].lines
    assert list(ours.get_xdata()) == [128, 1024, 4096] and list(hf.get_xdata()) == [128]
    assert [round(y, 1) for y in hf.get_ydata()] == [100.0] and hf.get_label() == "transformers (bf16)"


def test_bench_times_llama_cpp_in_turn_and_names_a_missing_gguf(tmp_path):
    """llama.cpp takes its turn in the interleaved order through llama-bench's JSON; here a stand-in
    llama-bench that reports 100 tok/s for prompts and 10 for generation, with the arguments it got."""
    fake = tmp_path / "llama-bench"
    log = tmp_path / "calls.txt"
    fake.write_text(f"""#!{sys.executable}
import json, sys
a = sys.argv[1:]
open({str(log)!r}, "a").write(" ".join(a) + "\\n")
p, n, d = (int(a[a.index(f) + 1]) for f in ("-p", "-n", "-d"))
print(json.dumps([{{"n_prompt": p, "n_gen": n, "n_depth": d, "avg_ts": 100.0 if p else 10.0}}]))
""")
    fake.chmod(0o755)
    gguf = tmp_path / "m-q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "bench.json"
    args = [sys.executable, str(ROOT / "scripts" / "bench.py"), "--tiny", "--repeats", "1", "--threads", "1",
            "--no-transformers", "--llama-bench", str(fake), "--json", str(out)]
    r = subprocess.run(args + ["--gguf", f"q8_0={gguf}"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    first = next(iter(res["decode"]))
    assert round(res["decode"][first]["llama.cpp q8_0"]["tok_s"], 6) == 10.0
    assert round(res["prefill"][next(iter(res["prefill"]))]["llama.cpp q8_0"]["tok_s"], 6) == 100.0
    assert any(line.startswith("llama.cpp q8_0") for line in r.stdout.splitlines())
    calls = log.read_text().splitlines()
    assert f"-d {first}" in " ".join(calls) and all("-t 1" in c and "-r 1" in c for c in calls)
    r = subprocess.run(args + ["--gguf", f"q8_0={tmp_path / 'absent.gguf'}"], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode != 0 and "absent.gguf: no such file" in r.stderr
