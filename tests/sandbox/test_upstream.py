"""The capture proxy's view of a run's endpoint: its key in a file, token-id fields on or off."""

from __future__ import annotations

from pathlib import Path

import pytest

from sclated.errors import FailedPrecondition
from sclated.sandbox._proxy import UPSTREAM_KEY_FILE, upstream_env


def test_the_key_goes_into_a_private_file_not_the_environment(tmp_path: Path) -> None:
    env = upstream_env(tmp_path, "VENDOR_KEY", False, {"VENDOR_KEY": " sk-real \n"})
    assert env == {"SCLATE_UPSTREAM_API_KEY_FILE": f"/run/sclate/{UPSTREAM_KEY_FILE}"}
    key_file = tmp_path / UPSTREAM_KEY_FILE
    assert key_file.read_text() == "sk-real" and key_file.stat().st_mode & 0o777 == 0o600
    assert "sk-real" not in repr(env)
    # A later start without a key (a branch on the embedded model) leaves no stale key.
    assert upstream_env(tmp_path, "", True, {}) == {"SCLATE_REQUEST_TOKENS": "0"}
    assert not key_file.exists()


def test_a_missing_variable_names_itself(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match="VENDOR_KEY, which is not set in the daemon's environment"):
        upstream_env(tmp_path, "VENDOR_KEY", False, {})
    assert not (tmp_path / UPSTREAM_KEY_FILE).exists()
