"""Fine-tuning (chapter 20): LoRA as a module swap (a frozen weight plus a trainable low-rank
update), supervised fine-tuning on the answer tokens only, and the merged model saved in the
official checkpoint layout."""
# --8<-- [start:imports]
import json
import shutil
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from qwen.chat import chat_ids, plain_ids
from qwen.model import Qwen
from qwen.train import frozen_kind
from qwen.weights import SKIP, weight_files

# --8<-- [end:imports]


# --8<-- [start:linear]
class LoRALinear(nn.Module):
    """x @ W.T + (alpha / r) * x @ A.T @ B.T: W frozen, only A [r, in] and B [out, r] learn.
    B starts at zero, so a fresh LoRALinear computes exactly what the nn.Linear it replaces did."""

    def __init__(self, linear, r, alpha, generator=None):
        super().__init__()
        out_features, in_features = linear.weight.shape
        self.weight = linear.weight                           # the same tensor, frozen below
        self.weight.requires_grad_(False)
        self.scale = alpha / r
        # A random (its r rows read r directions of x), B zero: the update B @ A starts at 0.
        # Both in fp32 even when W is bf16: the optimizer's small steps would round away.
        device = self.weight.device
        a = torch.randn(r, in_features, generator=generator) / in_features**0.5
        self.A = nn.Parameter(a.to(device))                                 # [r, in]
        self.B = nn.Parameter(torch.zeros(out_features, r, device=device))  # [out, r]

    def forward(self, x):
        low_rank = F.linear(F.linear(x.to(self.A.dtype), self.A), self.B)  # [..., out]
        return F.linear(x, self.weight) + (self.scale * low_rank).to(x.dtype)

    def merged(self):
        """The nn.Linear with W + scale * B @ A: the same outputs, no extra matmul."""
        w = self.weight.float() + self.scale * (self.B @ self.A)
        linear = nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device)
        linear.weight = nn.Parameter(w.to(self.weight.dtype), requires_grad=False)
        return linear
# --8<-- [end:linear]


# --8<-- [start:add_lora]
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj",           # attention layers
           "in_proj_qkv", "in_proj_z", "out_proj",            # DeltaNet layers
           "gate_proj", "up_proj", "down_proj")               # every MLP


def add_lora(model, r=8, alpha=16, targets=TARGETS, seed=0):
    """Freeze every weight of `model`, then replace each nn.Linear named in `targets` by a
    LoRALinear of rank r. Returns the model; only the A and B matrices take gradients."""
    check_lora_args(model, r, alpha, targets)
    model.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)          # the same A on every run
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if name in targets and isinstance(child, nn.Linear):
                setattr(parent, name, LoRALinear(child, r, alpha, generator))
    return model


def merge_lora(model):
    """Fold every LoRALinear back into a plain nn.Linear (W + scale * B @ A), in place."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                setattr(parent, name, child.merged())
    return model
# --8<-- [end:add_lora]


def check_lora_args(model, r, alpha, targets):
    """Clear errors for a rank, a scale or a target list that would fail later or silently."""
    if isinstance(r, bool) or not isinstance(r, int) or r <= 0:
        raise ValueError(f"LoRA rank r must be a whole number >= 1, not {r!r} (8 or 16 are usual)")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ValueError(f"alpha must be a number > 0 (the update is scaled by alpha / r), "
                         f"not {alpha!r}")
    if isinstance(targets, str):
        raise TypeError(f"targets must be a list of projection names, not the string "
                        f"{targets!r}: write targets=[{targets!r}]")
    packed = [frozen_kind(m) for m in model.modules() if getattr(m, "inference_only", False)]
    if packed:
        raise ValueError(f"the model holds {packed[0]} modules, which have no backward: load it "
                         "with qwen.model.from_pretrained (no quantize) before add_lora")
    if any(isinstance(m, LoRALinear) for m in model.modules()):
        raise ValueError("the model already has LoRA modules: call merge_lora(model) first, "
                         "or start from a fresh model")
    linears = [(name.rsplit(".", 1)[-1], m.weight.shape) for name, m in model.named_modules()
               if isinstance(m, nn.Linear)]
    names = sorted({name for name, _ in linears})
    unknown = [t for t in targets if t not in names]
    if unknown or not targets:
        raise ValueError(f"unknown LoRA targets {unknown or targets!r}: name some of this "
                         f"model's projections, {names}")
    smallest = min(min(shape) for name, shape in linears if name in targets)
    if r > smallest:
        raise ValueError(f"rank r={r} is above {smallest}, the smallest dimension of a target: "
                         "that update is not low rank; choose a smaller r or other targets")


# --8<-- [start:sft]
def sft_example(tokenizer, user, assistant):
    """(ids, mask) for one supervised pair: the prompt of chapter 12's chat_prompt, then the
    answer and <|im_end|>. mask is True on the tokens the model must learn to write: the answer
    and the end of its turn, not the question and not the template's markup."""
    prompt = chat_ids(tokenizer, [{"role": "user", "content": user}])   # ... </think>\n\n
    answer = plain_ids(tokenizer, assistant.strip()) + [tokenizer.token_to_id("<|im_end|>")]
    return prompt + answer, [False] * len(prompt) + [True] * len(answer)


