"""``python -m tests.web.screenshots`` (from the repository root): the README's pictures
of the front end (docs/screens/*.png), taken in headless Chromium from a scripted server
with a sample session. Run it after changing what a screen shows."""

import pathlib
import tempfile

from playwright.sync_api import sync_playwright

from boundctx.providers import ScriptedProvider
from boundctx.serve import create_app
from boundctx.transcript.sample import write_sample

from tests._support.chromium import chromium_path
from tests._support.running import Running
from tests._support.scripted import LOG, MODEL, answer, settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screens"


def main() -> int:
    folder = pathlib.Path(tempfile.mkdtemp()) / "sessions"
    folder.mkdir()
    write_sample(folder / "sample.jsonl", target_bytes=400_000, big_every=120, big_bytes=(70_000, 90_000),
                 compaction_every=300)
    (folder / "build-log.jsonl").touch()
    server = Running(create_app(ScriptedProvider(answer, context_window=4096), settings=settings(),
                                model_id=MODEL, sessions_dir=str(folder)))
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True)
        page = browser.new_page(viewport={"width": 900, "height": 640})
        page.goto(server.url + "/#/")
        page.wait_for_selector("#session-list a")
        page.screenshot(path=OUT / "sessions.png")
        page.goto(server.url + "/#/s/sample")
        page.wait_for_selector("#messages .message")
        page.screenshot(path=OUT / "session.png")
        page.goto(server.url + "/#/s/build-log")
        page.wait_for_selector("#session-meta")
        log = folder.parent / "build.log"
        log.write_text(LOG)
        page.get_by_label("Attach a text file").set_input_files(str(log))
        page.wait_for_selector("#attached .chip")
        page.get_by_label("Message", exact=True).fill("Which step failed?")
        page.get_by_role("button", name="Send", exact=True).click()
        page.wait_for_selector("#messages .message.assistant:not([aria-busy])")
        page.screenshot(path=OUT / "chat.png")
        page.goto(server.url + "/#/settings")
        page.wait_for_selector("#settings-form .setting")
        page.screenshot(path=OUT / "settings.png")
        browser.close()
    server.stop()
    for png in sorted(OUT.glob("*.png")):
        print(png.relative_to(ROOT), png.stat().st_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
