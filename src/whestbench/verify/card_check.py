"""verify's card check: the card (README.md) is data, since its ``configs`` block decides what plain
``datasets.load_dataset`` finds. The check reads the block back (``format/card.read_configs``),
compares it with the one the metadata implies (``format/card.configs_block``) and asks ``datasets``
itself, offline, which files each split resolves to."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from whestbench.format.card import UNREADABLE, configs_block, read_configs, split_configs
from whestbench.format.reader import CARD_FILE, data_files
from whestbench.hubenv import import_hub


def card_verdict(root: Any, md: dict[str, Any]) -> tuple[bool, str]:
    """``(ok, detail)``: README.md's ``configs`` block, when it has one, is the one ``md`` implies
    (``configs_block``), a dataset that needs one has a README.md, and plain ``datasets`` resolves
    every split under the config the card gives it to that split's shards (``load_dataset_builder``
    offline: files are matched, no row is read; a 0.16 card without a block passes when the automatic
    layout finds every split). Never raises on a damaged dataset."""
    handle, root = root, Path(root)  # an open DatasetDir lists each split's shards once
    want = configs_block(md)
    fix = "re-run the bake, merge or combine-splits that made it: a re-run rewrites the card"
    readme = root / CARD_FILE
    got: Any = []
    if readme.is_file():
        try:
            got = read_configs(readme)
        except UNREADABLE as e:
            return False, f"README.md's front matter cannot be read ({type(e).__name__}: {e}); {fix}"
    elif readme.exists() or readme.is_symlink():
        return False, f"README.md is not a regular file; {fix}"
    if got != want and (got or readme.is_file() is False and bool(want)):
        where = "README.md is missing" if not readme.is_file() else "README.md's configs block is not the one metadata.json implies"
        return False, f"{where} (it has {_show_configs(got)}, the splits need {_show_configs(want)}); {fix}"
    datasets = import_hub("datasets")

    loaded = []
    was = os.environ.get("HF_DATASETS_OFFLINE")
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    try:
        with tempfile.TemporaryDirectory(prefix="whest-card-") as cache:
            for split, config in split_configs(md).items():
                try:
                    files = sorted(p.name for p in data_files(handle, split))
                    # absolute: datasets takes a relative name that is a split word ("eval", "test") for a file pattern
                    builder = datasets.load_dataset_builder(str(root.resolve()), name=config, cache_dir=cache)
                    resolved = sorted(Path(str(f)).name for f in (builder.config.data_files or {}).get(split, []))
                except Exception as e:  # datasets' own words, on one line: what a user of plain datasets would get
                    return False, (f"datasets.load_dataset({str(root)!r}, {config!r}, split={split!r}) fails: "
                                   f"{type(e).__name__}: {' '.join(str(e).split())[:300]}; {fix}")
                if resolved != files:
                    return False, (f"datasets resolves split {split!r} of config {config!r} to {resolved or 'no file'}, "
                                   f"not to its shards {files}; {fix}")
                loaded.append(f"{split} (config {config!r})")
    finally:
        if was is None:
            os.environ.pop("HF_DATASETS_OFFLINE", None)
        else:
            os.environ["HF_DATASETS_OFFLINE"] = was
    block = ("README.md's configs block matches metadata.json" if got else
             "no configs block (datasets' automatic layout)" if want else "no configs block needed")
    return True, f"{block}; datasets.load_dataset finds {', '.join(loaded)}"


def _show_configs(configs: Any) -> str:
    if not configs:
        return "no configs block"
    if not isinstance(configs, list):
        return "a configs entry that is not a list"
    shown = []
    for c in configs:
        if isinstance(c, dict):
            files = c.get("data_files") if isinstance(c.get("data_files"), list) else []
            splits = [f.get("split") for f in files if isinstance(f, dict)]
            shown.append(f"{c.get('config_name')!s}: {', '.join(map(str, splits))}")
        else:
            shown.append(repr(c))
    return "[" + "; ".join(shown) + "]"