def sft_batch(examples, pad_id):
    """Pad (ids, mask) examples on the right to one length: ids [B, T], mask [B, T] with padding
    masked. Right padding leaves every real token's logits as they are: the model is causal."""
    longest = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), longest), pad_id)
    mask = torch.zeros(len(examples), longest, dtype=torch.bool)
    for i, (row, keep) in enumerate(examples):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = torch.tensor(keep)
    return ids, mask
# --8<-- [end:sft]


# --8<-- [start:save]
def save_pretrained(model, folder, like, dtype=None, overwrite=False):
    """Write `model` as a checkpoint folder in the official layout: its tensors named
    model.language_model.*, the vision tower and MTP head of the checkpoint `like` copied as
    they are, the config and tokenizer files of `like`. Written whole or not at all."""
    state = official_state(model, dtype)
    text_dtype = str(next(iter(state.values())).dtype).removeprefix("torch.")
    folder, like = Path(folder), Path(like)
    if folder.exists() and not overwrite:
        raise FileExistsError(f"{folder} exists: choose a new folder or pass overwrite=True")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        for file in weight_files(like):                       # what a text model does not hold
            with safe_open(file, framework="pt") as f:
                state.update({k: f.get_tensor(k) for k in f.keys() if k.startswith(SKIP)})
        name = "model.safetensors-00001-of-00001.safetensors"  # the official file's name
        save_file(state, tmp / name, metadata={"format": "pt"})
        size = sum(t.numel() * t.element_size() for t in state.values())
        index = {"metadata": {"total_size": size}, "weight_map": {k: name for k in sorted(state)}}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        config = json.loads((like / "config.json").read_text(encoding="utf-8"))
        for part in (config, config.get("text_config", {})):  # the dtype the tensors are in now
            if "dtype" in part:
                part["dtype"] = text_dtype
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for extra in TOKENIZER_FILES:
            if (like / extra).is_file():
                shutil.copyfile(like / extra, tmp / extra)
        replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "vocab.json", "merges.txt", "generation_config.json")
# --8<-- [end:save]


def official_state(model, dtype):
    """{official name: tensor} of a plain (merged) model; anything else is refused, named."""
    lora = [n for n, m in model.named_modules() if isinstance(m, LoRALinear)]
    if lora:
        raise ValueError(f"{len(lora)} LoRA modules are not merged (e.g. {lora[0]}): the "
                         "official layout has one weight per projection; call "
                         "merge_lora(model) before save_pretrained")
    with torch.device("meta"):
        names = set(Qwen(model.cfg).state_dict())             # what the clear model holds
    state = model.state_dict()
    if set(state) != names:
        odd = sorted(set(state) ^ names)[0]
        raise ValueError(f"{type(model).__name__} does not hold the clear model's tensors "
                         f"(e.g. {odd}): save a model built by qwen.model.from_pretrained")
    if model.cfg.tie_word_embeddings:
        state.pop("lm_head.weight")                           # the embedding, stored once
    return {"model.language_model." + k: (v if dtype is None else v.to(dtype)).contiguous()
            for k, v in state.items()}


def replace(tmp, folder):
    """Rename the finished `tmp` into place; an old `folder` is moved aside first, then deleted."""
    if folder.exists():
        aside = folder.with_name(f".{folder.name}-old")
        shutil.rmtree(aside, ignore_errors=True)
        folder.rename(aside)
        tmp.rename(folder)
        shutil.rmtree(aside)
    else:
        tmp.rename(folder)
