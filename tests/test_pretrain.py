"""Pretraining from scratch (chapter 21): a resumed run equals an uninterrupted one, the schedule's
shape, the bigram baseline, the small config, checkpoints that refuse what is not theirs, and the
long run's script in its smoke form."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qwen import pretrain as pt
from qwen.optim import lr_at
from qwen.weights import parameter_budget

ROOT = Path(__file__).resolve().parent.parent


def tiny_cfg(vocab=50, all_attention=False):
    return pt.small_config(vocab, layers=4, hidden=32, intermediate=48, all_attention=all_attention)


def toy_ids(n=3000, vocab=50, seed=0):
    """A text with structure to learn: runs of rising ids, restarted at random."""
    g = torch.Generator().manual_seed(seed)
    ids, x = [], 0
    for _ in range(n):
        x = (
            int(torch.randint(0, vocab, (1,), generator=g))
            if torch.rand(1, generator=g) < 0.2
            else (x + 1) % vocab
        )
        ids.append(x)
    return torch.tensor(ids)


def run(steps, tmp_path, stop_at=None, resume=False, cfg=None):
    torch.manual_seed(0)
    model = pt.new_model(cfg or tiny_cfg(), seed=1)
    h = pt.pretrain(
        model,
        toy_ids(),
        toy_ids(600, seed=1),
        steps,
        batch=4,
        length=16,
        lr=1e-2,
        eval_every=3,
        eval_windows=8,
        checkpoint=tmp_path / "run.pt",
        resume=resume,
        autocast=False,
        progress=False,
        stop_at=stop_at,
    )
    return model, h


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    torch.set_num_threads(1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole, h_whole = run(12, tmp_path / "a")
    _, h_first = run(12, tmp_path / "b", stop_at=6)
    assert len(h_first["loss"]) == 6
    resumed, h_resumed = run(12, tmp_path / "b", resume=True)
    assert h_resumed["loss"] == h_whole["loss"]  # exactly: the same sums in order
    assert h_resumed["val_loss"] == h_whole["val_loss"]
    assert h_resumed["grad_norm"] == h_whole["grad_norm"]
    for (k, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), k
    assert h_whole["loss"][-1] < h_whole["loss"][0] - 0.5  # and it learned something


def test_the_schedule_warms_up_then_decays_to_the_floor():
    lrs = [lr_at(s, 100, 1.0, 10, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # step 9: the peak
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.1)  # the floor, not 0
    assert lrs[10 + 45] == pytest.approx(0.55, abs=0.01)  # halfway down the cosine


def test_bigram_baseline_on_a_toy_text():
    ids = torch.tensor([0, 1, 0, 1, 0, 2])
    counts = pt.bigram_counts(ids, 3)
    assert counts.tolist() == [[0, 2, 1], [2, 0, 0], [0, 0, 0]]
    k = 0.5
    # p(1 | 0) = (2 + k) / (3 + 3k), p(0 | 1) = (2 + k) / (2 + 3k)
    want = -(math.log(2.5 / 4.5) + math.log(2.5 / 3.5)) / 2
    assert pt.bigram_loss(counts, torch.tensor([[0, 1, 0]]), k) == pytest.approx(want)
    best, losses = pt.bigram_baseline(toy_ids(), toy_ids(600, seed=1).view(-1, 20), 50)
    assert losses[best] == min(losses.values()) and 0 < best < 1
    with pytest.raises(ValueError, match="k > 0"):
        pt.bigram_loss(counts, torch.tensor([[0, 1]]), 0)


def test_the_small_config_is_the_real_layout_scaled_down():
    cfg = pt.small_config(4096)
    assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"] + [
        "linear_attention"
    ] * 3 + ["full_attention"]
    n = sum(p.numel() for p in pt.new_model(cfg).parameters())
    assert n == sum(parameter_budget(cfg).values()) and 5e6 < n < 30e6
    assert set(pt.small_config(4096, all_attention=True).layer_types) == {"full_attention"}


def test_weight_decay_only_on_matrices():
    model = pt.new_model(tiny_cfg())
    opt = pt.Optimizer(model, 1e-3, weight_decay=0.1)
    decayed, plain = opt.groups
    assert decayed.weight_decay == 0.1 and plain.weight_decay == 0.0
    assert all(p.ndim >= 2 for p in decayed.params) and all(p.ndim < 2 for p in plain.params)
    assert len(decayed.params) + len(plain.params) == len(list(model.parameters()))


def test_bad_checkpoints_and_batches_are_clear_errors(tmp_path):
    torch.set_num_threads(1)
    (tmp_path / "r").mkdir()
    run(6, tmp_path / "r", stop_at=3)
    ckpt = tmp_path / "r" / "run.pt"
    assert ckpt.is_file() and not list((tmp_path / "r").glob(".*tmp"))  # renamed, no temp left
    with pytest.raises(ValueError, match="another config"):
        run(6, tmp_path / "r", resume=True, cfg=tiny_cfg(all_attention=True))
    with pytest.raises(ValueError, match="other settings"):
        run(9, tmp_path / "r", resume=True)
    ckpt.write_bytes(ckpt.read_bytes()[:1000])  # cut short, as by a full disk
    with pytest.raises(ValueError, match="damaged"):
        run(6, tmp_path / "r", resume=True)
    with pytest.raises(ValueError, match="no checkpoint"):
        run(6, tmp_path / "missing", resume=True)
    with pytest.raises(ValueError, match="needs 512 tokens; the data has 100"):
        pt.Batches(torch.arange(100), 4, 128)
    with pytest.raises(ValueError, match="fewer than one window"):
        pt.pretrain(
            pt.new_model(tiny_cfg()),
            toy_ids(),
            toy_ids(10),
            2,
            batch=2,
            length=16,
            autocast=False,
            progress=False,
        )


def test_batches_visit_every_window_once_per_epoch():
    b = pt.Batches(torch.arange(40), batch=2, length=4, seed=3)
    seen = torch.cat([b.next() for _ in range(5)])
    assert sorted(seen[:, 0].tolist()) == list(range(0, 40, 4))
    assert b.epoch == 0 and b.next().shape == (2, 4) and b.epoch == 1


def test_the_smoke_run_prints_the_comparison_and_writes_nothing(tmp_path):
    before = sorted(p.name for p in (ROOT / "docs" / "outputs").glob("pretrain*"))
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run(
        [sys.executable, "scripts/pretrain.py", "--smoke", "--json", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "side by side" in proc.stdout and "bigram" in proc.stdout
    assert "tok/s" in proc.stderr and "tok/s" not in proc.stdout  # the bar: stderr only
    res = json.loads((tmp_path / "r.json").read_text())
    # threads sleep at a barrier instead of spinning (set before torch is imported), and the two
    # runs are one 3:1 block and its all-attention twin, with the same steps
    assert res["omp_wait_policy"] == "PASSIVE"
    hybrid, attn = res["runs"]
    assert hybrid["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert attn["layer_types"] == ["full_attention"] * 4
    steps = res["settings"]["steps"]
    assert len(hybrid["history"]["loss"]) == len(attn["history"]["loss"]) == steps
    assert sorted(p.name for p in (ROOT / "docs" / "outputs").glob("pretrain*")) == before
