window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex"}
};
document$.subscribe(() => {                      // typeset again when Material swaps a page's content in
  if (window.MathJax && MathJax.typesetPromise) {
    const output = MathJax.startup.output;
    if (output && output.clearCache) output.clearCache();   // the CHTML output has a font cache, SVG has none
    MathJax.typesetClear(); MathJax.texReset(); MathJax.typesetPromise();
  }
});
