"""The local registry the image tests push to: Debian's docker-registry on loopback, plain HTTP."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest
import yaml

from support.loopback import free_port


@pytest.fixture
def registry(tmp_path):
    """host:port of a registry that serves until the test ends (its storage under tmp_path)."""
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "error"},
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "registry-data")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    address = f"127.0.0.1:{port}"
    try:
        for _ in range(100):  # until its API answers (not a timing assertion: it fails below if never)
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"docker-registry never answered on {address}")
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
