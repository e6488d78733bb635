"""Profiles and storage options: unknown keys are errors naming the key; s3a:// is s3://."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftlog.config import Config, ProfileError
from kraftlog.storage import Storage, normalize

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("profile", sorted((ROOT / "conf").glob("*.toml")), ids=lambda p: p.name)
def test_the_shipped_profiles_load(profile: Path) -> None:
    Config.load(profile)


@pytest.mark.parametrize(("text", "key"), [
    ("[warehouse]\npaht = 'x'\n", "'warehouse.paht'"),
    ("[sparkk]\nmaster = 'local'\n", "'sparkk'"),
    ("[identity]\n[[identity.override]]\nprefx = 'a'\n", "'prefx'"),
    ("[storage]\nendpoint = 'http://x'\n", "endpoint"),
])
def test_an_unknown_key_is_an_error_naming_it(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as e:
        Config.load(path).storage  # noqa: B018 (storage options are checked when used)
    assert key in str(e.value)
    assert str(path) in str(e.value) or "[storage]" in str(e.value)


def test_a_wrong_type_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[warehouse]\nlease_wait_seconds = 'soon'\n")
    with pytest.raises(ProfileError, match="lease_wait_seconds must be float"):
        Config.load(path)


def test_storage_options_come_from_the_environment_and_the_profile_wins(tmp_path: Path) -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_REGION": "eu-west-1", "HOME": "/root"}
    storage = Storage.from_environment({"AWS_REGION": "us-east-1"}, env)
    assert dict(storage.options) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_REGION": "us-east-1"}
    assert storage.delta_options()["AWS_ALLOW_HTTP"] == "true"


def test_paths_are_named_as_uris() -> None:
    assert normalize("s3a://bucket/a/b") == normalize("s3://bucket/a/b") == "s3://bucket/a/b"
    assert normalize("/x/y") == normalize("file:///x/y") == normalize("file:/x/y") == "file:/x/y"
    assert normalize("gs://b/k") == "gs://b/k"
