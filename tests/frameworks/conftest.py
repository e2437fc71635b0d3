"""The frameworks profile: runstore's adapters against the frameworks they plug into.

These tests need the frameworks installed (``tests/frameworks/requirements.txt``), so they
are not part of the main test run: the folder is collected only with
``RUNSTORE_FRAMEWORKS=1``, which ``.ci/frameworks`` sets when it runs them in their own venv
(``.venv-frameworks``). This file imports no framework.
"""

from __future__ import annotations

import os

if os.environ.get("RUNSTORE_FRAMEWORKS") != "1":
    collect_ignore_glob = ["*"]
