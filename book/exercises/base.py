"""What every check shares: TODO and Unsolved, the language of the verdict (_t), the
@exercise decorator, and the helpers that compare and describe results."""

import functools

import torch

_LANG = ["en"]


class Unsolved(NotImplementedError):
    """What TODO raises: a hint in each language (one hint serves both when only one is given)."""

    def __init__(self, zh, en=None):
        super().__init__(en if en is not None else zh)
        self.zh, self.en = zh, en if en is not None else zh


def TODO(zh, en=None):
    """占位：把这个调用换成你的代码。The placeholder: replace the call with your code.

    TODO("中文提示", "English hint"); a single hint is shown in both editions."""
    raise Unsolved(zh, en)


def _t(zh, en):
    return zh if _LANG[0] == "zh" else en


def exercise(number):
    """Decorate a check: pick the language, turn a TODO or an error into a verdict, never raise."""

    def wrap(check):
        @functools.wraps(check)
        def run(*args, lang="en", **kwargs):
            if lang not in ("zh", "en"):
                print(f"lang must be 'zh' or 'en', not {lang!r}")
                return False
            _LANG[0] = lang
            try:
                problems = check(*args, **kwargs)
            except NotImplementedError as e:
                hint = _t(e.zh, e.en) if isinstance(e, Unsolved) else str(e)
                print(
                    _t(
                        f"练习 {number}：还没做（提示：{hint}）",
                        f"Exercise {number}: not solved yet (hint: {hint})",
                    )
                )
                return False
            except Exception as e:  # the reader's code failed: say how, do not raise
                print(
                    _t(
                        f"练习 {number}：还不对——运行出错 {type(e).__name__}: {e}",
                        f"Exercise {number}: not right yet: it raised {type(e).__name__}: {e}",
                    )
                )
                return False
            if problems:
                print(
                    _t(f"练习 {number}：还不对——", f"Exercise {number}: not right yet: ")
                    + "; ".join(problems[:2])
                )
                return False
            print(_t(f"练习 {number} 通过 ✅", f"Exercise {number} passed ✅"))
            return True

        return run

    return wrap


def _close(got, want, atol=1e-5, rtol=1e-5):
    got = torch.as_tensor(got)
    return got.shape == want.shape and torch.allclose(
        got.double(), want.double(), atol=atol, rtol=rtol
    )


def _shape_problem(got, want, what):
    got = torch.as_tensor(got)
    if got.shape != want.shape:
        return _t(
            f"{what}的形状应为 {list(want.shape)}，得到 {list(got.shape)}",
            f"{what} should have shape {list(want.shape)}, got {list(got.shape)}",
        )
    return None


def _on(case, fn, *args):
    """fn(*args) for the named case; an error there says which case raised it."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as e:
        raise RuntimeError(f"{case}: {type(e).__name__}: {e}") from e
