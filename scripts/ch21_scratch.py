"""Chapter 21: a small Qwen3.5 from scratch. The config and its parameters, a tokenizer trained on
a slice of the prose, the schedule, a few deterministic training steps of a tiny version, a resume
that equals the run it interrupts, and the bigram baseline. The long run's numbers are
scripts/pretrain.py's (docs/outputs/pretrain.json)."""
import math
import tempfile
from pathlib import Path

import torch

from book.corpus import english_prose
from book.out import record
from qwen import pretrain as pt
from qwen.optim import lr_at
from qwen.weights import parameter_budget

torch.manual_seed(0)

# --8<-- [start:config]
cfg = pt.small_config(2048, layers=4)               # the book's run: one 3:1 block, 2,048 tokens
print("layers:", " ".join("D" if t == "linear_attention" else "A" for t in cfg.layer_types))
budget = parameter_budget(cfg)
for part, n in budget.items():
    print(f"  {part:18}{n:>11,}")
total = sum(budget.values())
model = pt.new_model(cfg)
assert total == sum(p.numel() for p in model.parameters())     # the budget is the model's
all_attn = sum(parameter_budget(pt.small_config(2048, layers=4, all_attention=True)).values())
print(f"  {'total':18}{total:>11,}   (every layer attention: {all_attn:,})")
# --8<-- [end:config]
record(params=f"{total:,}", params_all_attention=f"{all_attn:,}",
       params_mlp=f"{budget['MLPs']:,}", params_embedding=f"{budget['embedding']:,}",
       mlp_share=f"{budget['MLPs'] / total:.0%}",
       embedding_share=f"{budget['embedding'] / total:.0%}")

# --8<-- [start:tokenizer]
# every 10th document is validation (book/corpus.py reads the texts; the library is given them)
train_docs, val_docs = pt.split_documents(english_prose())
text = train_docs[0][:60_000] + train_docs[1][:60_000]   # a slice of the training split
tok = pt.train_tokenizer([text], 512)
sentence = "The Congress shall have power to lay and collect taxes."
pieces = tok.encode(sentence).tokens
print(f"\n{len(train_docs)} training documents, {len(val_docs)} validation")
print(f"vocabulary {tok.get_vocab_size()}: {len(sentence)} characters -> {len(pieces)} tokens")
print(" | ".join(p.replace("Ġ", "␣") for p in pieces))
# --8<-- [end:tokenizer]
record(train_docs=len(train_docs), val_docs=len(val_docs), slice_tokens=len(pieces))

# --8<-- [start:schedule]
steps, peak, warmup = 100, 3e-3, 5
for s in (0, 1, 4, 5, 50, 99):
    print(f"step {s:3}: lr {lr_at(s, steps, peak, warmup):.2e}")
# --8<-- [end:schedule]

# --8<-- [start:steps]
train = pt.encode_all(tok, [text])
val = pt.encode_all(tok, [val_docs[0][:30_000]])
tiny = pt.small_config(tok.get_vocab_size(), layers=4, hidden=64, intermediate=128)
torch.set_num_threads(1)


def run(folder, stop_at=None, resume=False):
    model = pt.new_model(tiny, seed=0)
    return pt.pretrain(model, train, val, steps=24, batch=4, length=64, lr=3e-3, eval_every=8,
                       eval_windows=16, checkpoint=Path(folder) / "ckpt.pt", resume=resume,
                       autocast=False, progress=False, stop_at=stop_at)


with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
    whole = run(a)
    run(b, stop_at=12)                              # interrupted after 12 steps ...
    resumed = run(b, resume=True)                   # ... and continued from its checkpoint
for st, v in zip(whole["val_step"], whole["val_loss"]):
    i = st - 1
    print(f"step {st:2}  train {whole['loss'][i]:.3f}  val {v:.3f}  "
          f"grad norm {whole['grad_norm'][i]:.2f}  lr {whole['lr'][i]:.2e}")
print("resumed run equals the uninterrupted one:", resumed["loss"] == whole["loss"])
# --8<-- [end:steps]
record(tiny_first_loss=f"{whole['loss'][0]:.3f}", tiny_last_val=f"{whole['val_loss'][-1]:.3f}",
       uniform_loss=f"{math.log(tok.get_vocab_size()):.3f}", tiny_vocab=tok.get_vocab_size())

# --8<-- [start:bigram]
windows = val[: len(val) // 64 * 64].view(-1, 64)
k, losses = pt.bigram_baseline(train, windows, tok.get_vocab_size())
for kk, loss in losses.items():
    print(f"bigram, k = {kk:<6g} val loss {loss:.3f}  perplexity {math.exp(loss):8.1f}"
          + ("   <- best" if kk == k else ""))
# --8<-- [end:bigram]
record(slice_bigram_k=f"{k:g}", slice_bigram_ppl=f"{math.exp(losses[k]):.1f}")
