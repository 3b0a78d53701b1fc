"""The wheel and sdist a release publishes, built as `python -m build`
builds them (the wheel from the sdist; offline, without an isolated build
environment): twine accepts them, the wheel holds every module of the
package, its metadata and the installed command and nothing else, and its
command, installed into a fresh environment, translates. The version is
written once."""

import configparser
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

import keras_transformer
from helpers import processes
from helpers.processes import ROOT

pytestmark = pytest.mark.slow  # trains or runs jobs in processes of their own

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
    """The package's modules (and the server's page) in the checkout, as
    paths in a wheel."""
    names = set()
    for folder, subfolders, files in os.walk(os.path.join(ROOT, "keras_transformer")):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        relative = os.path.relpath(folder, ROOT).replace(os.sep, "/")
        names.update(f"{relative}/{name}" for name in files if name.endswith((".py", ".html")))
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


def test_the_wheel_s_command_translates_as_the_script_does(dist, small_run, tmp_path):
    """The wheel installed into a fresh virtual environment (its
    dependencies are this environment's, on its path, so nothing is
    downloaded): `keras-transformer translate` runs the wheel's own package
    and writes what `examples/translate.py` of the checkout writes."""
    _, wheel = dist
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    python = fresh / "bin" / "python"
    site_packages = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True, text=True, check=True).stdout.strip()
    # A path line adds this environment's packages after the fresh ones; it
    # does not run their .pth files, so the checkout's editable install is
    # not seen.
    with open(os.path.join(site_packages, "dependencies.pth"), "w") as pth:
        pth.write(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True)

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    where = subprocess.run([str(python), "-c", "import keras_transformer as k; print(k.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert where.stdout.startswith(site_packages), where.stdout + where.stderr
    command = fresh / "bin" / "keras-transformer"
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, env=env,
                             cwd=tmp_path)
    assert (version.returncode, version.stdout) == (0, f"keras-transformer {VERSION}\n")

    source = tmp_path / "de.txt"
    source.write_text("Das Haus ist groß.\n\nder Baum und das Haus\nHier war ein Haus nicht "
                      "klein.\n")
    installed = subprocess.run([str(command), "translate", str(small_run), "--input", str(source),
                                "--output", str(tmp_path / "installed.txt")],
                               capture_output=True, text=True, env=env, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    script = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "translate.py"),
                             str(small_run), "--input", str(source), "--output",
                             str(tmp_path / "script.txt")],
                            capture_output=True, text=True, env=processes.environment())
    assert script.returncode == 0, script.stderr[-3000:]
    translations = (tmp_path / "installed.txt").read_text()
    assert translations == (tmp_path / "script.txt").read_text()
    lines = translations.splitlines()
    assert len(lines) == 4 and lines[1] == "" and any(lines)


def test_the_version_is_written_once_and_in_the_changelog():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    assert config["metadata"]["version"] == "attr: keras_transformer.__version__"
    with open(os.path.join(ROOT, "CHANGELOG.md")) as changelog:
        headings = [line for line in changelog if line.startswith("## [")]
    assert any(line.startswith(f"## [{VERSION}] - ") for line in headings), headings
