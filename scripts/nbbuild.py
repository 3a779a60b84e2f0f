"""Tiny helper to author notebooks as Python lists of cells (outputs stripped).

Usage from a script: ``write("notebooks/00_quickstart.ipynb", [md("# Title"), code("x = 1"),
params("PRESET = 'tiny'  # ..."), ...])``.
"""

from __future__ import annotations

import nbformat


def md(text: str):
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str, tags: list[str] | None = None):
    cell = nbformat.v4.new_code_cell(text.strip("\n"))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def params(text: str):
    return code(text, tags=["parameters"])


def write(path: str, cells) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "accelerator": "TPU",
    }
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
    nbformat.write(nb, path)
