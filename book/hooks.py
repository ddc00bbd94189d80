"""mkdocs hooks: the wiring only. The pages' macros are book/pages.py, the zh edition's line joining
book/cjk.py, the site around the pages (search, 404, the lessons' HTML) book/site.py."""

from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import CombinedEvent, event_priority

from book import pages, site


@event_priority(100)
def on_config(config):
    """The pages' outputs and figures are read from the docs folder this build uses (tests build
    copies)."""
    pages.DOCS = Path(config.docs_dir)
    return config


def edit_line(page, config):
    """The edit-on-GitHub / report-an-issue line under every page, in its edition's language."""
    repo = config.repo_url.rstrip("/")
    return pages.TEXT[pages.lang_of(page)]["edit"].format(
        edit=f"{repo}/edit/main/docs/{page.file.src_uri}",
        issue=f"{repo}/issues/new?title={page.file.src_uri}",
    )


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.endswith(".ipynb"):
        return markdown
    interrupted = sorted((pages.DOCS / "outputs").glob(".regen-journal-*.json"))
    if interrupted:
        raise PluginError(
            f"an interrupted regeneration left {interrupted[0].name}: run `python -m book.regen`"
        )
    return pages.render(markdown, page) + "\n\n---\n\n" + edit_line(page, config) + "\n"


def on_startup(command, dirty):
    """static-i18n recreates every file as a plain File, so notebooks stop being pages
    (static-i18n issue #198)."""
    from mkdocs_static_i18n import folder

    if getattr(folder.create_i18n_file, "_keeps_notebooks", False):
        return
    original = folder.create_i18n_file

    def create_i18n_file(file, *args, **kwargs):
        new = original(file, *args, **kwargs)
        if file.src_uri.endswith(".ipynb") and file.is_documentation_page():
            new.is_documentation_page = lambda: True
        return new

    create_i18n_file._keeps_notebooks = True
    folder.create_i18n_file = create_i18n_file


def on_page_content(html, page, config, files):
    """Notebooks skip on_page_markdown: give the lessons the same edit / report line as the
    chapters."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    from markdown import Markdown

    html = site.notebook_links(html, page, files)
    html = site.notebook_anchors(html, page, config)
    html = site.notebook_figure_alt(html, page)
    return html + "\n<hr>\n" + Markdown().convert(edit_line(page, config)) + "\n"


def on_post_page(output, page, config):
    return site.drop_alternate_links(output)


on_post_build = CombinedEvent(
    event_priority(50)(site.keep_404), event_priority(-200)(site.split_site)
)
