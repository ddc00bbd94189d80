"""The built site as a reader sees it, in real headless Chromium: both editions, at 390 px (a phone)
and 1280 px.

    .venv/bin/python -m pytest -m browser     # tests/test_browser_zh.py and _en.py run these

The checks are written once, here; tests/test_browser_zh.py and tests/test_browser_en.py run them
on one edition each (the `edition` fixture), so that the full tier's two workers check the two
editions at once. Each edition's pages are loaded once, in one browser (Sweep).

The site is built once (notebooks not executed: their stored outputs are shown) and served from a
local http server under the path of `site_url`, as on GitHub Pages. Pages are discovered from the
built site, so new chapters and lessons are checked without touching this file. A failing check
saves a screenshot under $BOOK_ARTIFACTS (default: test-artifacts/browser/), which CI uploads.

BOOK_SITE=<folder> checks a site built before instead of building one.

No browser found: the tests skip on a developer's machine and fail in CI (`CI` or `BOOK_CI` set, as
`.ci/run` does), because `.ci/run` installs Debian's chromium and chromium-driver itself.
"""

import functools
import http.server
import os
import re
import shutil
import tempfile
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("BOOK_ARTIFACTS", ROOT / "test-artifacts" / "browser"))
IN_CI = bool(os.environ.get("CI") or os.environ.get("BOOK_CI"))  # CI sets CI; .ci/run sets BOOK_CI
PHONE, DESKTOP = 390, 1280

# Words a reader types, in the forms they take. Material searches each word as a prefix (cache*), so
# an index of stems (cach, gate, chunk) finds none of them. Each must find pages of the edition
# searched, and only those.
SEARCH = {
    "zh": [
        "嵌入",
        "注意力",
        "缓存",
        "分词器",
        "cache",
        "gated",
        "weights",
        "tokens",
        "chunked",
        "attention",
    ],
    "en": [
        "cache",
        "gated",
        "weights",
        "tokens",
        "chunked",
        "attention",
        "embeddings",
        "嵌入",
        "caching",
        "quantization",
    ],
}
# "嵌入" on the English edition finds nothing: the English pages hold no Chinese; it must not find
# Chinese pages.
EXPECT_NONE = {("en", "嵌入")}
# English words in a form the book does not use (it says cache, cached; quantize, quantized, int8):
# the English index stems, so each finds the pages of its word's other forms, and at least these.
INFLECTED = {
    ("en", "caching"): ("cache", {"en/11-generation/", "en/15-decoding/"}),
    ("en", "quantization"): ("quantize", {"en/14-loading/", "en/16-int8/"}),
}

pytestmark = pytest.mark.browser

CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
]


def _find(env, names, folders=()):
    if os.environ.get(env) and Path(os.environ[env]).is_file():
        return os.environ[env]
    for folder in folders:
        for name in names:
            if folder and (Path(folder) / name).is_file():
                return str(Path(folder) / name)
    for name in names:
        if shutil.which(name):
            return shutil.which(name)
    return None


def find_browser():
    """(chromium, chromedriver) paths, or None. GitHub's runners ship google-chrome and
    $CHROMEWEBDRIVER."""
    chrome = _find(
        "CHROME_BIN",
        ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"],
    )
    driver = _find("CHROMEDRIVER", ["chromedriver"], [os.environ.get("CHROMEWEBDRIVER", "")])
    return (chrome, driver) if chrome and driver else None


# --------------------------------------------------------------------------------------------- site


def base_path():
    """The path the site is published under (from site_url), e.g. /transformer-by-hand/."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    return urlsplit(config["site_url"]).path.rstrip("/") + "/"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(root):
    """An http server on 127.0.0.1 (a free port) in a thread; returns (server, base url)."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def pages(site):
    """{edition: [page paths relative to the site root, like '' or '02-embedding/' or
    'en/lessons/embedding/']}."""
    found = {"zh": [], "en": []}
    for html in sorted(site.rglob("index.html")):
        rel = html.parent.relative_to(site).as_posix()
        rel = "" if rel == "." else rel + "/"
        if rel.startswith(
            ("assets/", "search/", "javascripts/", "stylesheets/", "figures/", "outputs/")
        ):
            continue
        found["en" if rel.startswith("en/") or rel == "en/" else "zh"].append(rel)
    return found


class Anchors(HTMLParser):
    """Every id in a page, and every href that points into a page (#x or page/#x), in the whole
    page."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if attrs.get("name") and tag == "a":
            self.ids.add(attrs["name"])
        href = attrs.get("href")
        if tag == "a" and href and "#" in href and not re.match(r"[a-z]+:", href):
            self.links.append(href)


# ------------------------------------------------------------------------------------------ browser


def start_browser(width, height=900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='book-chromium-')}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    browser.set_page_load_timeout(30)
    # the viewport, not the window, gets the width a phone would have
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    return browser


WAIT_READY = """
const done = arguments[arguments.length - 1];
(async () => {
  for (let i = 0; i < 200 && document.readyState !== "complete"; i++) await new Promise(r => setTimeout(r, 25));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; } catch (e) {}
    if (MathJax.typesetPromise) { try { await MathJax.typesetPromise(); } catch (e) {} }
  }
  await document.fonts.ready;
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  done(true);
})();
"""  # noqa: E501 (JavaScript run in the page, its comments aligned in columns)


def load(browser, url):
    """Open url and wait until the page, MathJax and fonts have settled."""
    browser.get(url)
    browser.set_script_timeout(30)
    browser.execute_async_script(WAIT_READY)


def shot(browser, name):
    """A screenshot of the whole page (not only the screen) under ARTIFACTS; returns its path."""
    import base64

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (re.sub(r"[^\w.-]+", "_", name).strip("_") + ".png")
    try:
        data = browser.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        path.write_bytes(base64.b64decode(data["data"]))
    except Exception:  # a driver without CDP: the screen only
        browser.save_screenshot(str(path))
    return path


# What a page shows, measured in the browser: display formulas, code lines, the copy buttons,
# figures.
MEASURE = """
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height].map(Math.round); };
const display = [...document.querySelectorAll("article div.arithmatex, article mjx-container[display='true']")]
  .filter(e => !e.closest("div.arithmatex") || e.matches("div.arithmatex"));
