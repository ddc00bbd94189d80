"""Chapter 22: two tokens per weight read. Qwen3.5's MTP head guesses the token after next; the
model checks the guess in the call it makes anyway. The tokens equal greedy's; what it buys is the
acceptance rate against what a 2-token call costs, measured here at the 0.8B shapes."""
from pathlib import Path

import torch

from book.out import record, record_error, save_figure
from book.tiny import is_tiny
from qwen import mtp as M
from qwen.cache import DeltaNetCache
from qwen.generate import generate
from qwen.model import Qwen, from_pretrained
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

# The 0.8B shapes: how large the head is beside the model (meta tensors: nothing allocated).
# What their calls cost is measured by scripts/bench_mtp.py, on the machine at hand.
cfg = Config.load(Path(__file__).resolve().parent.parent / "book" / "data" / "qwen3.5-0.8b")
with torch.device("meta"):
    big, big_head = Qwen(cfg), M.MTP(cfg)
n_big, n_head = (sum(p.numel() for p in m.parameters()) for m in (big, big_head))
record(params_08b=f"{n_big:,}", mtp_params_08b=f"{n_head:,}", mtp_share=f"{n_head / n_big:.1%}")
print(f"\n0.8B shapes: {n_big:,} parameters + {n_head:,} in the MTP head "
      f"({n_head / n_big:.1%})")


# --8<-- [start:speedup]
def speedup(alpha, cost, guesses=1):
    """Tokens per second against greedy at acceptance rate alpha, when a speculative call (the
    verify step and its guesses) costs `cost` decode steps; guesses accepted alike."""
    tokens = sum(alpha**k for k in range(guesses + 1))     # 1 + α (+ α²)
    return tokens / cost
# --8<-- [end:speedup]


COSTS = (1.1, 1.4, 2.0)          # a speculative call against a decode step: cheap, middling, dear
print("speed against greedy with one guess, a call costing c decode steps:")
print(f"  {'α':>5}" + "".join(f"{f'c = {c}':>10}" for c in COSTS))
for a in (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
    print(f"  {a:5.1f}" + "".join(f"{speedup(a, c):>9.2f}×" for c in COSTS))
print("break-even: α = c - 1 = " + ", ".join(f"{c - 1:.1f}" for c in COSTS))


def draw(t):
    import matplotlib.pyplot as plt

    alphas = [i / 50 for i in range(51)]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for c, style in zip(COSTS, ("-", "--", ":")):
        ax.plot(alphas, [speedup(a, c) for a in alphas], linestyle=style,
                label=t(f"一次调用 = {c} 个解码步", f"a call costs {c} decode steps"))
    ax.axhline(1, color="grey", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_xlabel(t("接受率 α", "acceptance rate α"))
    ax.set_ylabel(t("相对贪心解码的速度", "speed against greedy decoding"))
    ax.set_title(t("猜 1 个：(1 + α) / c", "One guess: (1 + α) / c"), fontsize=10)
    ax.legend(loc="upper left", fontsize=9)
    return fig


save_figure("ch22_speedup", draw)
