"""book/zygote.py: a forked copy runs a script as a fresh `python script.py` would."""

import subprocess
import sys
import textwrap
import time

import pytest

from book import regen, zygote

pytestmark = pytest.mark.skipif(not zygote.available(), reason="the zygote needs fork (Linux)")


@pytest.fixture(scope="module")
def z():
    started = zygote.Zygote(regen.script_env(), cwd=regen.ROOT)
    yield started
    started.close()


def script(tmp_path, body, name="s.py"):
    path = tmp_path / "folder" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


def test_the_script_sees_what_a_fresh_python_would(z, tmp_path):
    path = script(
        tmp_path,
        """
        import os, sys
        print(__name__, sys.argv == [__file__], sys.path[0] == os.path.dirname(__file__))
        print(os.getcwd(), os.environ.get("ONLY_HERE"), "MPLBACKEND" in os.environ)
        print("to stderr", file=sys.stderr)
        """,
    )
    env = {**regen.script_env(), "ONLY_HERE": "yes"}
    del env["MPLBACKEND"]  # the zygote's environment has it; this script's does not
    proc = z.run(path, env, 30, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().split("\n")[:2] == ["__main__ True True", f"{tmp_path} yes False"]
    assert proc.stderr.decode() == "to stderr\n"


@pytest.mark.parametrize(
    "body, code, err",
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit('no weights here')", 1, "no weights here"),
        ("raise ValueError('bad input')", 1, "ValueError: bad input"),
        ("print('half', end='')", 0, ""),
    ],
)
def test_exit_codes_and_tracebacks_are_a_fresh_pythons(z, tmp_path, body, code, err):
    path = script(tmp_path, body)
    fresh = subprocess.run([sys.executable, str(path)], capture_output=True, env=regen.script_env())
    proc = z.run(path, regen.script_env(), 30, tmp_path)
    assert proc.returncode == fresh.returncode == code
    assert err in proc.stderr.decode() and err in fresh.stderr.decode()
    assert proc.stdout == fresh.stdout


def test_a_script_can_start_and_wait_for_its_own_processes(z, tmp_path):
    path = script(
        tmp_path,
        "import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'print(7)'], "
        "capture_output=True, text=True).stdout.strip())",
    )
    proc = z.run(path, regen.script_env(), 30, tmp_path)
    assert (proc.returncode, proc.stdout.decode().strip()) == (0, "7"), proc.stderr


def test_a_timeout_kills_the_script_and_what_it_started(z, tmp_path):
    pidfile = tmp_path / "child.pid"
    path = script(
        tmp_path,
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(60)
        """,
    )
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        z.run(path, regen.script_env(), 2, tmp_path)
    assert time.monotonic() - start < 10
    child = int(pidfile.read_text())
    for _ in range(100):  # killed with its group; gone once its parent (init) has reaped it
        if not zygote.alive(child) or _zombie(child):
            break
        time.sleep(0.05)
    assert not zygote.alive(child) or _zombie(child)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_chapter_script_prints_the_same_from_the_zygote(z, monkeypatch):
    """ch02's output and provenance values, from a forked copy and from a fresh Python."""
    model = regen.choose_model()
    forked, p1 = regen.run_script("ch02_embedding", model, 120, z)
    fresh, p2 = regen.run_script("ch02_embedding", model, 120)
    assert forked == fresh
    assert p1["values"] == p2["values"] and p1["figure_data"] == p2["figure_data"]
