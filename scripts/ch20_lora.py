"""Chapter 20: fine-tuning. LoRA on every projection, supervised fine-tuning on real chat pairs
(English and Chinese) with the loss on the answer tokens only, then the update merged back and the
model saved in the official checkpoint layout."""
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book import sft_data
from book.out import record, record_error, record_measured
from book.tiny import is_tiny
from qwen.chat import chat_ids
from qwen.generate import generate
from qwen.lora import add_lora, merge_lora, save_pretrained, sft_batch, sft_example
from qwen.model import Qwen, from_pretrained
from qwen.optim import AdamW, clip_grad_norm, lr_at
from qwen.train import next_token_loss
from qwen.weights import Config, find_model

torch.manual_seed(0)
path = find_model()
tiny = is_tiny(path)
if tiny:
    print("(the tiny test model: random weights; what matters is that the loss falls, what is "
          "trained and what is saved)\n")
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
PAD = tok.token_to_id("<|endoftext|>")

data = sft_data.load()
print(f"data: {sft_data.credit()}")
for split, rows in data.items():
    langs = {lang: sum(r[2] == lang for r in rows) for lang in sft_data.LANGUAGES}
    print(f"  {split:9} {len(rows):5} pairs  " + ", ".join(f"{n} {k}" for k, n in langs.items()))

# --8<-- [start:mask]
question, answer, _ = data["train"][0]
ids, mask = sft_example(tok, question, answer)
print(f"\none pair as {len(ids)} tokens; [brackets] = the answer tokens the loss scores:")
print("  " + "".join(f"[{tok.decode([i], skip_special_tokens=False)}]" if m else
                     tok.decode([i], skip_special_tokens=False) for i, m in zip(ids, mask))
      .replace("\n", "\\n"))
# --8<-- [end:mask]

LONGEST = 48                                       # tokens; 9 pairs in 10 are shorter
train = [e for e in (sft_example(tok, q, a) for q, a, _ in data["train"]) if len(e[0]) <= LONGEST]
held = [e for e in (sft_example(tok, q, a) for q, a, _ in data["held_out"])
        if len(e[0]) <= LONGEST][:16]

# --8<-- [start:lora]
model = from_pretrained(path, torch.float32)
probe = sft_batch(held[:8], PAD)[0]               # 8 held-out pairs, to compare logits on
with torch.no_grad():
    before = model(probe)
# a held-out question in each language, answered greedily before and after (the real model only:
# random weights answer noise, and their argmax over near-equal logits moves from CPU to CPU)
asked = [next(q for q, _, lang in data["held_out"] if lang == want)
         for want in sft_data.LANGUAGES]


@torch.no_grad()
def answer(question):
    prompt = chat_ids(tok, [{"role": "user", "content": question}])
    return tok.decode(list(generate(model, prompt, 40))).strip()


answers = {} if tiny else {q: answer(q) for q in asked}
add_lora(model, r=8, alpha=16)                    # every projection; all else frozen
lora = [p for p in model.parameters() if p.requires_grad]
n_lora, n_all = sum(p.numel() for p in lora), sum(p.numel() for p in model.parameters())
print(f"\nLoRA r=8 on every projection: {n_lora:,} trainable parameters of {n_all:,} "
      f"({n_lora / n_all:.3%})")
with torch.device("meta"):                        # 0.8B's shapes, from its config: no memory
    big = Qwen(Config.load(Path("book/data/qwen3.5-0.8b")))
big_all = sum(p.numel() for p in big.parameters())
q_out, q_in = big.layers[3].self_attn.q_proj.weight.shape    # layer 3: attention
big_lora = sum(p.numel() for p in add_lora(big, r=8, alpha=16).parameters() if p.requires_grad)
print(f"the same on Qwen3.5-0.8B's shapes: {big_lora:,} of {big_all:,} ({big_lora / big_all:.3%})")
print(f"  its q_proj [{q_out}, {q_in}]: {8 * (q_in + q_out):,} LoRA parameters "
      f"instead of {q_in * q_out:,}")
with torch.no_grad():
    same = (model(probe) - before).abs().max().item()
print(f"a fresh LoRA model against the base model, largest logit difference: {same}")
# --8<-- [end:lora]


# --8<-- [start:train]
STEPS, BATCH = 24, 4
PEAK = 3e-2 if tiny else 1e-3                      # random weights need large steps to move
order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))


def loss_on(examples):
    ids, mask = sft_batch(examples, PAD)
    return next_token_loss(model(ids), ids, mask)      # the answer tokens only


@torch.no_grad()
def held_out_loss():
    return sum(loss_on(held[i:i + 8]).item() for i in range(0, len(held), 8)) / (len(held) // 8)


opt = AdamW(lora, lr=PEAK, weight_decay=0.0)
print(f"\n{'step':>5}{'train loss':>12}{'held-out loss':>15}")
losses, curve = [], [(0, None, held_out_loss())]


def shown(key, loss):
    # fp32, but random weights amplify each CPU's rounding, and 24 optimizer steps carry it on:
    # SSE-only kernels move a loss by 2%; a reader sees it fall either way
    return record_measured(key, f"{loss:.1f}", rel=0.1)  # SSE-only or AVX2 kernels: 5% apart


print(f"{0:>5}{'':>12}{shown('held_0', curve[0][2]):>15}")
for step in range(STEPS):
    picked = order[step * BATCH:(step + 1) * BATCH].tolist()
    loss = loss_on([train[i] for i in picked])
    loss.backward()
    clip_grad_norm(lora, 1.0)
    opt.lr = lr_at(step, STEPS, PEAK, warmup=5)
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
    if (step + 1) % 8 == 0:
        curve.append((step + 1, sum(losses[-8:]) / 8, held_out_loss()))
        print(f"{step + 1:>5}{shown(f'train_{step + 1}', curve[-1][1]):>12}"
              f"{shown(f'held_{step + 1}', curve[-1][2]):>15}")
# --8<-- [end:train]

# --8<-- [start:merge]
with torch.no_grad():
    unmerged = model(probe)
    merge_lora(model)
    merged = model(probe)
rel = (merged - unmerged).abs().max() / unmerged.abs().max()
print(f"\nmerged into the weights: largest logit difference to the LoRA model, relative to "
      f"the largest logit: {record_error('merge_rel', rel, below=1e-3)}")
with tempfile.TemporaryDirectory() as tmp:
    folder = save_pretrained(model, f"{tmp}/merged", like=path)
    print("saved in the official layout:", ", ".join(sorted(f.name for f in folder.iterdir())))
    with torch.no_grad():
        again = from_pretrained(folder, torch.float32)(probe)
    print(f"loaded back: largest logit difference {(again - merged).abs().max().item()}")
# --8<-- [end:merge]

for q, said in answers.items():
    print(f"\nuser: {q}\n  before: {said}\n  after:  {answer(q)}")

record(lora_params=f"{n_lora:,}", all_params=f"{n_all:,}", lora_share=f"{n_lora / n_all:.3%}",
       big_lora=f"{big_lora:,}", big_all=f"{big_all:,}", big_share=f"{big_lora / big_all:.2%}",
       q_out=q_out, q_in=q_in, q_lora=f"{8 * (q_in + q_out):,}", q_full=f"{q_in * q_out:,}",
       steps=STEPS, batch=BATCH, longest=LONGEST, peak_lr=f"{PEAK:g}",
       n_train=f"{len(data['train']):,}", n_held_out=f"{len(data['held_out']):,}",
       n_held_used=len(held), licence=sft_data.licence())
