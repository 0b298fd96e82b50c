"""docs/layout.md names every module of src/assay (migrations aside): a module added without a
line there fails here, so the page stays the map of the code."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_module_is_named_in_the_layout_page() -> None:
    text = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    src = REPO / "src" / "assay"
    modules = [p for p in src.rglob("*.py")
               if p.name != "__init__.py" and "migrations" not in p.relative_to(src).parts]
    assert modules
    missing = [str(p.relative_to(src)) for p in modules if p.name not in text and f"`{p.stem}`" not in text]
    assert not missing, f"docs/layout.md does not name: {missing}"
