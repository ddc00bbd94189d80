"""Stage 3's model on an accelerator (CUDA, or Apple's MPS): the same steps, the same checks as on
the CPU. Where torch sees no such device (CI has none) every test here skips and says so; on a
machine with one, `pytest tests/test_device.py` runs them there.

fp32 on the device is held to the clear model on the CPU (1e-4, TF32 off: it rounds fp32 matmuls to
10 bits), and to transformers on the same device; bf16, int8 and int4 on the device to the bounds
tests/test_fast.py states on the CPU, next to the clear bf16 error measured on the device."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qwen import fast
from qwen.model import Qwen, from_pretrained
from qwen.quant import Int4Linear
from tests.reference import max_diff, our_model, reference_model
from tests.test_fast import decoded, save_checkpoint

ROOT = Path(__file__).resolve().parent.parent
DEVICES = [
    d
    for d, here in (("cuda", torch.cuda.is_available()), ("mps", torch.backends.mps.is_available()))
    if here
]
pytestmark = pytest.mark.skipif(
    not DEVICES,
    reason="no CUDA or MPS device is visible to torch here: these checks run where one is",
)


@pytest.fixture(scope="module", params=DEVICES or ["cuda"])
def device(request):
    if request.param == "cuda":
        matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        yield "cuda"
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    else:
        yield request.param


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(transformers' fp32 model, our clear fp32 model on the CPU, its checkpoint, token ids)."""
    ref = reference_model(seed=0, n_k_head=2, n_v_head=4)
    clear = our_model(ref)
    clear.hf_config = ref.config.to_dict()
    ids = torch.randint(0, 512, (2, 150), generator=torch.Generator().manual_seed(1))
    return ref, clear, save_checkpoint(clear, tmp_path_factory.mktemp("ckpt")), ids


@torch.no_grad()
def test_the_fast_model_on_the_device_keeps_the_clear_models_fp32_logits(pair, device):
    """Every step applied, on the device: a prompt of 150 tokens (3 chunks) and 20 decode steps
    after a prompt of 40 equal the clear model's on the CPU, and every tensor is on the device."""
    _, clear, folder, ids = pair
    model = fast.from_pretrained(folder, torch.float32, device)
    assert isinstance(model, Qwen)
    assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {device}
    max_diff(f"fast fp32 on {device}, prompt", model(ids.to(device)).cpu(), clear(ids), 1e-4)
    max_diff(
        f"fast fp32 on {device}, decode",
        decoded(model, ids.to(device)).cpu(),
        decoded(clear, ids),
        1e-4,
    )


@torch.no_grad()
def test_the_fast_model_on_the_device_equals_transformers_there(pair, device):
    ref, _, folder, ids = pair
    theirs = ref.to(device)(ids.to(device)).logits
    ref.to("cpu")
    ours = fast.from_pretrained(folder, torch.float32, device)(ids.to(device))
    max_diff(f"fast fp32 vs transformers on {device}", ours, theirs, 1e-4)


@torch.no_grad()
def test_the_device_chooses_bf16_activations_and_no_cpu_kernels(pair, device):
    _, _, folder, _ = pair
    model = fast.from_pretrained(folder, torch.bfloat16, device)
    assert model.steps["activations"].startswith("bf16"), model.steps["activations"]
    assert model.steps["packed weights"].startswith("plain"), model.steps["packed weights"]


@torch.no_grad()
def test_bf16_int8_and_int4_on_the_device_err_as_on_the_cpu(pair, device):
    """Against fp32 on the CPU, prompt and decode: fast bf16 within 1.5x the clear bf16 error
    on the device, int8 within 4x, int4 (CUDA's kernel) within 16x; greedy tokens mostly agree."""
    _, clear, folder, ids = pair
    ref = decoded(clear, ids)
    err = max_diff(
        f"clear bf16 on {device} vs fp32",
        decoded(from_pretrained(folder, torch.bfloat16, device), ids.to(device)).float().cpu(),
        ref,
        1.0,
    )
    kinds = [(None, 1.5), ("int8", 4)] + ([("int4", 16)] if device == "cuda" else [])
    for kind, times in kinds:
        m = fast.from_pretrained(folder, torch.bfloat16, device, quantize=kind)
        got = decoded(m, ids.to(device)).float().cpu()
        max_diff(
            f"fast {kind or 'bf16'} on {device} (clear bf16: {err:.3f})", got, ref, times * err
        )
        assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's int4 kernel needs a CUDA GPU")
def test_cuda_int4_kernel_equals_its_dequantized_weight():
    from qwen.quant import dequantize_int4, quantize_int4

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 256, generator=gen) * torch.logspace(-2, 0, 64)[:, None]
    q, s, z = quantize_int4(w)
    lin = Int4Linear(w.cuda())
    for x in (torch.randn(1, 256, generator=gen), torch.randn(40, 256, generator=gen)):
        ref = x @ dequantize_int4(q, s, z).T
        got = lin(x.cuda()).float().cpu()
        assert ((got - ref).norm() / ref.norm()) < 1e-2
    with pytest.raises(RuntimeError, match="packed for the cuda"):
        lin(torch.randn(1, 256))


def test_main_chats_on_the_device_with_the_fast_model(device):
    """scripts/main.py --device DEVICE answers on the tiny model (greedy, a few tokens)."""
    out = subprocess.run(
        [
            sys.executable,
            "scripts/main.py",
            "--tiny",
            "--device",
            device,
            "--prompt",
            "Hello",
            "--max-new-tokens",
            "4",
            "--temperature",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip(), out.stderr[-2000:]
