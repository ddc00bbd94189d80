"""scripts/main.py: a one-shot answer on the tiny model, the interactive commands, Ctrl-C, and clear errors."""
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
MAIN = ROOT / "scripts" / "main.py"
GREEDY = ["--tiny", "--temperature", "0", "--dtype", "fp32"]


def run(*args, stdin=None, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, str(MAIN), *args], input=stdin, capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def main():
    spec = importlib.util.spec_from_file_location("chat_main", MAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_one_shot_prompt_prints_the_greedy_answer_and_speeds(tokenizer_json):
    from tokenizers import Tokenizer
    from book.tiny import path
    from qwen.chat import chat_prompt
    from qwen.generate import generate
    from qwen.model import from_pretrained

    r = run("--prompt", "今天天气怎么样？", "--max-new-tokens", "12", *GREEDY)
    assert r.returncode == 0, r.stderr
    tok = Tokenizer.from_file(str(tokenizer_json))
    ids = tok.encode(chat_prompt([{"role": "user", "content": "今天天气怎么样？"}])).ids
    expected = tok.decode(list(generate(from_pretrained(path()), ids, 12)))
    assert r.stdout == expected + "\n"
    assert "random" in r.stderr and "prefill" in r.stderr and "tok/s" in r.stderr
    assert "Traceback" not in r.stderr


def test_interactive_commands_and_ctrl_d():
    r = run(*GREEDY, "--max-new-tokens", "4", stdin="/think\nhello\n/reset\n/nonsense\n\nagain\n")
    assert r.returncode == 0, r.stderr
    for said in ("thinking on", "conversation cleared", "unknown command /nonsense"):
        assert said in r.stdout
    assert r.stderr.count("decode 3 tokens") == 2                    # two answers, four tokens each


def test_ctrl_c_stops_the_answer_not_the_program():
    p = subprocess.Popen([sys.executable, str(MAIN), *GREEDY, "--max-new-tokens", "100000"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    reader = threading.Thread(target=lambda: out.extend(iter(lambda: p.stdout.read(1), "")), daemon=True)
    reader.start()
    p.stdin.write("hello\n")
    p.stdin.flush()
    deadline = time.time() + 120
    while "> " not in "".join(out) or len("".join(out).split("> ", 1)[1]) < 3:   # the answer has begun
        assert time.time() < deadline and p.poll() is None, "".join(out)
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    p.stdin.write("/exit\n")
    p.stdin.flush()
    assert p.wait(timeout=120) == 0
    reader.join(timeout=10)
    assert "[stopped]" in "".join(out)
    assert "Traceback" not in p.stderr.read()


@pytest.mark.parametrize("args,message", [
    (["--prompt", "  "], "the prompt is empty"),
    (["--prompt", "hello there, how are you", "--context", "8"], "the context holds 8"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "at least 1"),
])
def test_bad_input_is_one_clear_message(main, capsys, args, message):
    assert main([*args, "--tiny"]) == 1
    err = capsys.readouterr().err
    assert message in err and "\nerror: " in "\n" + err


def test_unknown_device_is_refused(main, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--tiny", "--device", "tpu", "--prompt", "hi"])
    assert e.value.code == 2 and "invalid choice: 'tpu'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_cuda_is_explained(main, capsys):
    assert main(["--tiny", "--device", "cuda", "--prompt", "hi"]) == 1
    assert "no CUDA GPU" in capsys.readouterr().err


def test_without_weights_it_says_how_to_get_them(tmp_path):
    empty = {"QWEN_MODEL": "", "HF_HOME": str(tmp_path), "HF_HUB_CACHE": "", "MODELSCOPE_CACHE": str(tmp_path)}
    r = run("--prompt", "hi", env=empty, cwd=tmp_path)
    assert r.returncode == 1
    assert "hf download Qwen/Qwen3.5-0.8B" in r.stderr and "--tiny" in r.stderr
    assert "Traceback" not in r.stderr
