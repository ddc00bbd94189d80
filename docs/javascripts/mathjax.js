// Chapters: arithmatex marks each formula, written \( \) and \[ \]. Lessons (mkdocs-jupyter): a notebook's markdown
// cells keep their $ … $ and $$ … $$ in plain <p>, <li>, <td>. ignoreHtmlClass ".*|" skips every other element (one
// without a class too), so each element of a markdown cell, code aside, is marked for MathJax first.
function markNotebookMath() {
  for (const e of document.querySelectorAll(".jp-RenderedMarkdown, .jp-RenderedMarkdown *"))
    if (!e.closest("pre, code")) e.classList.add("jp-math");
}
window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"], ["$", "$"]], displayMath: [["\\[", "\\]"], ["$$", "$$"]],
        processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex|jp-math"},
  startup: {pageReady: () => { markNotebookMath(); return MathJax.startup.defaultPageReady(); }}
};
document$.subscribe(() => {                      // typeset again when Material swaps a page's content in
  if (window.MathJax && MathJax.typesetPromise) {
    const output = MathJax.startup.output;
    if (output && output.clearCache) output.clearCache();   // the CHTML output has a font cache, SVG has none
    markNotebookMath(); MathJax.typesetClear(); MathJax.texReset(); MathJax.typesetPromise();
  }
});
