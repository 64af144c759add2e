"""The project's own files agree with each other: pyproject.toml builds without setuptools' deprecation
warnings, README.md names what scripts/setup.sh installs and what folders are read from, and the test command
says which file it is in while it runs."""

from __future__ import annotations

import re
import subprocess
import warnings
from pathlib import Path

import pytest

from engram.ingest.sources import TEXT_SUFFIXES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_pyproject_metadata_gives_setuptools_no_deprecation_warning() -> None:
    pytest.importorskip("setuptools", minversion="77", reason="SPDX license strings need setuptools>=77")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `project.license` as a table is a warning; here it fails
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert dist.metadata.license_expression == "MIT"
    requires = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"setuptools>=77"' in requires  # older setuptools refuses the string form: the build must not pick one


def test_readme_names_the_extras_setup_installs() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    installed = re.findall(r'pip install -q -e "(\.\[[a-z,]+\])"', setup)
    assert len(installed) == 1, "scripts/setup.sh should install engram once, with its extras"
    assert f'pip install -e "{installed[0]}"' in README
    for extra in installed[0][2:-1].split(","):
        assert f"`{extra}`" in README, f"README.md does not say what the {extra} extra adds"


def test_readme_names_every_extension_read_from_folders() -> None:
    for suffix in sorted(TEXT_SUFFIXES):
        assert f"`{suffix}`" in README, f"README.md does not say that folders' {suffix} files are read"


def test_the_test_command_shows_the_file_it_is_in_and_the_slowest_tests(tmp_path: Path) -> None:
    """scripts/test.sh, run on a two-test file: the file's name is printed before its tests run (a long test
    is no silent stretch), the slowest tests are listed, and the closing line still counts what passed."""
    probe = tmp_path / "test_probe_progress.py"
    probe.write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n", encoding="utf-8")
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test.sh"), str(probe), "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any(line.endswith("]") and f"{probe.name} ." in line for line in lines), run.stdout
    assert "slowest" in run.stdout, run.stdout
    assert re.search(r"\b2 passed\b", lines[-1]), lines[-1]


def test_the_api_reference_covers_every_public_name() -> None:
    """docs/api.md has a mkdocstrings entry (`::: module.Name`) for every name in `engram.__all__`, so the site's
    reference (built strictly in CI, where an entry that does not resolve fails) documents the whole public API."""
    import engram

    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    entries = set(re.findall(r"^::: ([\w.]+)$", reference, flags=re.MULTILINE))
    missing = [
        name
        for name in engram.__all__
        if not name.startswith("__") and f"{getattr(engram, name).__module__}.{name}" not in entries
    ]
    assert missing == []