const formulas = display.map(e => {
  const svg = e.querySelector("svg"), r = (svg || e).getBoundingClientRect();
  return {tex: e.textContent.trim().slice(0, 60), width: Math.round(r.width), height: Math.round(r.height),
          rendered: !!svg};
});
document.querySelectorAll(".jupyter-wrapper details").forEach(d => { d.open = true; });   // a lesson's solutions
const code = [];
for (const pre of document.querySelectorAll("article pre")) {
  const scroller = pre.querySelector(":scope > code") || pre;
  if (!scroller.offsetParent || pre.closest(".jp-OutputArea")) continue;           // hidden, or a cell's output
  const visible = scroller.cloneNode(true);        // the code as shown: without the annotations' hidden text
  visible.querySelectorAll(".md-annotation__index, .md-tooltip, .md-tooltip2, aside").forEach(e => e.remove());
  const text = visible.textContent.replace(/\\n$/, "");
  const columns = l => [...l].reduce((n, ch) => n + (/[\\u1100-\\u115f\\u2e80-\\ua4cf\\uac00-\\ud7a3\\uf900-\\ufaff\\ufe30-\\ufe4f\\uff00-\\uff60\\uffe0-\\uffe6]/.test(ch) ? 2 : 1), 0);
  const longest = Math.max(0, ...text.split("\\n").map(columns));
  const block = pre.closest(".highlight, .jp-InputArea-editor") || pre;
  const button = block.querySelector(".md-code__nav, .md-clipboard, .zeroclipboard-container");
  const b = button && button.getBoundingClientRect();
  let covered = [];
  if (b && b.width) {                             // text under the copy button (the first lines' ends)
    let clip = scroller;                          // what scrolls: the code, or a cell's highlight box
    while (clip !== block && !/auto|scroll|hidden/.test(getComputedStyle(clip).overflowX)) clip = clip.parentElement;
    const c = clip.getBoundingClientRect();
    const [shownLeft, shownRight] = [c.left + clip.clientLeft, c.left + clip.clientLeft + clip.clientWidth];
    const walker = document.createTreeWalker(scroller, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const range = document.createRange(); range.selectNodeContents(n);
      for (const r of range.getClientRects()) {
        const [left, right] = [Math.max(r.left, shownLeft), Math.min(r.right, shownRight)];  // the part not scrolled away
        if (right - left > 1 && right > b.left + 1 && left < b.right && r.bottom > b.top + 1 && r.top < b.bottom - 1)
          covered.push(n.textContent.trim().slice(0, 40));
      }
    }
  }
  const title = block.querySelector(":scope > .filename");          // "Output" on a printed output
  code.push({longest, scroll: scroller.scrollWidth, client: scroller.clientWidth, covered: covered.filter(Boolean),
             first: text.split("\\n").find(l => columns(l) === longest).slice(0, 50), box: box(pre),
             title: title ? title.textContent : ""});
}
const figures = [...document.querySelectorAll("article img")]
  .map((i, index) => ({index, src: i.getAttribute("src").slice(0, 80), box: box(i), natural: i.naturalWidth,
                       shown: !!i.offsetParent}))
  .filter(f => f.shown && f.natural > 100);
const bg = getComputedStyle(document.body).backgroundColor;
const switcher = [...document.querySelectorAll(".md-select a[hreflang]")].map(a => [a.hreflang, a.href]);
const article = document.querySelector("article").getBoundingClientRect().width;
const cells = [...document.querySelectorAll(".jp-Cell .jp-InputArea-editor, .jp-Cell .jp-OutputArea-output")]
  .filter(e => e.offsetParent).map(e => Math.round(e.getBoundingClientRect().width));
const breaking = [...document.querySelectorAll(".jp-OutputArea-output pre")]
  .filter(e => getComputedStyle(e).wordBreak === "break-all").length;
