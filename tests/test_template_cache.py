"""The report's templates, compiled once and kept (gpuci.report.render's bytecode cache):
a later gpuci renders from the compiled code, the same reports; a cache it cannot have or
cannot write costs a compile, never the report."""

from __future__ import annotations

import tempfile
from pathlib import Path

import jinja2
import pytest

from gpuci.formats import read_verdict
from gpuci.report import render

VERDICT = read_verdict(Path(__file__).parent / "data" / "report" / "verdict_all.json")
LINKS = render.ReportLinks(report_url=None, pipeline_url=None, job_url=None)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A gpuci that has built no environment yet, its temporary folder `tmp_path`."""
    monkeypatch.setattr(render, "_ENVIRONMENTS", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def both() -> tuple[str, str]:
    return render.render_html(VERDICT), render.render_markdown(VERDICT, links=LINKS)


def test_a_later_gpuci_renders_from_the_compiled_templates(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = both()
    kept = sorted(p.name for p in fresh.glob("_jinja2-cache-*/gpuci-*.cache"))
    assert len(kept) == 2  # one per template, each under its environment's digest
    assert kept[0].split("-")[1] != kept[1].split("-")[1]

    def no_compile(*args: object, **kwargs: object) -> object:
        raise AssertionError("compiled again")

    monkeypatch.setattr(render, "_ENVIRONMENTS", {})
    monkeypatch.setattr(jinja2.Environment, "compile", no_compile)
    assert both() == first


def test_another_environment_or_module_never_reads_the_kept_code(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what Jinja2 does not key on, the settings compiled in, is in the files' names
    html = render._bytecode_cache(html=True)
    markdown = render._bytecode_cache(html=False)
    assert isinstance(html, jinja2.FileSystemBytecodeCache)
    assert isinstance(markdown, jinja2.FileSystemBytecodeCache)
    assert html.pattern != markdown.pattern
    changed = fresh / "render.py"
    changed.write_text(Path(render.__file__).read_text() + "# autoescape changed\n")
    monkeypatch.setattr(render, "__file__", str(changed))
    again = render._bytecode_cache(html=True)
    assert isinstance(again, jinja2.FileSystemBytecodeCache)
    assert again.pattern != html.pattern


def test_no_folder_for_the_cache_still_renders(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = both()
    monkeypatch.setattr(render, "_ENVIRONMENTS", {})
    monkeypatch.setattr(tempfile, "tempdir", str(fresh / "missing"))
    assert render._bytecode_cache(html=True) is None
    assert both() == expected


def test_a_cache_it_cannot_write_still_renders(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", full_disk)
    html, markdown = both()
    assert "<html" in html and "gpuci" in markdown
    assert not list(fresh.glob("_jinja2-cache-*/gpuci-*.cache"))
