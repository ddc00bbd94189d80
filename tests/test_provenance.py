"""Pages follow their outputs' provenance, numbers in prose are bound, and outputs render as
text."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from book import pages, prose

ROOT = Path(__file__).resolve().parent.parent
TINY_WORDS = re.compile(
    r"tiny test model|tiny model|微型测试模型|微型模型|random weights|随机权重|权重随机", re.I
)
EVIL = (
    'before\n```\n<script>alert(\'pwned\')</script>\n{{ value("ch02_embedding", "table_rows") }}\n'
    '--8<-- "README.md"\n~~~\nafter'
)


def build_copy(tmp_path, change_outputs):
    """Build the site from a copy of the repository whose outputs `change_outputs(outputs, docs)`
    has edited."""
    repo = tmp_path / "repo"
    shutil.copytree(
        ROOT,
        repo,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".cache", "site", "node_modules", "__pycache__", ".pytest_cache", "out"
        ),
    )
    change_outputs(repo / "docs" / "outputs", repo / "docs")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(site)],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "BOOK_EXECUTE_NOTEBOOKS": "false"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return site


def chapter_html(site):
    return {
        p: p.read_text()
        for p in sorted(site.rglob("index.html"))
        if re.search(r"/\d\d-[^/]+/index\.html$", p.as_posix())
    }


def visible(html):
    """The page's text a reader sees: no tags, no scripts, no search data."""
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def as_official(outputs, docs):
    """Every output relabelled as made with the official weights."""
    for path in outputs.glob("*.json"):
        p = json.loads(path.read_text())
        if p["model"] == "tiny test model":
            p.update(model="Qwen/Qwen3.5-0.8B", official=True)
            path.write_text(json.dumps(p))


def inject(outputs, docs):
    """Chapter 2's output and one of its values made of markup, a macro and a snippet line."""
    (outputs / "ch02_embedding.txt").write_text(EVIL + "\n")
    p = json.loads((outputs / "ch02_embedding.json").read_text())
    p["values"]["evil"] = '<img src=x onerror=alert(1)> *bold* {{ runs("ch01_weights") }} `tick`'
    (outputs / "ch02_embedding.json").write_text(json.dumps(p))
    for lang in ("zh", "en"):
        page = docs / lang / "02-embedding.md"
        page.write_text(
            page.read_text() + '\n\nEVIL-VALUE: {{ value("ch02_embedding", "evil") }} END\n'
        )


@pytest.fixture(scope="module")
def official_site(tmp_path_factory):
    """One build of a copy whose outputs are all relabelled official and whose chapter 2 output
    and value are hostile text: the two tests below read the one site (a build is a minute)."""

    def change(outputs, docs):
        as_official(outputs, docs)
        inject(outputs, docs)

    return build_copy(tmp_path_factory.mktemp("official"), change)


def tiny_blocks(page):
    """The text of every {{ tiny(...) }} block of a Markdown page: [(script, first words of
    prose)]."""
    blocks, current = [], None
    for line in page.read_text().split("\n"):
        m = pages.BLOCK.match(line)
        if m and m.group(1) == "tiny":
            current = [m.group(2).strip().strip("'\""), []]
        elif current and pages.END.match(line):
            blocks.append((current[0], " ".join(current[1])))
            current = None
        elif current:
            current[1].append(line)
    return blocks


def plain(markdown_text):
    """A short piece of a block's prose that survives rendering: words only, no markup, macros or
    math."""
    text = re.sub(
        r"\{\{.*?\}\}|\$.*?\$|`[^`]*`|\[|\]\([^)]*\)|[*_>#|]|^\s*[-\d.]+\s", " ", markdown_text
    )
    runs = [r.strip() for r in re.split(r"[^\w\s,'’，。、]+", text) if len(r.strip()) >= 12]
    return runs[0][:24] if runs else None


