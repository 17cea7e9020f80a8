"""docs/configuration.md lists every setting with its environment variable."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tjobs.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_is_documented_with_its_environment_variable() -> None:
    text = DOC.read_text()
    for name, field in Settings.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            for key in section.model_fields:
                assert f"`{name}.{key}` | `TJOBS_{name.upper()}__{key.upper()}`" in text, f"{name}.{key}"
        else:
            assert f"`{name}` | `TJOBS_{name.upper()}`" in text, name
