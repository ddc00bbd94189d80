"""The book's machinery: the tiny test model, output regeneration, and executed code blocks."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from book import regen, tiny

ROOT = Path(__file__).resolve().parent.parent


def test_tiny_model_builds_byte_for_byte_the_same(tmp_path, tiny_model):
    tiny.build(tmp_path)
    for f in ("config.json", tiny.WEIGHTS_FILE, "model.safetensors.index.json", "tokenizer.json"):
        assert (tmp_path / f).read_bytes() == (tiny_model / f).read_bytes(), f


def test_tiny_model_is_the_books_whatever_kernels_the_process_runs(tmp_path):
    """The committed outputs were made with one tiny model: drawn with ATen's scalar kernels
    (ATEN_CPU_CAPABILITY=default, as the limited-kernel checks run) its weights are the same."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    code = f"from book import tiny; tiny.build({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)
    sha = tiny._sha256(tmp_path / tiny.WEIGHTS_FILE)
    book = json.loads((ROOT / "docs" / "outputs" / "ch01_weights.json").read_text())
    assert sha == book["weights_sha256"]


def test_tiny_model_is_in_the_official_layout(tiny_model):
    transformers = pytest.importorskip("transformers")
    cfg = json.loads((tiny_model / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"] and "text_config" in cfg
    assert set(cfg["text_config"]["layer_types"]) == {"linear_attention", "full_attention"}
    assert cfg["text_config"]["vocab_size"] == 248320
    model, info = transformers.Qwen3_5ForCausalLM.from_pretrained(
        tiny_model, output_loading_info=True
    )
    # every tensor transformers wants is there
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"]


def _fake_repo(tmp_path, monkeypatch, scripts):
    for name, body in scripts.items():
        (tmp_path / "scripts").mkdir(exist_ok=True)
        (tmp_path / "scripts" / f"{name}.py").write_text(body)
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "SCRIPTS", tmp_path / "scripts")
    monkeypatch.setattr(regen, "OUTPUTS", tmp_path / "docs" / "outputs")
    monkeypatch.setattr(regen, "EXTRA", {})
    return tmp_path / "docs"


GOOD = """
from book.out import record, save_figure
print("hello", 6 * 7)
record(answer=42)
def draw(t):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(); ax.plot([1, 2, 3]); ax.set_title(t("标题", "title")); return fig
save_figure("ch98_fig", draw)
"""


def test_regen_writes_outputs_with_provenance_and_is_idempotent(tmp_path, monkeypatch, capsys):
    docs = _fake_repo(tmp_path, monkeypatch, {"ch98_good": GOOD})
    assert regen.main([]) == 0
    assert (docs / "outputs/ch98_good.txt").read_text() == "hello 42\n"
    prov = json.loads((docs / "outputs/ch98_good.json").read_text())
    assert (
        prov["model"] == regen.TINY
        and prov["values"] == {"answer": 42}
        and prov["figures"] == ["ch98_fig"]
    )
    assert {"torch", "device", "dtype", "seconds", "weights_sha256"} <= prov.keys()
    before = {p: p.read_bytes() for p in docs.rglob("*") if p.is_file()}
    assert {p.name for p in before} >= {"ch98_fig_zh.svg", "ch98_fig_en.svg"}
    assert regen.main([]) == 0  # twice: no file changes
    assert {p: p.read_bytes() for p in docs.rglob("*") if p.is_file()} == before
    assert regen.main(["--check"]) == 0


def test_regen_check_fails_on_a_difference_and_writes_nothing(tmp_path, monkeypatch):
    docs = _fake_repo(tmp_path, monkeypatch, {"ch98_good": GOOD})
    assert regen.main([]) == 0
    out = docs / "outputs/ch98_good.txt"
    out.write_text("edited by hand\n")
    assert regen.main(["--check"]) == 1
    assert out.read_text() == "edited by hand\n"


def test_regen_failing_script_leaves_old_files(tmp_path, monkeypatch, capsys):
    docs = _fake_repo(tmp_path, monkeypatch, {"ch98_good": GOOD})
    assert regen.main([]) == 0
    before = {p: p.read_bytes() for p in docs.rglob("*") if p.is_file()}
    (tmp_path / "scripts/ch98_good.py").write_text(
        "print('half an output')\nraise SystemExit('boom')\n"
    )
    assert regen.main([]) == 1
    assert "ch98_good.py failed" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in docs.rglob("*") if p.is_file()} == before


def test_regen_rejects_unknown_scripts(tmp_path, monkeypatch):
    _fake_repo(tmp_path, monkeypatch, {"ch98_good": GOOD})
    with pytest.raises(SystemExit, match="no such chapter script: ch99_nope"):
        regen.main(["ch99_nope"])


def test_committed_outputs_are_current():
    """`python -m book.regen --check`: every chapter script reproduces its committed output and
    figures."""
    proc = subprocess.run(
        [sys.executable, "-m", "book.regen", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_every_code_block_runs():
    """Every ```python and ```bash block of both editions, snippets expanded, runs (or says why it
    is skipped)."""
    proc = subprocess.run(
        [sys.executable, "-m", "book.codeblocks", "-rs"], cwd=ROOT, capture_output=True, text=True
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    ran = int(re.search(r"(\d+) passed", summary).group(1))
    skipped = re.search(r"(\d+) skipped", summary)
    print(f"code blocks: {ran} ran, {skipped.group(1) if skipped else 0} skipped")
    assert ran > 0
    for line in proc.stdout.splitlines():  # a skip must carry its reason
        if line.startswith("SKIPPED"):
            assert re.search(r": \S", line.split(".md", 1)[-1]), line
