"""The README's command blocks, as a fresh shell would run them."""

from __future__ import annotations

import re

from support.paths import REPO_ROOT

ROOT = REPO_ROOT


README = ROOT / "README.md"


def bash_commands(markdown: str) -> list[str]:
    """Each command of every ```bash block: continuation lines joined, comment-only lines left out."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", markdown, flags=re.S | re.M):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip() and not command.lstrip().startswith("#"):
                commands.append(" ".join(command.split()))
    return commands
