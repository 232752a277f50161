"""eobatch.job.jars: the jars folder checked against the shipped SHA-256 list."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from eobatch import paths
from eobatch.errors import UsageError
from eobatch.job import jars


def _folder(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path]:
    folder = tmp_path / "jars"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    listing = tmp_path / "list.sha256"
    listing.write_text("".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items()))
    return folder, listing


def test_missing_unexpected_and_changed_jars_are_named_and_the_own_jar_is_never_listed(tmp_path):
    folder, listing = _folder(tmp_path, {"a.jar": b"a", "b.jar": b"b"})
    (folder / paths.JVM_EXTENSION).write_bytes(b"built here")
    assert jars.problems(str(folder), str(listing)) == []
    (folder / "b.jar").write_bytes(b"changed")
    (folder / "c.jar").write_bytes(b"c")
    (folder / "a.jar").unlink()
    assert jars.problems(str(folder), str(listing)) == ["missing a.jar", "not in the list: c.jar",
                                                        "b.jar does not have the listed SHA-256"]


def test_the_checkouts_resolved_jars_are_the_shipped_list():
    assert jars.problems(str(Path(paths.CHECKOUT) / ".jars")) == []
    assert len(jars.listed()) >= 5


def test_without_maven_it_says_how_to_get_the_jars(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("mvn") is None
    with pytest.raises(UsageError, match=r"needs Maven .* or put the listed jars .* yourself, or point EOBATCH_JARS_DIR "
                                         r"at a pre-built folder of them .*no Maven needed there"):
        jars.resolve(str(tmp_path / "jars"), log=lambda _m: None)


def test_a_launch_hashes_each_jar_once_per_identity_even_in_a_new_process(tmp_path, monkeypatch):
    """The check at each launch costs a stat per jar once a jar is known: its digest is remembered
    by (device, inode, size, mtime, ctime) in the owner-only cache folder, which a new process (an
    Airflow task) reads; a jar touched is hashed again."""
    from eobatch.job import integrity

    folder, listing = _folder(tmp_path, {"a.jar": b"a" * 1000, "b.jar": b"b" * 1000})
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    hashed = []
    real = integrity._hash
    monkeypatch.setattr(integrity, "_hash", lambda f: hashed.append(f.name) or real(f))
    assert [Path(p).name for p in jars.checked(str(folder), str(listing))] == ["a.jar", "b.jar"]
    assert len(hashed) == 2
    jars.checked(str(folder), str(listing))
    monkeypatch.setattr(integrity, "_MEMO", {})  # what a new process starts with
    jars.checked(str(folder), str(listing))
    assert len(hashed) == 2
    (folder / "b.jar").touch()
    jars.checked(str(folder), str(listing))
    assert [Path(p).name for p in hashed[2:]] == ["b.jar"]
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0


def test_a_refused_folder_names_what_is_wrong_and_the_command(tmp_path, monkeypatch):
    folder, listing = _folder(tmp_path, {"a.jar": b"a", "b.jar": b"b"})
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    (folder / "a.jar").unlink()
    with pytest.raises(jars.JarsRefused, match=rf"missing a.jar.* Run `{jars.JARS_COMMAND}`: it resolves the listed jars again"):
        jars.checked(str(folder), str(listing))
    (folder / "b.jar").unlink()
    with pytest.raises(FileNotFoundError, match=rf"no JVM jars in .*run `{jars.JARS_COMMAND}`"):
        jars.checked(str(folder), str(listing))


def test_an_installed_products_jvm_jar_is_the_packages(tmp_path, monkeypatch):
    folder, _ = _folder(tmp_path, {"a.jar": b"a"})
    monkeypatch.setattr(paths, "BUNDLED_JVM_JAR", str(tmp_path / "missing" / paths.JVM_EXTENSION))
    (folder / paths.JVM_EXTENSION).write_bytes(b"built by make jars")
    monkeypatch.setattr(paths, "CHECKOUT", None)
    with pytest.raises(FileNotFoundError, match="install the eobatch wheel again"):
        jars.own_jvm_jar(str(folder))
    monkeypatch.setattr(paths, "CHECKOUT", str(tmp_path))
    assert jars.own_jvm_jar(str(folder)) == str(folder / paths.JVM_EXTENSION)  # a checkout builds its own


# -- the sets of jars, and the Maven settings they are resolved with ------------------------------------


def _settings(path: Path, mirror: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<settings><mirrors><mirror><id>company</id><mirrorOf>*</mirrorOf><url>{mirror}</url>"
                    "</mirror></mirrors></settings>")
    return path


def test_maven_runs_with_the_named_settings_else_the_users_own_else_central_only(tmp_path, monkeypatch):
    """The settings file passed to mvn (`-s`): --maven-settings, else EOBATCH_MAVEN_SETTINGS, else the
    user's ~/.m2/settings.xml (a company mirror honoured), else the product's Central-only file; a
    file named but missing is refused naming it. Nothing is downloaded here."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(jars.SETTINGS_ENV, raising=False)

    def passed(explicit=None):
        cmd = jars.mvn_command("mvn", jars.maven_settings(explicit)[0], str(tmp_path / "out"), ("core",))
        return cmd[cmd.index("-s") + 1]

    assert passed() == jars.PRODUCT_SETTINGS
    user = _settings(home / ".m2" / "settings.xml", "https://nexus.example/repository/maven")
    assert passed() == str(user) and jars.maven_settings()[1] == "the user's Maven settings"
    named = _settings(tmp_path / "platform-settings.xml", "https://artifactory.example/maven")
    monkeypatch.setenv(jars.SETTINGS_ENV, str(named))
    assert passed() == str(named)
    other = _settings(tmp_path / "other.xml", "https://other.example/maven")
    assert passed(str(other)) == str(other)
    monkeypatch.setenv(jars.SETTINGS_ENV, str(tmp_path / "gone.xml"))
    with pytest.raises(UsageError, match=rf"{jars.SETTINGS_ENV} names .*gone.xml, which is no file"):
        passed()


