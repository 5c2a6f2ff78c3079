"""What the deployment tests (tests/deploy) share beyond tests/testing/ (the server
process, metrics and wire helpers, which PYTHONPATH holds: tests/deploy/CMakeLists.txt):
the deploy/ folder, the service name, and the npm packages of deploy/package.json.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from server_process import SOURCE_DIR

DEPLOY_DIR = SOURCE_DIR / "deploy"

# Names a server must know: the readiness probe and client-side health checks ask
# for it.
SERVICE_NAME = "layerserve.v1.LayerService"


@pytest.fixture(scope="session")
def node_modules():
    """deploy/package.json's packages, installed with `npm ci` from the committed
    lock file into the build tree (not the source tree); reinstalled only when the
    lock file changes."""
    npm_dir = Path(os.environ.get("LAYERSERVE_DEPLOY_NPM_DIR", "/tmp/layerserve-deploy-npm"))
    npm_dir.mkdir(parents=True, exist_ok=True)
    lock = (DEPLOY_DIR / "package-lock.json").read_bytes()
    stamp = npm_dir / "installed-lock.json"
    if not stamp.exists() or stamp.read_bytes() != lock:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(DEPLOY_DIR / name, npm_dir / name)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=npm_dir, check=True, timeout=600)
        stamp.write_bytes(lock)
    return npm_dir / "node_modules"