const lesson = {article: Math.round(article), narrowest: cells.length ? Math.min(...cells) : null, breaking};
// An element that shows only part of `e`'s right end and gives no scrollbar to see the rest (null: none does).
const cutBy = e => {
  const right = e.getBoundingClientRect().right;
  for (let a = e.parentElement; a && a.tagName !== "ARTICLE"; a = a.parentElement) {
    const s = getComputedStyle(a), shown = a.getBoundingClientRect().left + a.clientLeft + a.clientWidth;
    if (s.overflowX === "visible" || right <= shown + 1) continue;
    if (/auto|scroll/.test(s.overflowX) && a.scrollWidth > a.clientWidth + 1) return null;   // it scrolls
    return (a.className || a.tagName).toString().slice(0, 40);
  }
  return null;
};
// Tables: Material's look (a border round the table, a rule between rows, cells padded apart), nothing cut off.
const tables = [...document.querySelectorAll("article table")].filter(t => t.offsetParent).map(t => {
  const cell = t.querySelector("td") || t.querySelector("th"), cs = getComputedStyle(cell);
  let gap = Infinity;                              // between the text of neighbouring cells of a row
  for (const row of t.rows) {
    const ends = [...row.cells].map(c => {
      const range = document.createRange(); range.selectNodeContents(c);
      const rs = [...range.getClientRects()].filter(r => r.width > 0);
      return rs.length ? [Math.min(...rs.map(r => r.left)), Math.max(...rs.map(r => r.right))] : null;
    });
    for (let i = 1; i < ends.length; i++)
      if (ends[i - 1] && ends[i]) gap = Math.min(gap, ends[i][0] - ends[i - 1][1]);
  }
  return {text: t.textContent.trim().replace(/\\s+/g, " ").slice(0, 50), gap: Math.round(gap),
          border: parseFloat(getComputedStyle(t).borderTopWidth), rule: parseFloat(cs.borderTopWidth),
          padding: parseFloat(cs.paddingLeft) + parseFloat(cs.paddingRight), cut: cutBy(t)};
});
// Formulas (MathJax's SVG, its size in ex): drawn at their own size, or squeezed; a formula wider than the column
// must scroll, not be cut off.
const math = [...document.querySelectorAll("article mjx-container")].map(c => {
  const svg = c.querySelector(":scope > svg");
  if (!svg || !c.offsetParent) return null;
  const probe = document.createElement("span");
  probe.style.cssText = "position:absolute;width:100ex;height:0;visibility:hidden";
  c.appendChild(probe);
  const ex = probe.getBoundingClientRect().width / 100;
  probe.remove();
  const own = parseFloat(svg.getAttribute("width")) * ex, drawn = svg.getBoundingClientRect().width;
  return {tex: c.textContent.slice(0, 40), display: c.getAttribute("display") === "true",
          lesson: !!c.closest(".jp-RenderedMarkdown"), scale: +(drawn / own).toFixed(3), width: Math.round(drawn),
          font: +(parseFloat(getComputedStyle(c).fontSize) * drawn / own).toFixed(1), cut: cutBy(svg)};
}).filter(Boolean);
// The words the page's chrome says: labels and tooltips, image descriptions, the footer, a lesson cell's tag.
const labels = [];
for (const e of document.querySelectorAll("[title], [aria-label], img[alt], input[placeholder]"))
  for (const a of ["title", "aria-label", "alt", "placeholder"])
    if (e.hasAttribute(a) && e.getAttribute(a).trim()) labels.push([a, e.tagName.toLowerCase(), e.getAttribute(a)]);
for (const e of document.querySelectorAll(".md-copyright, .md-footer__direction, .cell-tag, clipboard-copy .notice"))
  labels.push(["text", e.className.toString().split(" ")[0], e.textContent.trim().replace(/\\s+/g, " ")]);
return {formulas, code, figures, bg, switcher, lesson, tables, math, labels,
        scheme: document.body.getAttribute("data-md-color-scheme"),
        width: document.documentElement.clientWidth, overflowX: document.documentElement.scrollWidth};
"""  # noqa: E501 (JavaScript run in the page, its comments aligned in columns)


# The copy button of the page's output with the longest line (arguments[0]: the outputs' title).
# Clicked, it copies into `__copied` (clipboard.js copies from a hidden textarea); `__shown` is the
# output's text.
COPY = """
window.__copied = [];
document.addEventListener("copy", () => {
  const a = document.activeElement;
  window.__copied.push(a && "value" in a ? a.value : String(document.getSelection()));
}, true);
const outputs = [...document.querySelectorAll("article div.highlight")]
  .filter(d => (d.querySelector(":scope > .filename") || {}).textContent === arguments[0]);
const text = d => d.querySelector("pre > code").textContent;
const length = d => Math.max(...text(d).split("\\n").map(l => l.length));
const widest = outputs.sort((a, b) => length(b) - length(a))[0];
window.__shown = text(widest);
return widest.querySelector("[data-md-type='copy'], .md-clipboard");
"""


PAINTED = """
const [index, done] = [arguments[0], arguments[arguments.length - 1]];
const img = document.querySelectorAll("article img")[index];
img.scrollIntoView({block: "center"});
(img.decode ? img.decode() : Promise.resolve()).catch(() => {}).then(() =>
  requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(() => done(img), 50))));
