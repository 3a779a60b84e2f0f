"""Where a GPU recipe may be written: a new or empty directory, or one ``gpu-recipe`` wrote before.

``cookbook gpu-recipe --out .`` once replaced a project's README.md; a directory is now
recognised as a recipe's by its marker file (or, from before the marker, by holding every
recipe file), and nothing else is written into.
"""

from __future__ import annotations

from pathlib import Path

RECIPE_FILES = ("sft_config.json", "lora_config.json", "recipe.json", "fsdp_config.yaml", "README.md", "train_gpu.py")
MARKER = ".cookbook-gpu-recipe.json"  # what says a directory holds a recipe written here


def check_recipe_dir(out_dir: str | Path, *, overwrite: bool) -> Path:
    """Refuse a non-empty ``out_dir`` unless it holds a recipe written before (its marker, or all of
    :data:`RECIPE_FILES` from before the marker existed) and ``overwrite``: ``--out .`` would
    replace a project's README.md."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file; pass a directory for the recipe")
    if not out.is_dir() or not any(out.iterdir()):
        return out
    if not ((out / MARKER).is_file() or all((out / n).is_file() for n in RECIPE_FILES)):
        raise FileExistsError(
            f"--out {out} is not empty and holds no recipe written by gpu-recipe; refusing to "
            "write README.md, recipe.json and train_gpu.py into it. Choose a new or empty --out"
        )
    if not overwrite:
        raise FileExistsError(
            f"--out {out} already holds a GPU recipe; pass --overwrite (overwrite=True) to "
            "rewrite its files, or choose another --out"
        )
    return out
