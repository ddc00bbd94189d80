// Search results: the Chinese index keeps the zero-width spaces the search plugin's jieba put between words (the
// search cuts its words there, book/hooks.py), and a result would show them, invisible but copied and read out.
// Each result is shown without them. (Material renders results as the list scrolls: every change is cleaned.)
(() => {
  const list = document.querySelector(".md-search-result__list");
  if (!list) return;
  const clean = () => {
    const walker = document.createTreeWalker(list, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode())
      if (n.nodeValue.includes("\u200b")) n.nodeValue = n.nodeValue.replaceAll("\u200b", "");
  };
  new MutationObserver(clean).observe(list, {childList: true, subtree: true});
})();
