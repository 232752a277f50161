"""The wheel's description (hatchling's custom metadata hook, pyproject.toml): README.md, with each of
its links into docs/site/ (which work in the repository and nowhere else: not on a package index,
not in `pip show`) turned into the name of the page installed with the wheel, read with `eobatch
docs <page>`; its images (screenshots of docs/site/) become their alt text."""

from __future__ import annotations

import re
from pathlib import Path

from hatchling.metadata.plugin.interface import MetadataHookInterface

_IMAGE = re.compile(r"!\[([^\]]*)\]\((?:\./)?docs/site/[^)\s]+\)")
_LINK = re.compile(r"\[([^\]]+)\]\((?:\./)?docs/site/([\w.-]+?)\.md(?:#([\w-]+))?\)")
_OTHER_RELATIVE = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def description(readme: str) -> str:
    text = _IMAGE.sub(lambda m: f"*{m.group(1)}*" if m.group(1) else "", readme)
    text = _LINK.sub(lambda m: f"{m.group(1)} (`eobatch docs {m.group(2)}`"
                               + (f", section {m.group(3).replace('-', ' ')}" if m.group(3) else "") + ")", text)
    left = _OTHER_RELATIVE.findall(text)
    if left:
        raise ValueError(f"README.md: relative links that no page installed with the wheel answers: {left}")
    return text


class DescriptionHook(MetadataHookInterface):
    PLUGIN_NAME = "custom"

    def update(self, metadata: dict) -> None:
        readme = (Path(self.root) / "README.md").read_text(encoding="utf-8")
        metadata["readme"] = {"content-type": "text/markdown", "text": description(readme)}