def test_with_official_outputs_no_page_says_tiny_model(official_site, monkeypatch):
    """Relabel every output official and build: no tiny-model warning or label anywhere, no
    {{ tiny }} block's prose, and no word of the tiny model in the parts that read the outputs
    (tooling text elsewhere, such as `--tiny`, may still name it)."""
    built = chapter_html(official_site)
    assert len(built) >= 24, sorted(built)
    monkeypatch.setattr(
        pages, "provenance", lambda name: {"model": "Qwen/Qwen3.5-0.8B", "official": True}
    )
    labels = [pages.TEXT[lang][k] for lang in ("zh", "en") for k in ("tiny_note", "tiny_figure")]
    problems = []
    for path, html in built.items():
        text = visible(re.sub(r"<pre.*?</pre>|<code.*?</code>", " ", html, flags=re.S))
        problems += [
            f"{path}: {label[:30]}…" for label in labels if label[:30].replace("**", "") in text
        ]
        problems += [f"{path}: tiny label" for _ in re.findall(r"tiny-label", html)]
    for md in prose.pages():
        rel = md.relative_to(ROOT / "docs")
        html = official_site / (rel.parts[0] == "en" and "en" or "") / rel.stem / "index.html"
        if not html.is_file():
            continue
        text = visible(html.read_text())
        for script, block in tiny_blocks(md):
            words = plain(block)
            if words and words in text:
                problems.append(f"{rel}: the tiny block of {script} is shown: {words!r}")
        lines = md.read_text().split("\n")
        first, last = prose.reading_part(lines)
        # as with official outputs
        official = "\n".join(pages.conditional_blocks(lines[first:last], _Page(rel)))
        for word in TINY_WORDS.findall(prose.prose(official)):
            problems.append(f"{rel}: {word!r} in the part that reads the output")
    assert not problems, "\n".join(problems)


class _Page:
    def __init__(self, rel):
        self.file = type("F", (), {"src_uri": rel.as_posix()})()


def test_with_tiny_outputs_pages_say_so(built_site):
    """The other way round, on the real outputs: every chapter with an output carries the tiny-model
    label."""
    for path, html in chapter_html(built_site).items():
        if "book-output" in html or "Provenance" in html or "来源" in html:
            assert TINY_WORDS.search(visible(html)), path


def test_outputs_and_values_render_as_text(official_site):
    """A printed output and a value are shown as text: no tag, macro or snippet line in them
    acts."""
    site = official_site
    for html in (site / "02-embedding" / "index.html", site / "en" / "02-embedding" / "index.html"):
        text = html.read_text()
        assert "<script>alert('pwned')</script>" not in text and "<img src=x" not in text
        assert "&lt;script&gt;alert(" in text  # shown, as text
        assert "after" in visible(text).split("pwned", 1)[1]  # the block did not end early
        assert "Two commands" not in text  # no README pulled in by the snippet line
        # not expanded
        assert 'value("ch02_embedding", "table_rows")' in visible(text).replace("&quot;", '"')
        shown = visible(text).split("EVIL-VALUE:", 1)[1].split("END", 1)[0]
        assert (
            "&lt;img src=x" in shown
            and "*bold*" in shown.replace("\\", "")
            and "<strong>" not in shown
        )
        assert "runs(" in shown.replace("&quot;", '"')  # the macro in a value stayed text


# --------------------------------------------------------------------------------- numbers in prose
def test_no_number_a_run_recorded_is_typed_in_the_prose():
    hits = {page.relative_to(ROOT).as_posix(): prose.typed_numbers(page) for page in prose.pages()}
    hits = {p: h for p, h in hits.items() if h}
    assert not hits, "\n".join(
        f"{p}: line {n}: {num} = {keys}" for p, h in hits.items() for n, num, keys in h
    )


def test_the_typed_number_check_catches_a_typed_value(tmp_path):
    page = tmp_path / "03-norm.md"
    text = (ROOT / "docs" / "en" / "03-norm.md").read_text()
    n_norms = json.loads((ROOT / "docs" / "outputs" / "ch03_norm.json").read_text())["values"][
        "n_norms"
    ]
    # the one that reads the output
    head, _, tail = text.rpartition('{{ value("ch03_norm", "n_norms") }}')
    page.write_text(head + str(n_norms) + tail + "\nThe largest difference was 8.29e-06.\n")
    found = {num for _, num, _ in prose.typed_numbers(page)}
    assert {str(n_norms), "8.29e-06"} <= found, found


# --------------------------------------------------------------------- words about measured numbers
def _values(name):
    return {
        k: float(str(v).rstrip("%").replace(",", ""))
        for k, v in pages.provenance(name)["values"].items()
        if re.fullmatch(r"-?[\d,]+(\.\d+)?%?", str(v))
    }


def _step_decodes(v, device):
    """Decode speeds of the steps' rows (those with a "did") in bench_steps_<device>."""
    keys = pages.provenance(f"bench_steps_{device}")["values"].keys()
    return [v[k] for k in v if k.endswith("_decode") and f"{k[: -len('_decode')]}_did" in keys]