"""


def external(message, url):
    """A request to another host failed: the test machine is offline (GitHub's API for the
    repository's stars)."""
    m = re.match(r"(https?://[^/ ]+)\S* - Failed to load resource: net::", message)
    return bool(m) and not url.startswith(m.group(1))


PALETTE = """
const [scheme, done] = [arguments[0], arguments[arguments.length - 1]];
const input = document.querySelector(`input[name="__palette"][data-md-color-scheme="${scheme}"]`);
if (input && !input.checked) input.click();                 // what a reader's click on the toggle does
requestAnimationFrame(() => requestAnimationFrame(() => done(document.body.getAttribute("data-md-color-scheme"))));
"""  # noqa: E501 (JavaScript run in the page)

SETTLED = """
const done = arguments[arguments.length - 1];
document.fonts.ready.then(() => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 100))));
"""  # noqa: E501 (JavaScript run in the page)


class Sweep:
    """Every page of one edition, each loaded once in one browser: measured at 1280 px; on a page
    with figures, its figures' pixels in dark mode (switched with the palette toggle, as a reader
    does, and back); then the same page at 390 px, a phone's viewport (MathJax draws SVG and breaks
    no line, so what it drew holds at any width: test_a_resized_page_measures_as_a_fresh_one checks
    that a fresh load at 390 px measures the same). JavaScript errors, per width; screenshots of
    failing pages."""

    def __init__(self, url, paths, dark_paths):
        self.url, self.width = url, DESKTOP
        self.browser = start_browser(DESKTOP, 900)
        self.results = {DESKTOP: {}, PHONE: {}, "dark": {}}
        try:
            for path in paths:
                self.measure(path, dark=path in dark_paths)
        except Exception:
            self.browser.quit()
            raise

    def viewport(self, width, settle=True):
        """The viewport of a phone (390 px, mobile) or of a desktop window (1280 px); with settle,
        waits until the open page has been laid out again at that width."""
        if width != self.width:
            self.browser.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {
                    "width": width,
                    "height": 900 if width > 600 else 844,
                    "deviceScaleFactor": 1,
                    "mobile": width < 600,
                },
            )
            self.width = width
            if settle:
                self.browser.set_script_timeout(30)
                self.browser.execute_async_script(SETTLED)

    def palette(self, scheme):
        """Switch the open page to "slate" (dark) or "default" (light); returns the scheme shown."""
        self.browser.set_script_timeout(30)
        return self.browser.execute_async_script(PALETTE, scheme)

    def errors(self):
        return [
            e["message"][:300]
            for e in self.browser.get_log("browser")
            if e["level"] == "SEVERE" and not external(e["message"], self.url)
        ]

    def measure(self, path, dark):
        self.viewport(DESKTOP, settle=False)  # the page about to be left is not measured again
        load(self.browser, self.url + path)
        desktop = self.browser.execute_script(MEASURE)
        desktop["errors"] = self.errors()
        self.results[DESKTOP][path] = desktop
        if dark:
            scheme = self.palette("slate")
            pixels = [self.pixels(f) for f in desktop["figures"]]
            self.results["dark"][path] = {
                "scheme": scheme,
                "figures": desktop["figures"],
                "figure_pixels": pixels,
            }
            self.palette("default")  # the choice is stored: the next page opens light again
        self.browser.execute_script("window.scrollTo(0, 0)")
        self.viewport(PHONE)
        phone = self.browser.execute_script(MEASURE)
        phone["errors"] = self.errors()
        phone["read"] = self.browser.execute_script(READ)  # what a phone reader reads
        self.results[PHONE][path] = phone

    def pixels(self, figure):
        """(mean luminance, spread) of a figure as drawn on the screen, 0..1."""
        from io import BytesIO

        from PIL import Image, ImageStat

        for _ in range(3):  # a large SVG may not be painted yet right after scrolling
            element = self.browser.execute_async_script(PAINTED, figure["index"])
            stat = ImageStat.Stat(Image.open(BytesIO(element.screenshot_as_png)).convert("L"))
            mean, spread = round(stat.mean[0] / 255, 3), round(stat.stddev[0] / 255, 3)
            if spread > 0:
                break
        return mean, spread

    def close(self):
        self.browser.quit()


class View:
    """What the tests see of a Sweep: one width (and dark or light): its results, and its browser
    set to that width."""

    def __init__(self, sweep, width, dark):
        self.sweep, self.url, self.width, self.dark = sweep, sweep.url, width, dark
        self.results = sweep.results["dark" if dark else width]

    @property
    def browser(self):
        self.sweep.viewport(self.width)
        return self.sweep.browser

    def shot(self, path, what):
        browser = self.browser
        load(browser, self.url + path)
        if self.dark:
            self.sweep.palette("slate")
        try:
            mode = "dark" if self.dark else "light"
            return shot(browser, f"{what}_{mode}_{self.width}_{path or 'home'}")
        finally:
            if self.dark:
                self.sweep.palette("default")


# ----------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def chrome():
    found = find_browser()
    if found is None:
        message = (
            "no Chromium and chromedriver found (install Debian's chromium and chromium-driver, "
            "or set CHROME_BIN and CHROMEDRIVER)"
        )
        if IN_CI:
            pytest.fail(message + ": CI must run the browser tests (.ci/run installs them)")
        pytest.skip(message)
    pytest.importorskip(
        "selenium", reason="selenium is installed with the test extra: pip install -e '.[test]'"
    )
    return found


@pytest.fixture(scope="session")
def site(built_site, chrome):
    """The site built once per session (tests/conftest.py; BOOK_SITE=<folder> checks one built
    before)."""
    return built_site


@pytest.fixture(scope="session")
def url(site, tmp_path_factory):
    """The site served as GitHub Pages serves it: under the path of site_url."""
    root = tmp_path_factory.mktemp("www")
    (root / base_path().strip("/")).symlink_to(site, target_is_directory=True)
    server, address = serve(root)
    yield address + base_path()
    server.shutdown()


@pytest.fixture(scope="session")
def all_pages(site):
    found = pages(site)
    assert len(found["zh"]) == len(found["en"]) > 1, found
    return found


_sweeps = {}


@pytest.fixture(scope="session")
def sweep(chrome, url, site, all_pages):
    """sweep(edition, width, dark=False): each edition is measured once per session (a Sweep), at
    both widths, and in dark mode on the pages with figures."""

    def get(edition, width, dark=False):
        if edition not in _sweeps:
            paths = all_pages[edition]
            dark_paths = {
                p
                for p in paths
                if "<img" in (site / p / "index.html").read_text().split("<article", 1)[-1]
            }
            _sweeps[edition] = Sweep(url, paths, dark_paths)
        return View(_sweeps[edition], width, dark)

    yield get
    for s in _sweeps.values():
        s.close()
    _sweeps.clear()


def report(sweep, problems, what):
    """Fail with one line per problem, after saving a screenshot of each page that has one."""
    if not problems:
        return
    shots = [str(sweep.shot(path, what)) for path in sorted({p for p, _ in problems})[:8]]
    lines = [f"{sweep.url}{path}: {problem}" for path, problem in problems]
    pytest.fail(
        f"{len(problems)} problems ({what}, {sweep.width} px):\n"
        + "\n".join(lines[:40])
        + "\nscreenshots: "
        + " ".join(shots)
    )


# -------------------------------------------------------------------------------------------- tests


def test_no_javascript_errors(sweep, edition):
    for width in (DESKTOP, PHONE):
        s = sweep(edition, width)
        report(s, [(p, e) for p, r in s.results.items() for e in r["errors"]], "javascript")


