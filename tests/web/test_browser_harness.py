"""The browser harness end to end, without the front end: a real server, a real
headless Chromium loading one of its routes and fetching another from the page."""

from boundctx.providers import ScriptedProvider

from tests._support.scripted import MODEL, settings


def test_page_loads_a_route_and_fetches_from_the_server(serve, page, tmp_path):
    server = serve(ScriptedProvider(lambda request: "hello"), settings=settings(), model_id=MODEL,
                   sessions_dir=str(tmp_path / "sessions"))

    response = page.goto(server.url + "/health")
    assert response is not None and response.status == 200
    # Chromium shows a JSON response as its text in a <pre>.
    assert page.inner_text("body") == '{"status":"ok"}'

    # Same origin: what the front end's own script will do.
    models = page.evaluate("""async () => {
        const r = await fetch("/v1/models");
        return {status: r.status, body: await r.json()};
    }""")
    assert models["status"] == 200
    assert [m["id"] for m in models["body"]["data"]] == [MODEL]