def _clear_profile():
    """The timed profile of one clear decode step that bench_steps recorded (not a flat value)."""
    return next(
        r["profile"] for r in pages.provenance("bench_steps")["results"]["steps"] if "profile" in r
    )


# (what the pages say in words, which outputs it is about, a test of the recorded values). When a
# rerun breaks one, the sentence on the page is no longer true: change the page (both editions) with
# the numbers.
CLAIMS = [
    # the full run on the AVX2-only AMD EPYC (bench_08b), quoted in chapters 13, 15 and 16
    (
        "13: on the AVX2 EPYC the path that widened to fp32 prefilled faster than the clear bf16 "
        "model",
        "bench_08b",
        lambda v: v["prefill_128_fast"] > v["prefill_128_clear"],
    ),
    (
        "16: on the AVX2 EPYC int8 weights did not make decoding twice as fast as bf16",
        "bench_08b",
        lambda v: v["decode_128_int8"] < 2 * v["decode_128_fast"],
    ),
    (
        "16: on the AVX2 EPYC the int8 kernel read fewer bytes per second than a plain read",
        "bench_08b",
        lambda v: v["gemv_int8_GBps"] < v["read_GBps"],
    ),
    (
        "16: on the AVX2 EPYC w8a8 closed most of the gap between int8 and llama.cpp q8_0",
        "bench_08b",
        lambda v: (
            v["decode_128_w8a8"] - v["decode_128_int8"]
            > (v["decode_128_llama_q8_0"] - v["decode_128_int8"]) / 2
        ),
    ),
    (
        "15: over 8192 tokens the fused kernel is the slower of the two for one query",
        "bench_08b",
        lambda v: v["attn_8192_sdpa_ms"] > v["attn_8192_ours_ms"],
    ),
    (
        "15: over 2048 tokens the two attention kernels were close",
        "bench_08b",
        lambda v: 2 / 3 < v["attn_2048_sdpa_ms"] / v["attn_2048_ours_ms"] < 3 / 2,
    ),
    # the 0.8B config (ch13_measuring)
    (
        "16: the head is a third of 0.8B's weights",
        "ch13_measuring",
        lambda v: 30 <= v["head_share"] <= 37,
    ),
    (
        "16: the head in int8 saves about a sixth of a bf16 step's bytes, not a third",
        "ch13_measuring",
        lambda v: 100 / 7 < v["head_share"] / 2 < 100 / 5,
    ),
    # the accuracy and bytes of chapter 16's variants (ch16_int8)
    (
        "16: rounding the activations too costs more than the weights alone",
        "ch16_int8",
        lambda v: v["decode_err_w8a8"] > v["decode_err_int8_everywhere"],
    ),
    (
        "16: int4 reads fewer bytes than int8, int8 fewer than bf16, the int8 head alone fewer "
        "than bf16",
        "ch16_int8",
        lambda v: (
            v["bytes_int4_everywhere"]
            < v["bytes_int8_everywhere"]
            < v["bytes_int8_head_only"]
            < v["bytes_clear_bf16"]
        ),
    ),
    # the steps chain on the CPU it ran on (bench_steps)
    (
        "13: our clear model is about as fast as transformers",
        "bench_steps",
        lambda v: all(2 / 3 < v[f"clear_vs_hf_{k}"] < 3 / 2 for k in ("prefill", "decode")),
    ),
    (
        "13: a clear decode step's profile leads with the matrix products where torch has "
        "vectorized bf16 kernels (oneDNN's), with the depthwise conv where it has none",
        "bench_steps",
        lambda v: (
            _clear_profile()["ops"][0]["op"]
            in (
                ("aten::mm", "aten::addmm", "aten::linear")
                if pages.provenance("bench_steps")["cpu"]["onednn_bf16"]
                else ("aten::convolution",)
            )
            and _clear_profile()["ops"][0]["ms"] > _clear_profile()["ms_per_step"] / 3
        ),
    ),
    (
        "13/15: where the activations step chose fp32, it sped up decoding too (the conv became "
        "fp32) and the decode conv that follows bought little",
        "bench_steps",
        lambda v: (
            not pages.provenance("bench_steps")["values"]["activations_did"].startswith("fp32")
            or (v["activations_decode_x"] > 1.5 and v["decode_conv_decode_x"] < 1.25)
        ),
    ),
    (
        "16: torch's bf16 matrix-vector kernel read fewer bytes per second than a plain read",
        "bench_steps",
        lambda v: v["gemv_bf16_GBps"] < v["read_GBps"],
    ),
    (
        "16: torch's bf16 matrix-vector kernel is bound by its arithmetic: one thread reads far "
        "fewer bytes per second than two",
        "bench_steps",
        lambda v: v["gemv_bf16_1thread_GBps"] < 0.75 * v["gemv_bf16_GBps"],
    ),
    (
        "16: at 0.8x llama.cpp's bf16 speed a decode step would leave for everything but its "
        "products far less than ours spends on it (under half)",
        "bench_steps",
        lambda v: (
            v["fast_matmul_ms"] < v["fast_step_ms"]
            and v["fast_rest_budget_ms"] < 0.5 * v["fast_rest_ms"]
        ),
    ),
    (
        "16: int8's weight-only products alone are slower than llama.cpp's whole q8_0 step",
        "bench_steps",
        lambda v: v["int8_matmul_vs_llama_q8_0"] < 1,
    ),
    (
        "16: w8a8's products alone outrun llama.cpp's whole q8_0 step, and the rest of its step "
        "takes longer than q8_0's speed would leave",
        "bench_steps",
        lambda v: (
            v["w8a8_matmul_vs_llama_q8_0"] > 1 and v["w8a8_rest_ms"] > v["w8a8_rest_budget_ms"]
        ),
    ),
    (
        "16: torch's int4 kernel reads far below the memory's bandwidth (under half), and int4's "
        "products alone are slower than llama.cpp's whole q4_0 step",
        "bench_steps",
        lambda v: v["gemv_int4_GBps"] < 0.5 * v["read_GBps"] and v["int4_matmul_vs_llama_q4_0"] < 1,
    ),
    (
        "15: where the weight-first step put the weight first, prompts got faster (over 1.1x) and "
        "decoding stayed about the same",
        "bench_steps",
        lambda v: (
            not pages.provenance("bench_steps")["values"]["weight_first_prompts_did"].startswith(
                "weight first"
            )
            or (
                v["weight_first_prompts_prefill_x"] > 1.1
                and 0.8 < v["weight_first_prompts_decode_x"] < 1.25
            )
        ),
    ),
    # the steps chain on a GPU (bench_steps_cuda), chapter 15's "On a GPU"
    (
        "15: on the GPU the eager rows decode at about the same speed (bound by calls, not bytes)",
        "bench_steps_cuda",
        lambda v: max(_step_decodes(v, "cuda")) < 1.5 * min(_step_decodes(v, "cuda")),
    ),
    (
        "15: on the GPU torch.compile, which removes calls, pays several times over eager decode",
        "bench_steps_cuda",
        lambda v: v["compiled_x_eager"] > 2,
    ),
    (
        "15: on the GPU transformers without its optional kernels decodes slower than our models",
        "bench_steps_cuda",
        lambda v: v["hf_decode"] < v["clear_decode"] and v["hf_decode"] < v["fast_decode"],
    ),
    (
        "14: once loaded, the mapped model runs about as fast as the clear one (a ratio near 1)",
        "bench_steps",
        lambda v: all(0.8 < v[f"mapped_load_{k}_x"] < 1.25 for k in ("prefill", "decode")),
    ),  # chapter 22's trained head on chapter 21's model (mtp_train)
    (
        "22: the head is accepted in decoding more often than it guesses the text's token",
        "mtp_train",
        lambda v: v["acceptance"] > v["val_acc"],
    ),
    (
        "22: speculation does not pay on the small model, on 1 thread or 2, and breaks even only "
        "above the acceptance it reaches",
        "mtp_train",
        lambda v: v["speedup_1"] < 1 and v["speedup_2"] < 1 and v["breakeven_1"] > v["alpha"],
    ),
    (
        "22: a 2-token step of the small model costs well over a 1-token step (over 1.3x), at the "
        "0.8B shapes nearly the same (under 1.15x)",
        "mtp_train",
        lambda v: v["x_c2_keep_1"] > 1.3 and v["c_08b"] < 1.15,
    ),
    (
        "22: one thread decodes the small model faster than two",
        "mtp_train",
        lambda v: v["greedy_tok_s_1"] > v["greedy_tok_s_2"],
    ),
]


@pytest.mark.parametrize("claim, output, holds", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_what_the_pages_say_about_measured_numbers_holds_for_them(claim, output, holds):
    assert holds(_values(output)), f"{claim}: not so in docs/outputs/{output}.json"