def test_only_the_s3_set_asks_maven_for_the_s3_profile():
    core = jars.mvn_command("mvn", "s.xml", "/out", ("core",))
    both = jars.mvn_command("mvn", "s.xml", "/out", ("core", "s3"))
    assert "-Ps3" not in core and "-Ps3" in both
    assert {n: jars.set_of(n) for n in jars.listed()} == {
        n: ("s3" if n.startswith(("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")) else "core")
        for n in jars.listed()}
    assert any(n.startswith("bundle-") for n in jars.listed(sets=("s3",)))
    assert not any(n.startswith(("bundle-", "hadoop-aws-")) for n in jars.listed(sets=("core",)))


def test_a_core_folder_serves_local_pipelines_and_refuses_an_s3_one_naming_the_command(tmp_path, monkeypatch):
    folder, listing = _folder(tmp_path, {"delta-spark_4.2_2.13-4.4.0.jar": b"d", "hadoop-aws-3.5.0.jar": b"h",
                                         "bundle-2.35.4.jar": b"b"})
    monkeypatch.setenv("EOBATCH_CACHE_DIR", str(tmp_path / "cache"))
    (folder / "hadoop-aws-3.5.0.jar").unlink()
    (folder / "bundle-2.35.4.jar").unlink()
    assert [Path(p).name for p in jars.checked(str(folder), str(listing), sets=("core",))] == [
        "delta-spark_4.2_2.13-4.4.0.jar"]
    monkeypatch.setattr(paths, "CHECKOUT", None)  # installed: the console command
    with pytest.raises(jars.JarsRefused, match=r"holds only the core jars .* needs the s3 set .*run "
                                               r"`eobatch jars --with s3`"):
        jars.checked(str(folder), str(listing), sets=("core", "s3"))
    (folder / "bundle-2.35.4.jar").write_bytes(b"not the listed bytes")  # a changed s3 jar: refused always
    with pytest.raises(jars.JarsRefused, match="bundle-2.35.4.jar does not have the listed SHA-256"):
        jars.checked(str(folder), str(listing), sets=("core",))


def test_eobatch_jars_chooses_the_s3_set_from_the_pipelines_folder(tmp_path):
    import yaml

    from eobatch.cli import _jar_sets

    folder = tmp_path / "pipelines"
    folder.mkdir()

    def pipeline(name: str, table: str) -> None:
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name, "source": {"kind": "files", "path": str(tmp_path / "landing")},
            "schema": "id STRING NOT NULL", "sink": {"table": table}, "quarantine": {"table": table + "_bad"}}))

    said: list[str] = []
    pipeline("local", str(tmp_path / "lake" / "local"))
    assert _jar_sets(None, str(folder), said.append) == ("core",)
    assert _jar_sets(["s3"], str(folder), said.append) == ("core", "s3")
    pipeline("on_s3", "s3a://bucket/lake/on_s3")
    assert _jar_sets(None, str(folder), said.append) == ("core", "s3")
    assert "pipeline(s) on_s3 of" in said[-1], said
