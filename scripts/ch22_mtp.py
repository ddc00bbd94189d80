"""Chapter 22: two tokens per weight read. Qwen3.5's MTP head guesses the token after next; the
model checks the guess in the call it makes anyway. The tokens equal greedy's; what it buys is the
acceptance rate against what a 2-token call costs, measured here at the 0.8B shapes."""
import time
from pathlib import Path

import torch

from book.bench.machine import cpu_info
from book.out import record, record_error, record_measured, save_figure
from book.tiny import is_tiny
from qwen import mtp as M
from qwen.cache import DeltaNetCache, KVCache
from qwen.generate import generate
from qwen.model import Qwen, from_pretrained
from qwen.timing import alternately
from qwen.weights import Config, find_model

torch.set_grad_enabled(False)
torch.manual_seed(0)
path = find_model()
tiny = is_tiny(path)
model, head = from_pretrained(path), M.mtp_from_pretrained(path)
print(f"MTP head: {sum(p.numel() for p in head.parameters()):,} parameters"
      + (" (the tiny test model's, random: its guesses are noise)" if tiny else ""))

# --8<-- [start:equal]
prompt = torch.randint(0, 200_000, (24,)).tolist()
stats = M.Speculation()
fast = list(M.speculative_greedy(model, head, prompt, 64, stop_ids=(), stats=stats))
slow = list(generate(model, prompt, 64, stop_ids=()))
print(f"64 tokens: speculative == greedy: {fast == slow}")
print(f"guesses {stats.drafted}, accepted {stats.accepted} ({stats.acceptance:.0%}), "
      f"model calls {stats.steps} (greedy: {len(slow)})")
# --8<-- [end:equal]
record(spec_equal=fast == slow, drafted=stats.drafted, accepted=stats.accepted,
       calls=stats.steps, acceptance=f"{stats.acceptance:.0%}")


# --8<-- [start:rollback]
def states(cache):
    return [c.state.clone() for c in cache.layers if isinstance(c, DeltaNetCache)]


ids = torch.tensor([prompt])
layers = M.with_rollback(model)
one, two = model.new_cache(), model.new_cache()
model(ids, one)
model(ids, two)
model(torch.tensor([[11]]), one)                     # the token alone
for layer in layers:
    layer.keeping = True
model(torch.tensor([[11, 12]]), two)                 # the token and a guess, in one call
for layer in layers:
    layer.keeping = False
before = max((a - b).abs().max().item() for a, b in zip(states(one), states(two)))
M.keep_tokens(model, two, len(prompt), 1)            # the guess was wrong: forget it
after = max((a - b).abs().max().item() for a, b in zip(states(one), states(two)))
# --8<-- [end:rollback]
print(f"DeltaNet states, one token vs the 2-token step: max |diff| {before:.3g} before, "
      f"{record_error('rollback_diff', after, 1e-5)} after keep_tokens(…, 1)")
record(rollback_before=f"{before:.2g}")

# The 0.8B shapes, random bf16 weights: what a verify step costs against a decode step.
t0 = time.perf_counter()
cfg = Config.load(Path(__file__).resolve().parent.parent / "book" / "data" / "qwen3.5-0.8b")
with torch.device("meta"):
    big, big_head = Qwen(cfg), M.MTP(cfg)
big, big_head = (m.to_empty(device="cpu").to(torch.bfloat16) for m in (big, big_head))
big.lm_head.weight = big.embed_tokens.weight         # tied again (to_empty made two tensors)
gen = torch.Generator().manual_seed(0)
for m in (big, big_head):
    for p in m.parameters():
        p.normal_(0, 0.02, generator=gen)
n_big, n_head = (sum(p.numel() for p in m.parameters()) for m in (big, big_head))
record(params_08b=f"{n_big:,}", mtp_params_08b=f"{n_head:,}", mtp_share=f"{n_head / n_big:.1%}")
built = record_measured("built_s", f"{time.perf_counter() - t0:.0f}", tol=5, rel=2.0)
print(f"\n0.8B shapes, random bf16 weights: {n_big:,} + {n_head:,} (MTP) parameters, "
      f"built in {built} s")
cache = big.new_cache()
big(torch.randint(0, 200_000, (1, 128)), cache, last_only=True)   # a 128-token prompt
saved = [dict(vars(c)) for c in cache.layers]


def step(T, keeping=False):
    """One call of T tokens after the prompt; the cache is put back after it."""
    def run():
        for layer in big_layers:
            layer.keeping = keeping
        if T == 1:
            big(torch.tensor([[5]]), cache, last_only=True)         # greedy's decode step
        else:
            M.forward_hidden(big, torch.tensor([[5] * T]), cache)   # a verify step: T rows
        for layer in big_layers:
            layer.keeping = False
        for c, s in zip(cache.layers, saved):
            vars(c).update(s)
        cache.seq_len = 128
    return run


