"""The wheel and sdist a release publishes, built as `python -m build`
builds them (the wheel from the sdist; offline, without an isolated build
environment): twine accepts them, the wheel holds every module of the
package, its metadata and the installed command and nothing else, and the
command runs from it. The version is written once."""

import configparser
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

import keras_transformer
from helpers.processes import ROOT

VERSION = keras_transformer.__version__


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """(sdist, wheel) paths."""
    output = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                             str(output), ROOT], capture_output=True, text=True)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return (output / f"keras_transformer-{VERSION}.tar.gz",
            output / f"keras_transformer-{VERSION}-py3-none-any.whl")


def _package_files():
    """The package's modules in the checkout, as paths in a wheel."""
    names = set()
    for folder, subfolders, files in os.walk(os.path.join(ROOT, "keras_transformer")):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        relative = os.path.relpath(folder, ROOT).replace(os.sep, "/")
        names.update(f"{relative}/{name}" for name in files if name.endswith(".py"))
    return names


def test_twine_accepts_both(dist):
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_wheel_holds_the_package_metadata_and_command_only(dist):
    _, wheel = dist
    info = f"keras_transformer-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = configparser.ConfigParser()
        entry_points.read_string(archive.read(f"{info}/entry_points.txt").decode())
    modules = {name for name in names if not name.startswith(info + "/")}
    assert modules == _package_files()
    assert {f"{info}/{name}" for name in ["METADATA", "WHEEL", "RECORD", "licenses/LICENSE"]
            } <= names
    fields = [line.split(": ", 1) for line in metadata.split("\n\n")[0].splitlines()]
    assert ["Name", "keras-transformer"] in fields and ["Version", VERSION] in fields
    assert ["Requires-Dist", "tensorflow<2.22,>=2.21"] in fields
    assert ["Description-Content-Type", "text/markdown"] in fields
    assert metadata.split("\n\n", 1)[1].startswith("# keras-transformer\n")  # the README
    assert dict(entry_points["console_scripts"]) == {
        "keras-transformer": "keras_transformer.commands:main"}


def test_sdist_holds_what_builds_documents_and_tests_the_package(dist):
    sdist, _ = dist
    top = f"keras_transformer-{VERSION}/"
    with tarfile.open(sdist) as archive:
        names = {name[len(top):] for name in archive.getnames()}
    assert {"setup.cfg", "pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "mkdocs.yml",
            "docs/index.md", "docs/api/layers.md", "docs/demo_training_curves.png",
            "examples/translate.py", "export/export_model.py", "tools/run_tests.sh",
            "tests/conftest.py"} <= names
    assert _package_files() <= names
    assert not [name for name in names if name.endswith(".pyc")]


def test_the_command_runs_from_the_wheel(dist, tmp_path):
    """Installed without its dependencies (they are this environment's),
    the wheel's `keras-transformer` starts the wheel's own package."""
    _, wheel = dist
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(target), str(wheel)], check=True)
    env = dict(os.environ, PYTHONPATH=str(target))
    command = target / "bin" / "keras-transformer"
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, env=env,
                             cwd=tmp_path)
    assert (version.returncode, version.stdout) == (0, f"keras-transformer {VERSION}\n")
    where = subprocess.run([sys.executable, "-c", "import keras_transformer.commands as c; "
                            "print(c.__file__)"], capture_output=True, text=True, env=env,
                           cwd=tmp_path)
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr


def test_the_version_is_written_once_and_in_the_changelog():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    assert config["metadata"]["version"] == "attr: keras_transformer.__version__"
    with open(os.path.join(ROOT, "CHANGELOG.md")) as changelog:
        headings = [line for line in changelog if line.startswith("## [")]
    assert any(line.startswith(f"## [{VERSION}] - ") for line in headings), headings