def test_a_resized_page_measures_as_a_fresh_one(sweep, url, site, all_pages, edition):
    """The sweep measures a page at 390 px after 1280 px (and dark mode) in the same load: on a
    chapter with figures, tables and formulas, and on a lesson, a page opened fresh at 390 px
    measures the same, every measurement (formulas, code, figures, tables, labels, widths)."""
    s = sweep(edition, PHONE)

    def article(p):
        return (site / p / "index.html").read_text().split("<article", 1)[-1]

    chapter = next(
        p
        for p in all_pages[edition]
        if "lessons/" not in p and all(m in article(p) for m in ("<img", "<table", "arithmatex"))
    )
    lesson = next(p for p in all_pages[edition] if "lessons/" in p)
    browser = start_browser(PHONE, 844)
    try:
        for path in (chapter, lesson):
            load(browser, url + path)
            fresh = browser.execute_script(MEASURE)
            fresh["read"] = browser.execute_script(READ)
            resized = dict(s.results[path])
            # Material gives the header's title a tooltip where its text is cut short when the
            # page loads, and a resize does not redo it (the labels are checked at 1280 px)
            fresh["labels"], resized["labels"] = (
                [label for label in labels if label[:2] != ["title", "span"]]
                for labels in (fresh["labels"], resized["labels"])
            )
            differ = {k: (fresh[k], resized[k]) for k in fresh if fresh[k] != resized[k]}
            assert not differ, f"{path}: at 390 px, {sorted(differ)} differ: {differ}"[:3000]
    finally:
        browser.quit()


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_every_display_formula_has_a_visible_size(sweep, edition, width):
    s = sweep(edition, width)
    problems = [
        (
            p,
            f"formula {f['tex']!r} drawn {f['width']}x{f['height']} px"
            + ("" if f["rendered"] else " (not typeset)"),
        )
        for p, r in s.results.items()
        for f in r["formulas"]
        if not f["rendered"] or f["width"] < 8 or f["height"] < 8
    ]
    count = sum(len(r["formulas"]) for r in s.results.values())
    print(f"{edition} {width} px: {count} display formulas on {len(s.results)} pages")
    assert count > 0, "no display formula found: the measurement finds none"
    report(s, problems, "formula")


def test_pages_fit_the_phone_screen(sweep, edition):
    s = sweep(edition, PHONE)
    report(
        s,
        [
            (p, f"the page scrolls sideways: {r['overflowX']} px wide on a {r['width']} px screen")
            for p, r in s.results.items()
            if r["overflowX"] > r["width"] + 1
        ],
        "page-width",
    )


def test_code_lines_fit_their_box_at_desktop_width(sweep, edition):
    """The book's code lines are at most 100 columns: at 1280 px each one shows whole. A printed
    output never scrolls sideways: its longer lines wrap, and its copy button still copies the
    printed text. No text is under a copy button, in a block that scrolls sideways too (the button
    has a lane of its own, the code scrolls left of it). On a lesson page (a rendered notebook: its
    code cells and folded solutions) no code line scrolls sideways."""
    from book.pages import TEXT

    s = sweep(edition, DESKTOP)
    problems, wrapped = [], {}
    for p, r in s.results.items():
        for c in r["code"]:
            if c["covered"]:  # a block that scrolls too: its first lines pass the button
                problems.append((p, f"the copy button covers {c['covered'][:3]}"))
            output = c["title"] == TEXT[edition]["output_title"]
            if output and c["longest"] > 100:
                wrapped[p] = max(wrapped.get(p, 0), c["longest"])
            elif c["longest"] > 100 and "lessons/" not in p:  # a lesson's lines: the check below
                problems.append(
                    (p, f"a code line of {c['longest']} columns, over 100: {c['first']!r}...")
                )
                continue
            if c["scroll"] > c["client"] + 1:
                what = "an output" if output else "a code block"
                problems.append(
                    (
                        p,
                        f"{what} scrolls sideways: a {c['longest']}-column line overflows "
                        f"({c['scroll']} > {c['client']} px): {c['first']!r}",
                    )
                )
    assert sum(len(r["code"]) for r in s.results.values()) > 0
    assert wrapped, "no output has a line over 100 columns: nothing here checks that one wraps"
    page = max(wrapped, key=wrapped.get)  # the widest output: its copy is the printed text
    load(s.browser, s.url + page)
    button = s.browser.execute_script(COPY, TEXT[edition]["output_title"])
    s.browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    button.click()
    for _ in range(40):
        copied = s.browser.execute_script("return window.__copied")
        if copied:
            break
        time.sleep(0.05)
    shown = s.browser.execute_script("return window.__shown").rstrip()
    if copied != [shown]:
        got = copied[0][:200] if copied else "nothing"
        problems.append((page, f"the output's copy button copies {got!r}, not {shown[:200]!r}"))
    report(s, problems, "code")


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_lessons_use_the_whole_column(sweep, edition, width):
    """A lesson's code cells and outputs are as wide as a chapter's text (no prompts eating the
    width), and an output never breaks a number in two."""
    s = sweep(edition, width)
    problems = []
    for p, r in s.results.items():
        lesson = r["lesson"]
        if lesson["narrowest"] is not None and lesson["narrowest"] < 0.97 * lesson["article"]:
            problems.append(
                (p, f"a cell {lesson['narrowest']} px wide in a {lesson['article']} px column")
            )
        if lesson["breaking"]:
            problems.append(
                (p, f"{lesson['breaking']} outputs wrap anywhere (word-break: break-all)")
            )
    assert any(r["lesson"]["narrowest"] for r in s.results.values()), "no lesson found"
    report(s, problems, "lesson")