big_layers = M.with_rollback(big)
mcache = KVCache(1, cfg.num_key_value_heads, cfg.head_dim)
kv = torch.randn(1, cfg.num_key_value_heads, 128, cfg.head_dim).bfloat16()
hidden = torch.randn(1, 1, cfg.hidden_size).bfloat16()


def draft():
    """One MTP row after 128 of its own, and the shared head on it: one guess."""
    mcache.k, mcache.v = kv, kv
    M.mtp_guess(big, big_head, hidden, torch.tensor([[5]]), torch.tensor([128]), mcache)


ms = alternately({"c1": step(1), "c2": step(2), "c2_keep": step(2, True), "c3": step(3),
                  "c3_keep": step(3, True), "mtp": draft}, repeats=5)
print(f"CPU: {cpu_info()['name']}, {torch.get_num_threads()} thread(s); median of 5, ms:")
labels = {"c1": "1 token (greedy's decode step)", "c2": "2 tokens (a verify step), no keeping",
          "c2_keep": "2 tokens, states kept for rollback", "c3": "3 tokens, no keeping",
          "c3_keep": "3 tokens, states kept for rollback",
          "mtp": "the MTP head: one row and the shared head"}
for k, label in labels.items():
    shown = record_measured(f"ms_{k}", f"{ms[k]:.0f}", rel=2.0)   # another CPU, another time
    ratio = record_measured(f"x_{k}", f"{ms[k] / ms['c1']:.2f}", tol=0.5)
    print(f"  {label:44}{shown:>7}  ({ratio}× the decode step)")
record(cpu=cpu_info()["name"], threads=torch.get_num_threads())

# --8<-- [start:speedup]
r2 = (ms["c2_keep"] + ms["mtp"]) / ms["c1"]       # one guess: a 2-token call and a draft
r3 = (ms["c3_keep"] + 2 * ms["mtp"]) / ms["c1"]   # two guesses: a 3-token call, two drafts


def speedup(alpha, guesses=1):
    """Tokens per second against greedy at acceptance rate alpha (guesses accepted alike)."""
    tokens = sum(alpha**k for k in range(guesses + 1))     # 1 + α (+ α²)
    return tokens / (r2 if guesses == 1 else r3)
# --8<-- [end:speedup]


shown = {k: record_measured(k, f"{v:.2f}", tol=0.5) for k, v in
         (("r2", r2), ("r3", r3), ("breakeven", max(r2 - 1, 0)))}
print(f"cost of a speculative call / a decode step: {shown['r2']} (one guess), "
      f"{shown['r3']} (two)")
print(f"break-even acceptance (one guess): α = {shown['breakeven']}")
print(f"  {'α':>5}{'one guess':>11}{'two guesses':>13}")
for a in (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
    one_ = record_measured(f"speedup_{round(a * 100)}", f"{speedup(a):.2f}", tol=0.5)
    two_ = record_measured(f"speedup2_{round(a * 100)}", f"{speedup(a, 2):.2f}", tol=0.5)
    print(f"  {a:5.1f}{one_:>10}×{two_:>12}×")


def draw(t):
    import matplotlib.pyplot as plt

    alphas = [i / 50 for i in range(51)]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(alphas, [speedup(a) for a in alphas], color="C0",
            label=t("猜 1 个", "one guess") + r": $(1 + \alpha)\,/\,(c_2 + c_{mtp})$")
    ax.plot(alphas, [speedup(a, 2) for a in alphas], color="C1", linestyle="--",
            label=t("猜 2 个", "two guesses") + r": $(1 + \alpha + \alpha^2)\,/\,(c_3 + 2c_{mtp})$")
    ax.axhline(1, color="grey", linewidth=0.8)
    if 0 <= r2 - 1 <= 1:
        ax.axvline(r2 - 1, color="C0", linestyle=":", linewidth=1)
        ax.annotate(t(f"持平：α = {r2 - 1:.2f}", f"break-even: α = {r2 - 1:.2f}"),
                    (r2 - 1, 1), xytext=(6, -16), textcoords="offset points", color="C0")
    ax.set_xlim(0, 1)
    ax.set_xlabel(t("接受率 α", "acceptance rate α"))
    ax.set_ylabel(t("相对贪心解码的速度", "speed against greedy decoding"))
    ax.set_title(t("0.8B 形状、随机 bf16 权重、本机 CPU 实测的代价比",
                   "0.8B shapes, random bf16 weights, cost ratios measured on this CPU"),
                 fontsize=10)
    ax.legend(loc="upper left", fontsize=9)
    return fig


save_figure("ch22_speedup", draw)
record(dtype="bfloat16 (0.8B shapes); float32 (the model at hand)")
