"""The browser checks (tests/browser.py) on the Chinese edition, in a file of its own so that the
full tier's two workers check the two editions at once."""

import pytest

from tests.browser import *  # noqa: F403 (the checks and their fixtures, run here on one edition)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="session")
def edition():
    return "zh"
