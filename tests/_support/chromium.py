"""Where the browser tests and the front-end benchmark find a Chromium to drive."""

import os
import shutil

# The Debian /usr/bin/chromium wrapper prints a shell error on some machines; the binary
# behind it does not.
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium",)


def chromium_path():
    """The first chromium executable found: Debian's binary, then ``chromium`` or
    ``chromium-browser`` on PATH; None when there is none."""
    for path in (*CHROMIUM_CANDIDATES, shutil.which("chromium"), shutil.which("chromium-browser")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None