def test_figures_are_readable_in_dark_mode(sweep, edition):
    """In dark mode a figure is drawn dark like the page (not a white box), and still has contrast
    to read. A figure with a photograph in it (`_photo` in its name) keeps its colours on purpose
    (docs/stylesheets/extra.css: inverted, a face would be a negative), so only its contrast is
    checked."""
    s = sweep(edition, DESKTOP, dark=True)
    problems, count = [], 0
    for p, r in s.results.items():
        assert r["scheme"] == "slate", f"{p}: dark mode asked for, got {r['scheme']!r}"
        for f, (mean, spread) in zip(r["figures"], r.get("figure_pixels", [])):
            count += 1
            if mean > 0.5 and "_photo" not in f["src"]:
                problems.append(
                    (p, f"{f['src']}: a bright box on a dark page (mean luminance {mean})")
                )
            elif spread < 0.05:
                problems.append((p, f"{f['src']}: no contrast (spread {spread})"))
    print(f"{edition}: {count} figures checked in dark mode")
    assert count > 0
    report(s, problems, "dark-figure")


def test_figures_are_shown_at_a_readable_size(sweep, edition):
    """At 1280 px no figure is squeezed below 60 % of its own width while the column has room for
    more."""
    s = sweep(edition, DESKTOP)
    problems = [
        (p, f"{f['src']}: {f['box'][2]} px of its {f['natural']} px")
        for p, r in s.results.items()
        for f in r["figures"]
        if f["box"][2] < 0.6 * f["natural"] and f["box"][2] < 700
    ]
    report(s, problems, "figure-size")


def test_figures_keep_their_own_size_on_the_phone(sweep, edition):
    """At 390 px a figure is shown at its own size and scrolls sideways: squeezed into the column, a
    diagram's labels are 4 px tall. (test_pages_fit_the_phone_screen checks that the page itself
    still does not scroll.)"""
    s = sweep(edition, PHONE)
    problems = [
        (p, f"{f['src']}: {f['box'][2]} px of its {f['natural']} px")
        for p, r in s.results.items()
        for f in r["figures"]
        if f["box"][2] < 0.95 * f["natural"]
    ]
    assert any(r["figures"] for r in s.results.values()), "no figure found"
    report(s, problems, "figure-size-phone")


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_tables_are_readable_and_never_cut_off(sweep, edition, width):
    """Every table, a lesson's too, has Material's table look: a border, a rule between rows, cells
    padded apart (a lesson table once showed "262,2082,560", its cells glued, when MathJax's marking
    gave it a class). A table wider than the column scrolls; none is cut off with no way to see the
    rest."""
    s = sweep(edition, width)
    problems = []
    for p, r in s.results.items():
        for t in r["tables"]:
            if t["border"] < 1 or t["rule"] < 1:
                problems.append(
                    (p, f"table {t['text']!r} has no border or no rules between rows: not styled")
                )
            if t["padding"] < 12 or t["gap"] < 8:
                problems.append(
                    (p, f"table {t['text']!r}: cells {t['gap']} px apart, padded {t['padding']} px")
                )
            if t["cut"]:
                problems.append(
                    (p, f"table {t['text']!r} is cut off by .{t['cut']}, which gives no scrollbar")
                )
    lesson_tables = sum(len(r["tables"]) for p, r in s.results.items() if "lessons/" in p)
    print(
        f"{edition} {width} px: {sum(len(r['tables']) for r in s.results.values())} "
        f"tables, {lesson_tables} in lessons"
    )
    assert lesson_tables, "no table found in a lesson: the measurement finds none"
    report(s, problems, "table")


def test_phone_formulas_keep_their_size_and_scroll(sweep, edition):
    """At 390 px every formula, inline or displayed, a chapter's or a lesson's, is drawn at its own
    size (a long one was squeezed to 43 %, its glyphs 7 px, a lesson's display formulas to 53-80 %)
    and one wider than the column scrolls sideways instead of being cut off."""
    s = sweep(edition, PHONE)
    problems, kinds, wide = [], {}, 0
    for p, r in s.results.items():
        for m in r["math"]:
            kind = ("a lesson's " if m["lesson"] else "") + (
                "display" if m["display"] else "inline"
            )
            kinds[kind] = kinds.get(kind, 0) + 1
            wide += m["width"] > r["width"] - 32
            if m["scale"] < 0.95 or m["font"] < 10:
                problems.append(
                    (
                        p,
                        f"{kind} formula {m['tex']!r} drawn at {m['scale']:.0%} of its size "
                        f"({m['font']} px)",
                    )
                )
            if m["cut"]:
                problems.append(
                    (p, f"{kind} formula {m['tex']!r} is cut off by .{m['cut']}, no scrollbar")
                )
    print(f"{edition}: formulas at 390 px {kinds}, {wide} wider than the column")
    for kind in ("inline", "display", "a lesson's display", "a lesson's inline"):
        assert kinds.get(kind), f"no {kind} formula found: the measurement finds none"
    report(s, problems, "formula-phone")


CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
# nbconvert's stand-in for an image with no alt
NO_ALT = "No description has been provided for this image"


def test_the_pages_labels_speak_the_editions_language(sweep, edition):
    """The words around the text are the edition's: every tooltip, label and image description (the
    palette toggle, the permalinks, the copy buttons, a lesson figure's alt text), the footer and a
    lesson cell's tag. On a zh page each holds Chinese, on an en page none does, and no image has
    nbconvert's "No description" stand-in."""
    s = sweep(edition, DESKTOP)
    problems, seen = [], set()
    for p, r in s.results.items():
        for attr, tag, text in r["labels"]:
            seen.add((attr, tag))
            where = f"<{tag}> {attr}" if attr != "text" else f".{tag}"
            if text == NO_ALT:
                problems.append((p, f"{where}: an image with no description ({text!r})"))
            elif edition == "zh" and not CJK.search(text):
                problems.append((p, f"{where} in English on a Chinese page: {text!r}"))
            elif edition == "en" and CJK.search(text):
                problems.append((p, f"{where} in Chinese on an English page: {text!r}"))
    expected = {
        ("title", "label"): "the palette toggle",
        ("title", "a"): "a permalink",
        ("alt", "img"): "a figure",
        ("aria-label", "clipboard-copy"): "a lesson's copy button",
        ("text", "cell-tag"): "an exercise's tag",
        ("text", "md-copyright"): "the footer",
    }
    missing = [what for key, what in expected.items() if key not in seen]
    assert not missing, f"not found on any page, so not checked: {missing}"
    problems = sorted(set(problems))
    report(s, problems, "labels")


