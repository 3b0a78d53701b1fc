"""The documentation site (mkdocs.yml, docs/): it builds with
`mkdocs build --strict` (no broken link, anchor or docstring), its API
reference covers every public module, and its pages render in a browser
(headless Chromium) with their navigation."""

import functools
import html.parser
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

from helpers.processes import ROOT

PACKAGES = ["layers", "models", "training", "data", "decoding", "export", "pretrained", "serving",
            "documents"]
GUIDE = ["Layers", "The model and presets", "Training", "Translating and evaluating",
         "Export and serving", "Serving real clients", "Pretrained models", "Benchmarks",
         "Bad input", "Development"]
API = [f"keras_transformer.{name}" for name in PACKAGES[:5] + ["evaluation"] + PACKAGES[5:]]

# Debian's chromium, as root and offline: no sandbox (root), and nothing
# that reaches for the network (updates, sync, QUIC, background services).
CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as `mkdocs build --strict` writes it."""
    output = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         os.path.join(ROOT, "mkdocs.yml"), "--site-dir", str(output)],
        capture_output=True, text=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stderr[-5000:]
    return output


def test_readme_is_short_and_links_to_the_site_s_pages():
    """The README keeps the overview and the commands and links to the
    guide; every page it links to (and anchor, where given) exists."""
    with open(os.path.join(ROOT, "README.md")) as readme:
        text = readme.read()
    assert len(text.splitlines()) < 300
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", text)
    pages = {page for page, _ in links}
    with open(os.path.join(ROOT, "mkdocs.yml")) as config:
        nav = config.read()
    for name in ["Home", *GUIDE]:
        page = re.search(rf"- {name}: (\S+)", nav).group(1)
        assert f"docs/{page}" in pages, f"README.md does not link to {name} (docs/{page})"
    for page, anchor in links:
        with open(os.path.join(ROOT, page)) as linked:
            headings = [line.lstrip("#").strip() for line in linked if line.startswith("#")]
        if anchor:  # Markdown's anchors: lower case, spaces as hyphens
            assert anchor in [re.sub(r"[^\w -]", "", h).lower().replace(" ", "-")
                              for h in headings], (page, anchor)


@pytest.mark.slow
def test_site_builds_strictly_with_every_page_and_image(site):
    for page in ["index.html", "changelog/index.html", "404.html",
                 *(f"api/{name.split('.')[1]}/index.html" for name in API)]:
        assert (site / page).is_file(), page
    # The pages show these pictures from docs/; the site serves them.
    for picture in ["demo_training_curves.png", "demo_attention_layer2.png"]:
        assert (site / picture).read_bytes() == open(os.path.join(ROOT, "docs", picture),
                                                     "rb").read()
    changelog = (site / "changelog" / "index.html").read_text()
    import keras_transformer
    assert f"[{keras_transformer.__version__}]" in changelog


def test_api_reference_has_every_public_module(site):
    """A module added to the package and forgotten in docs/api/ fails here."""
    for package in PACKAGES:
        page = (site / "api" / package / "index.html").read_text()
        folder = os.path.join(ROOT, "keras_transformer", package)
        for file in sorted(os.listdir(folder)):
            if file.endswith(".py") and not file.startswith("_"):
                name = f"keras_transformer.{package}.{file[:-3]}"
                assert f'id="{name}"' in page, f"docs/api/{package}.md lacks ::: {name}"


class _Page(html.parser.HTMLParser):
    """What a test needs of a rendered page: its title, the primary
    navigation's links, the ids of the headings, the copy buttons that the
    theme's JavaScript adds to code blocks."""

    def __init__(self, dom):
        super().__init__()
        self.title, self.nav, self.headings, self.copy_buttons = "", [], set(), 0
        self._in, self._nav_depth, self._link = None, 0, None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "title":
            self._in = "title"
        if tag == "nav" and ("md-nav--primary" in classes or self._nav_depth):
            self._nav_depth += 1
        if tag == "a" and self._nav_depth and "md-nav__link" in classes:
            self._link = [attrs.get("href"), ""]
        if tag in ("h1", "h2", "h3", "h4") and attrs.get("id"):
            self.headings.add(attrs["id"])
        if tag == "button" and attrs.get("data-clipboard-target"):
            self.copy_buttons += 1

    def handle_endtag(self, tag):
        if tag == "title":
            self._in = None
        if tag == "nav" and self._nav_depth:
            self._nav_depth -= 1
        if tag == "a" and self._link:
            self.nav.append((self._link[0], " ".join(self._link[1].split())))
            self._link = None

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        if self._link:
            self._link[1] += data


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_request(self, code="-", size="-"):
        self.server.requests.append((self.path, int(code)))


@pytest.fixture()
def served(site):
    """The site on a local HTTP server: (base URL, the requests it answered)."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(site)))
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", server.requests
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get "
                                             "install chromium), so the site was not opened "
                                             "in a browser")
def test_pages_render_in_chromium_with_their_navigation(served, tmp_path):
    base, requests = served
    urls = {"home": base, "guide": base + "translating/", "api": base + "api/layers/"}
    # One browser per page, side by side: Chromium's start-up is most of the
    # time, and it spends it waiting.
    browsers = {page: subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / page}", "--dump-dom", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for page, url in urls.items()}
    pages = {}
    for page, browser in browsers.items():
        dom, log = browser.communicate(timeout=180)
        assert browser.returncode == 0 and "</html>" in dom, log[-3000:]
        pages[page] = _Page(dom)

    for page in pages.values():
        titles = [text for _, text in page.nav]
        for title in ["Home", *GUIDE, *API, "Changelog"]:
            assert title in titles, (title, titles)
    assert pages["home"].title.strip() == "keras-transformer"
    assert pages["guide"].title.strip() == "Translating and evaluating - keras-transformer"
    assert pages["api"].title.strip() == "keras_transformer.layers - keras-transformer"
    # The API page: mkdocstrings' headings of a module, a class and a method.
    assert {"keras_transformer.layers", "keras_transformer.layers.attention",
            "keras_transformer.layers.attention.MultiHeadAttention",
            "keras_transformer.layers.attention.MultiHeadAttention.key_value_cache"
            } <= pages["api"].headings
    # The theme's JavaScript ran: it gives every code block a copy button.
    assert pages["home"].copy_buttons >= 3
    # Every page, style sheet, script and picture the browsers asked for was there.
    assert all(code == 200 for _, code in requests), requests
    asked = [path for path, _ in requests]
    assert "/demo_attention_layer2.png" in asked
    assert any(path.startswith("/assets/stylesheets/main.") for path in asked), asked
    assert any(path.startswith("/assets/javascripts/bundle.") for path in asked), asked
