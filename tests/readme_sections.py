"""A README's `## heading` section, read as the study tests check it: what it says, and its tables' cells."""

from __future__ import annotations


class Section:
    def __init__(self, readme: str, heading: str):
        self.readme, self.heading = readme, heading

    def text(self) -> str:
        return self.readme.split(f"## {self.heading}\n")[1].split("\n## ")[0]

    def says(self, phrase: str) -> bool:
        """The section says ``phrase`` (line breaks read as spaces)."""
        return phrase in " ".join(self.text().split())

    def tables(self) -> list[list[list[str]]]:
        """Each table of the section: its rows as cells (header first, the |---| line dropped)."""
        found, current = [], []
        for line in self.text().splitlines() + [""]:
            if line.startswith("|---"):
                continue
            if line.startswith("| "):
                current.append([c.strip() for c in line.strip().strip("|").split("|")])
            elif current:
                found.append(current)
                current = []
        return found