# What a reader sees of the page's text on a phone, every folded block opened: TeX that MathJax left
# as it was (outside code), the size of each code block's font, and file names in tables broken
# inside a word.
READ = r"""
document.querySelectorAll("article details").forEach(d => { d.open = true; });
const raw = [];
const walker = document.createTreeWalker(document.querySelector("article"), NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  if (n.parentElement.closest("pre, code, script, style, mjx-container, .highlight, .jp-OutputArea, "
                              + ".jp-InputArea-editor, .clipboard-copy-txt")) continue;          // code, a cell's too
  const m = n.textContent.match(/\$\$|\$[^$\n]{0,80}\\[A-Za-z]|\\\(|\\\[/);
  if (m) raw.push(n.textContent.slice(Math.max(0, m.index - 20), m.index + 40).trim());
}
const fonts = [...document.querySelectorAll("article pre > code")].filter(c => c.offsetParent)
  .map(c => [parseFloat(getComputedStyle(c).fontSize), c.textContent.trim().slice(0, 40)]);
const broken = [...document.querySelectorAll("article table code")].filter(c => c.offsetParent)
  .filter(c => getComputedStyle(c).wordBreak !== "normal").map(c => c.textContent.slice(0, 40));
return {raw, fonts, broken, typeset: document.querySelectorAll("article mjx-container").length};
"""  # noqa: E501 (JavaScript run in the page, its comments aligned in columns)


def test_phone_readers_see_typeset_formulas_and_readable_code(sweep, url, all_pages, edition):
    """On every page at 390 px, the solutions opened: no raw TeX ($…$ or \\( of a lesson's markdown
    cells that MathJax did not typeset), no code block in a font under 10 px (a solution's code
    inside its admonition), no name in a table that may break inside a word."""
    s = sweep(edition, PHONE)
    problems, typeset = [], {}
    for path in all_pages[edition]:
        r = s.results[path]["read"]
        typeset[path] = r["typeset"]
        problems += [(path, f"raw TeX: {t!r}") for t in r["raw"][:3]]
        problems += [
            (path, f"code in a {size:.1f} px font: {text!r}")
            for size, text in r["fonts"]
            if size < 10
        ][:3]
        problems += [
            (path, f"a table's name may break inside a word: {t!r}") for t in r["broken"][:3]
        ]
    lessons = [p for p in typeset if "lessons/" in p]
    assert lessons, "no lesson found"
    if not any(typeset[p] for p in lessons):
        problems.append(
            (
                lessons[0],
                f"no formula typeset on any lesson: {dict((p, typeset[p]) for p in lessons)}",
            )
        )
    report(s, problems, "read-phone")


SEARCH_JS = """
const [query, done] = [arguments[0], arguments[arguments.length - 1]];
const input = document.querySelector("input.md-search__input");
const meta = () => (document.querySelector(".md-search-result__meta") || {}).textContent || "";
const items = () => [...document.querySelectorAll("li.md-search-result__item > a.md-search-result__link")]
  .map(a => new URL(a.href).pathname);
const type = text => {
  input.value = text;
  input.dispatchEvent(new Event("input", {bubbles: true}));
  input.dispatchEvent(new KeyboardEvent("keyup", {bubbles: true, key: text.slice(-1) || "Backspace"}));
};
const sleep = ms => new Promise(r => setTimeout(r, ms));
(async () => {
  document.querySelector("#__search").checked = true;
  input.focus();
  type("");                                       // back to the empty box: no results of an earlier query
  for (let i = 0; i < 50 && items().length; i++) await sleep(50);
  const empty = meta();
  type(query);
  let last = null, stable = 0;
  for (let i = 0; i < 150; i++) {                 // until the answer has come and stays the same for 0.3 s
    await sleep(100);
    const now = meta() + "|" + items().join(",");
    stable = now === last ? stable + 1 : 0; last = now;
    if (stable >= 3 && meta() !== empty) break;
  }
  const snippets = [...document.querySelectorAll(".md-search-result__article")].map(e => e.textContent).join(" ");
  const marks = [...document.querySelectorAll(".md-search-result mark")].map(e => e.textContent);
  done({meta: meta(), pages: items(), snippets, marks});
})();
"""  # noqa: E501 (JavaScript run in the page, its comments aligned in columns)


def search(browser, query):
    """What the open page's search box shows for query: {'meta': 'N matching documents', 'pages':
    [paths]}."""
    browser.set_script_timeout(30)
    return browser.execute_async_script(SEARCH_JS, query)


