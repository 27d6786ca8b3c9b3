"""The files of the reference front end as boundctx serve answers them (serve/ui.py):
exactly the listed ones, each with its type, the content security policy and the same
caching, without the API key; any other name is a 404, never a path. The page's ES
modules import only listed files, app.js reaches every one of them, the page preloads
each, and none writes markup."""

import re

import httpx
import pytest

from boundctx.providers import ScriptedProvider
from boundctx.serve.ui import FILES, HEADERS, WEB

from tests._support.scripted import MODEL, settings

JS = "text/javascript; charset=utf-8"


@pytest.fixture
def server(serve):
    # A server that asks for a key: the page and its files are served without one.
    return serve(ScriptedProvider(lambda r: "x"), settings=settings(), model_id=MODEL, api_keys={"sekrit"})


def test_the_web_folder_holds_exactly_the_listed_files():
    assert sorted(p.name for p in WEB.iterdir()) == sorted(FILES)


def test_every_listed_file_is_served_with_its_type_the_policy_and_no_key(server):
    assert FILES["index.html"].startswith("text/html") and FILES["app.css"].startswith("text/css")
    assert {name for name, kind in FILES.items() if kind == JS} == {p.name for p in WEB.glob("*.js")}
    for name, kind in FILES.items():
        for path in (f"/ui/{name}", "/") if name == "index.html" else (f"/ui/{name}",):
            r = httpx.get(server.url + path)
            assert r.status_code == 200, path
            assert r.headers["content-type"] == kind, path
            assert {k: r.headers.get(k) for k in HEADERS} == HEADERS, path
            assert r.content == (WEB / name).read_bytes(), path


@pytest.mark.parametrize("name", ["ui.py", "..%2Fui.py", "%2e%2e%2fapp.py", "APP.JS", "app.js.map", "app.mjs",
                                  "package.json", "", "web/app.js", "app.js%00"])
def test_a_name_not_listed_is_a_404(server, name):
    r = httpx.get(f"{server.url}/ui/{name}")
    assert r.status_code == 404, name
    assert b"import" not in r.content and b"__all__" not in r.content


def test_the_page_loads_app_js_as_a_module_that_reaches_every_module_and_no_other_file():
    html = (WEB / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/ui/app.js">']
    imports = {p.name: re.findall(r'^import .* from "\./([^"]+)";$', p.read_text(), re.M) for p in WEB.glob("*.js")}
    assert all(target in FILES for targets in imports.values() for target in targets), imports
    reached, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(imports[name])
    assert reached == set(imports), imports  # no module is served that the page never loads
    # The page asks for them all at once: one round trip, not one per level of imports.
    preloaded = re.findall(r'<link rel="modulepreload" href="/ui/([^"]+)">', html)
    assert sorted(preloaded) == sorted(reached - {"app.js"})


def test_no_module_makes_markup_from_text():
    # Text from a model or a transcript is never markup: every node's text is set with
    # textContent, so no module writes HTML.
    for path in WEB.glob("*.js"):
        source = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "createContextualFragment"):
            assert sink not in source, (path.name, sink)
