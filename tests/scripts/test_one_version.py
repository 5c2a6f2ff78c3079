"""One version for every package and binary: VERSION holds it, scripts/set-version
writes each copy, and a copy the script does not know about fails here."""
import importlib.machinery
import importlib.util
import pathlib
import re
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "set-version"


def load_script():
    loader = importlib.machinery.SourceFileLoader("set_version", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


set_version = load_script()


def test_every_copy_equals_the_version_file():
    done = subprocess.run([str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_file_carries_the_version_that_set_version_does_not_write():
    version = (ROOT / "VERSION").read_text().strip()
    places = {name for name, _, _ in set_version.PLACES} | set(set_version.DOCS) | {"VERSION"}
    # git grep: tracked files only. Lock files of other npm projects list their
    # dependencies' versions, which may equal ours by chance.
    hits = subprocess.run(["git", "grep", "-l", "-w", "-F", version, "--", ".",
                           ":!deploy/package-lock.json"],
                          cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    # Tests may assert the version through the package they test, never as a literal.
    assert sorted(set(hits) - places) == [], (
        f"these files carry {version} literally: add them to scripts/set-version's "
        "PLACES or read the version from where it is")


def test_set_version_rewrites_every_copy(tmp_path):
    for name in [n for n, _, _ in set_version.PLACES] + set_version.DOCS + ["VERSION"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    done = subprocess.run([str(SCRIPT), "--root", str(tmp_path), "12.34.5"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "VERSION").read_text() == "12.34.5\n"
    for name, pattern, count in set_version.PLACES:
        found = [m.group(2) for m in re.finditer(pattern, (tmp_path / name).read_text())]
        assert found == ["12.34.5"] * count, name
    for name in set_version.DOCS:
        text = (tmp_path / name).read_text()
        assert "12.34.5" in text and not re.search(set_version.whole_word(
            (ROOT / "VERSION").read_text().strip()), text), name


def test_a_malformed_version_is_refused(tmp_path):
    shutil.copy(ROOT / "VERSION", tmp_path / "VERSION")
    done = subprocess.run([str(SCRIPT), "--root", str(tmp_path), "v1"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "MAJOR.MINOR.PATCH" in done.stderr
    assert (tmp_path / "VERSION").read_text() == (ROOT / "VERSION").read_text()