def test_search_finds_words_in_their_forms_and_stays_in_its_edition(sweep, url, edition):
    s = sweep(edition, DESKTOP)
    home = url + ("en/" if edition == "en" else "")
    en_root = urlsplit(url).path + "en/"
    problems = []
    load(s.browser, home)
    for query in SEARCH[edition]:
        found = search(s.browser, query)
        pages_ = sorted(set(found["pages"]))
        print(f"search {edition} {query!r}: {len(pages_)} pages ({found['meta']})")
        wrong = [p for p in pages_ if p.startswith(en_root) != (edition == "en")]
        if wrong:
            problems.append(("", f"{query!r} shows pages of the other edition: {wrong[:3]}"))
        raw = re.findall(
            r"\\[(\[].{0,20}|\$[^$]{0,40}\\[A-Za-z]+.{0,10}|\$\$.{0,20}", found["snippets"]
        )
        if raw:
            problems.append(("", f"{query!r}: snippets show raw TeX: {raw[:3]}"))
        for char, name in (("\u00b6", "a heading's ¶"), ("\u200b", "zero-width spaces")):
            if char in found["snippets"]:
                problems.append(
                    ("", f"{query!r}: results show {name} ({found['snippets'].count(char)})")
                )
        broken = [m for m in found["marks"] if re.search(r"[<>]", m)]
        if broken:
            problems.append(
                (
                    "",
                    f"{query!r}: a result marks {broken[:3]}: its markup broke (a word marked "
                    "twice)",
                )
            )
        if (edition, query) in EXPECT_NONE:
            continue
        if not pages_:
            problems.append(("", f"{query!r} finds nothing ({found['meta']})"))
        if (edition, query) in INFLECTED:
            base, expected = INFLECTED[edition, query]
            found_base = sorted(set(search(s.browser, base)["pages"]))
            wanted = sorted(urlsplit(url).path + e for e in expected)
            if not set(wanted) <= set(pages_) or pages_ != found_base:
                problems.append(
                    (
                        "",
                        f"{query!r} finds {pages_}; {base!r} finds {found_base}; both must, and "
                        f"include {wanted}",
                    )
                )
    if problems:
        shot(s.browser, f"search_{edition}")
    assert not problems, "\n".join(p for _, p in problems)


def test_language_switcher_lands_on_the_twin_page(sweep, url, all_pages, edition):
    """On every page of the edition the switcher points at the twin page in the other; clicking it
    lands there."""
    base = urlsplit(url).path
    other = "en" if edition == "zh" else "zh"
    twin = (lambda here: "en/" + here) if other == "en" else (lambda here: here[3:])
    problems = []
    s = sweep(edition, DESKTOP)
    for here, result in s.results.items():
        href = dict(result["switcher"]).get(other)
        if href is None:
            problems.append(f"{here or 'home'}: no link to the {other} edition")
        elif urlsplit(href).path != base + twin(here):
            problems.append(
                f"{here or 'home'}: the switcher points at {urlsplit(href).path}, "
                f"not {base + twin(here)}"
            )
    page = next(p for p in all_pages[edition] if p.strip("/") not in ("", "en"))
    browser = s.browser  # a real click, through Material's handlers
    load(browser, url + page)
    browser.execute_script(f"document.querySelector(`.md-select a[hreflang='{other}']`).click()")
    for _ in range(50):
        if urlsplit(browser.current_url).path != base + page:
            break
        time.sleep(0.1)
    landed = urlsplit(browser.current_url).path
    if landed != base + twin(page):
        problems.append(f"{page}: clicking {other} lands on {landed}, not {base + twin(page)}")
    if problems:
        shot(browser, f"switcher_{edition}")
    assert not problems, "\n".join(problems)


def _anchors(site, rel):
    parser = Anchors()
    parser.feed((site / rel / "index.html").read_text())
    return parser


def test_every_anchor_in_the_built_pages_resolves(site, all_pages, edition):
    """Every href with a #fragment (table of contents, permalinks, footnotes, cross-references)
    finds its id."""
    cache, problems, checked = {}, [], 0
    for rel in all_pages[edition]:
        page = _anchors(site, rel)
        cache[rel] = page
        for href in page.links:
            path, _, fragment = href.partition("#")
            if not fragment:
                continue
            target = os.path.normpath(os.path.join(rel, path)).replace("\\", "/") if path else rel
            target = "" if target in (".", "") else target.strip("/") + "/"
            if target.endswith(".html/") or not (site / target / "index.html").is_file():
                problems.append(f"{rel}: {href} points to no page")
                continue
            if target not in cache:
                cache[target] = _anchors(site, target)
            checked += 1
            from urllib.parse import unquote

            if unquote(fragment) not in cache[target].ids:
                problems.append(f"{rel or 'home'}: {href} goes nowhere")
    print(f"{edition}: {checked} anchors checked on {len(all_pages[edition])} pages")
    assert checked > 0
    assert not problems, f"{len(problems)} anchors go nowhere:\n" + "\n".join(problems[:40])


def test_headings_get_readable_anchors(site, all_pages, edition):
    """A heading's anchor says what it is (#小结), never a number (#_1) that means nothing when
    shared."""
    bad = []
    for rel in all_pages[edition]:
        html = (site / rel / "index.html").read_text()
        bad += [f"{rel or 'home'}: #{m}" for m in re.findall(r'<h[1-6][^>]* id="(_\d*)"', html)]
    assert not bad, "headings with meaningless anchors:\n" + "\n".join(bad[:40])


def test_the_edition_has_its_own_404_page(site, url, sweep, edition):
    """The 404 page of each edition (404.html at the root is the Chinese one, en/404.html the
    English one) speaks its language, shows no JavaScript error, and its switcher leads to each
    edition's home."""
    path, lang, text = {
        "zh": ("404.html", "zh", "找不到"),
        "en": ("en/404.html", "en", "Page not found"),
    }[edition]
    html = (site / path).read_text()
    assert f'<html lang="{lang}"' in html and text in html, f"{path} is not the {lang} 404 page"
    browser = sweep(edition, DESKTOP).browser
    base = urlsplit(url).path
    homes = {"zh": base, "en": base + "en/"}
    load(browser, url + path)
    assert text in browser.find_element("tag name", "article").text
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{path}: {errors}"
    switcher = browser.execute_script(
        "return [...document.querySelectorAll('.md-select a[hreflang]')].map(a => [a.hreflang, "
        "a.href])"
    )
    links = {lang: urlsplit(href).path for lang, href in switcher}
    assert links == homes, (
        f"{path}: the language switcher links {links}, not each edition's home {homes}"
    )
