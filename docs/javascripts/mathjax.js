// Chapters: arithmatex marks each formula, written \( \) and \[ \]. Lessons (mkdocs-jupyter): a notebook's markdown
// cells keep their $ … $ and $$ … $$ in plain <p>, <li>, <td> inside .jp-RenderedMarkdown. MathJax skips an element
// whose class matches ignoreHtmlClass (here: any class at all, so Material's chrome and a cell's code and outputs)
// unless it matches processHtmlClass; an element with no class inherits its parent's choice. So a formula is typeset
// inside an arithmatex element or anywhere in a markdown cell, and the page's elements keep their own classes
// (Material styles only the tables without a class: a class on every element for MathJax left them unstyled).
window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"], ["$", "$"]], displayMath: [["\\[", "\\]"], ["$$", "$$"]],
        processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: "[^ ]+", processHtmlClass: "arithmatex|jp-RenderedMarkdown"},
  startup: {pageReady: () => MathJax.startup.defaultPageReady().then(alignInline)}
};
// An inline formula scrolls sideways in its own inline-block (extra.css) instead of shrinking on a phone. A box that
// scrolls sits on the line by its bottom edge: give it the svg's vertical-align (its depth below the baseline), so it
// sits where the svg alone did.
function alignInline() {
  for (const c of document.querySelectorAll('mjx-container[jax="SVG"]:not([display="true"])')) {
    const svg = c.querySelector(":scope > svg");
    if (svg && svg.style.verticalAlign) c.style.verticalAlign = svg.style.verticalAlign;
  }
}
document$.subscribe(() => {                      // typeset again when Material swaps a page's content in
  if (window.MathJax && MathJax.typesetPromise) {
    const output = MathJax.startup.output;
    if (output && output.clearCache) output.clearCache();   // the CHTML output has a font cache, SVG has none
    MathJax.typesetClear(); MathJax.texReset(); MathJax.typesetPromise().then(alignInline);
  }
});
