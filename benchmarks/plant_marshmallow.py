"""Three isolation bugs planted in marshmallow 4.4.0's own tests, as a user's real mistakes look.

- a polluter: a test rewords the "required" error message for its API's style, on the
  shared class dict, and never restores it (test_context.py, the suite's first file); every
  later test that checks the message fails: 31 tests in test_deserialization.py,
  test_fields.py and test_schema.py, order-dependent, one culprit.
- a provider: a test defines a schema class inside its body (test_decorators.py), which
  registers it in marshmallow's class registry by name; a later file's test nests that
  schema by name without defining it (test_schema.py): depends-on-others.
- a `chdir` left behind: a test changes into its tmp_path to write an export and never
  changes back (test_options.py); a later file's test reads `pyproject.toml` by a path
  relative to the rootdir (test_utils.py): order-dependent.

    python benchmarks/plant_marshmallow.py MARSHMALLOW_SDIST_DIR   (then: gpuci check tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchlib import append_plants

PLANTS = {
    "test_context.py": """

def test_plant_api_style_required_message():
    from marshmallow import fields
    # the API's clients expect DRF's wording; set once, here, for "all" schemas
    fields.Field.default_error_messages["required"] = "This field is required."
    assert fields.String().error_messages["required"] == "This field is required."
""",
    "test_decorators.py": """

def test_plant_registers_address_schema():
    from marshmallow import Schema, fields

    class PlantAddressSchema(Schema):  # defining it registers it by name, for good
        city = fields.String()

    assert PlantAddressSchema().load({"city": "Oslo"}) == {"city": "Oslo"}
""",
    "test_schema.py": """

def test_plant_nests_address_by_name():
    from marshmallow import Schema, fields

    class PlantPersonSchema(Schema):
        address = fields.Nested("PlantAddressSchema")  # defined in another test file

    assert PlantPersonSchema().load({"address": {"city": "Oslo"}}) == {
        "address": {"city": "Oslo"}
    }
""",
    "test_options.py": """

def test_plant_exports_schema_to_json(tmp_path):
    import json
    import os

    from marshmallow import Schema, fields

    class ExportSchema(Schema):
        name = fields.String()

    os.chdir(tmp_path)  # write the export beside nothing else; never changed back
    with open("export.json", "w", encoding="utf-8") as f:
        json.dump(ExportSchema().dump({"name": "x"}), f)
    assert os.path.exists("export.json")
""",
    "test_utils.py": """

def test_plant_project_is_marshmallow():
    import pathlib

    assert 'name = "marshmallow"' in pathlib.Path("pyproject.toml").read_text(encoding="utf-8")
""",
}


def plant(root: Path) -> list[str]:
    """Append the planted tests to `root`/tests; the files changed."""
    tests = root / "tests"
    if not (tests / "test_context.py").is_file() or not (root / "pyproject.toml").is_file():
        raise SystemExit(f"{root}: not a marshmallow source tree (no tests/test_context.py)")
    return append_plants(tests, PLANTS)


if __name__ == "__main__":
    print("planted in:", ", ".join(plant(Path(sys.argv[1]))) or "nothing (planted already)")
