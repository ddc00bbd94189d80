"""Start chapter scripts without paying for `import torch` each time: a process that has imported
the heavy libraries once forks a copy of itself for each script (as Android's zygote starts apps).

    z = Zygote(env)                      # env: what every script shares (threads, PYTHONPATH, ...)
    proc = z.run("scripts/ch02_embedding.py", {"BOOK_OUT": ...}, timeout=600, cwd=ROOT)
    z.close()

`run` returns what `subprocess.run([sys.executable, script], capture_output=True)` would, and the
script sees what it would see started that way: `__main__`, its argv, its folder first on sys.path,
the environment, the working folder, output to files. What it shares with its siblings is only the
modules imported before the fork (PRELOAD, third-party libraries that read no per-script variable at
import); the book's and the model's own modules are imported fresh by each script. About 3 s of CPU
a script on a 2-core machine: regen runs 38 of them in each `--check`.

Each copy runs in a process group of its own (killed whole at its end, on a timeout, or when the
zygote or regen dies), like book.regen.run_group. Where fork is not available, `available()` is
False and regen starts a fresh Python per script.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

PRELOAD = ("torch", "numpy", "safetensors.torch", "tokenizers", "PIL.Image", "matplotlib.pyplot")


def available():
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def die_with_parent():
    """In a child, before it runs anything: ask Linux for SIGKILL when its parent dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the process-group kills remain
        pass


class Zygote:
    """The regen side: starts the zygote with `env`, asks it for one process per script."""

    def __init__(self, env, cwd=None):
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "book.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=cwd,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        ready = self.proc.stdout.readline()
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the zygote did not start: {ready!r}")

    def start(self, script, env, cwd, out, err, status):
        """Fork one copy that runs `script`; its pid (also its process group)."""
        request = {"script": str(script), "env": env, "cwd": str(cwd)}
        request.update(out=str(out), err=str(err), status=str(status))
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        if not reply.strip().isdigit():
            raise RuntimeError(f"the zygote could not start {script}: {reply!r}")
        return int(reply)

    def run(self, script, env, timeout, cwd, on_start=None, on_end=None):
        """Run script in a forked copy; a CompletedProcess (stdout, stderr as bytes).
        subprocess.TimeoutExpired after `timeout` seconds (the copy and its group killed)."""
        with tempfile.TemporaryDirectory(prefix="zygote-") as tmp:
            out, err, status = (os.path.join(tmp, n) for n in ("out", "err", "status"))
            pid = self.start(script, env, cwd, out, err, status)
            if on_start:
                on_start(pid)
            deadline = time.monotonic() + timeout
            try:
                while alive(pid):
                    if time.monotonic() > deadline:
                        raise subprocess.TimeoutExpired([script], timeout)
                    time.sleep(0.02)
            finally:
                if on_end:
                    on_end(pid)
                _kill_group(pid)
            code = _read_status(status)
            with open(out, "rb") as fo, open(err, "rb") as fe:
                stdout, stderr = fo.read(), fe.read()
            if code is None:
                code = -signal.SIGKILL
                stderr += b"\n(the script's process ended without an exit status: killed?)\n"
            return subprocess.CompletedProcess([script], code, stdout, stderr)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        pass
    return True


def _kill_group(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _read_status(path):
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------ the zygote itself
def serve():
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:  # an optional library missing: the scripts that need it will say so
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the copies are reaped as they end
    requests, replies = sys.stdin, sys.stdout
    replies.write("ready\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns
        replies.write(f"{pid}\n")
        replies.flush()


def _child(request):
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # as in a fresh Python: subprocess needs it
        die_with_parent()
        for fd, path, flags in (
            (0, os.devnull, os.O_RDONLY),
            (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            new = os.open(path, flags, 0o600)
            os.dup2(new, fd)
            os.close(new)
        os.environ.clear()  # exactly the environment regen gives a fresh Python
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        script = request["script"]
        sys.argv = [script]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        code = _run(script)
    finally:
        try:
            with open(request["status"] + ".tmp", "w") as f:
                f.write(str(code))
            os.replace(request["status"] + ".tmp", request["status"])
        finally:
            os._exit(code)


def _run(script):
    """Run script as __main__ and exit as Python would: its exit code, a traceback on stderr."""
    import atexit
    import runpy
    import traceback

    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # wait for the script's own threads, as the interpreter does
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    return code


if __name__ == "__main__":
    serve()
