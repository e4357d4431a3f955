"""The public names of every whestbench package stay what the API says they are, whatever has been
imported: Python binds a submodule onto its package when the submodule is imported, so a public name
equal to a submodule's name turns from a function into a module (``whestbench.dataset.metadata``
did, once a bake had run in-process).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import types

import pytest

import whestbench

# Third-party extras whose absence may keep a submodule from importing (never a whestbench module).
OPTIONAL = {"torch", "triton", "numba", "matplotlib"}

# whestbench 0.16.2's public names that scripts call, and what each one is.
FUNCTION, CLASS = "function", "class"
API: dict[str, dict[str, str]] = {
    "whestbench": {
        "load_dataset": FUNCTION, "metadata": FUNCTION, "iter_mlps": FUNCTION, "mlp_at": FUNCTION,
        "create_dataset": FUNCTION, "merge_datasets": FUNCTION, "combine_split_datasets": FUNCTION,
        "publish_dataset": FUNCTION, "MLP": CLASS, "InvalidDatasetError": CLASS, "SCHEMA_VERSION": "3.0",
    },
    "whestbench.dataset": {
        "create_dataset": FUNCTION, "load_dataset": FUNCTION, "metadata": FUNCTION, "iter_mlps": FUNCTION,
        "mlp_at": FUNCTION, "MLP": CLASS, "InvalidDatasetError": CLASS, "SCHEMA_VERSION": "3.0",
        "DEFAULT_SPLIT": "public",
    },
    "whestbench.dataset_io": {
        "merge_datasets": FUNCTION, "combine_split_datasets": FUNCTION, "read_metadata": FUNCTION,
        "validate_metadata": FUNCTION, "make_features": FUNCTION, "InvalidDatasetError": CLASS,
        "MergeIncompatibleError": CLASS, "MergeIncompleteError": CLASS, "MergeOverlapError": CLASS,
        "MergeCorruptError": CLASS, "SCHEMA_VERSION": "3.0", "DEFAULT_SPLIT": "public",
    },
    "whestbench.dataset_torch": {"create_dataset_torch": FUNCTION},
    "whestbench.cli": {"main": FUNCTION},
}


def _import_every_submodule() -> list[str]:
    """Import every whestbench module (``__main__`` runs the CLI, so not that one); the names of
    those that could not be imported for want of an optional extra."""
    skipped = []
    for info in pkgutil.walk_packages(whestbench.__path__, "whestbench."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            if (exc.name or "").split(".")[0] not in OPTIONAL:
                raise
            skipped.append(info.name)
    return skipped


# Every package's name (walking imports the packages' __init__ only; the tests import the rest).
PACKAGES = ["whestbench", *(i.name for i in pkgutil.walk_packages(whestbench.__path__, "whestbench.") if i.ispkg)]


def _public_names(package: types.ModuleType) -> set[str]:
    return set(getattr(package, "__all__", ())) | set(getattr(package, "_EXPORTS", {}))


def _kind(value: object) -> str:
    if inspect.isclass(value):
        return CLASS
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return FUNCTION
    return value if isinstance(value, str) else type(value).__name__


def test_every_submodule_imports():
    skipped = _import_every_submodule()
    if all(importlib.util.find_spec(extra) for extra in OPTIONAL):
        assert skipped == []


def test_the_packages_walked_include_every_layer():
    assert {"whestbench", "whestbench.cli", "whestbench.compute", "whestbench.dataset", "whestbench.work"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_no_public_name_of_a_package_is_one_of_its_submodules(name):
    package = importlib.import_module(name)
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert not _public_names(package) & submodules


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_still_resolves_to_its_own_object_after_every_import(name):
    _import_every_submodule()
    package = importlib.import_module(name)
    exports = getattr(package, "_EXPORTS", {})
    for public in sorted(_public_names(package)):
        value = getattr(package, public)
        assert not isinstance(value, types.ModuleType), f"{name}.{public} is a module"
        if public in exports:
            assert value is getattr(importlib.import_module(exports[public]), public), f"{name}.{public}"


@pytest.mark.parametrize("module", sorted(API))
def test_the_0_16_public_names_are_what_0_16_made_them(module):
    _import_every_submodule()
    mod = importlib.import_module(module)
    got = {name: _kind(getattr(mod, name, None)) for name in API[module]}
    assert got == API[module]


def test_the_merge_errors_are_invalid_dataset_errors_and_value_errors():
    from whestbench import dataset_io

    for name in ("MergeIncompatibleError", "MergeIncompleteError", "MergeOverlapError", "MergeCorruptError"):
        assert issubclass(getattr(dataset_io, name), dataset_io.InvalidDatasetError)
    assert issubclass(dataset_io.InvalidDatasetError, ValueError)


def test_an_error_an_api_call_raises_carries_its_problem_where_and_fix(tmp_path):
    """A caller reads what went wrong, about what, and what to do, as fields (``str`` is the three joined)."""
    from whestbench.errors import DatasetSourceError, InputPathError, OutputExistsError, UsageError, render

    (tmp_path / "taken").mkdir()
    (tmp_path / "file").write_text("x")
    small = dict(n_samples=100, width=4, depth=2)
    with pytest.raises(OutputExistsError) as taken:
        whestbench.create_dataset(1, output_path=tmp_path / "taken", **small)
    assert taken.value.fix == "choose a new directory or remove it first."
    assert taken.value.problem == f"--output {tmp_path / 'taken'} already exists;" and taken.value.where is None
    with pytest.raises(UsageError) as under_file:
        whestbench.create_dataset(1, output_path=tmp_path / "file" / "x", **small)
    assert under_file.value.where == f"--output {tmp_path / 'file' / 'x'}"
    assert (under_file.value.problem, under_file.value.fix) == (f"{tmp_path / 'file'} is a file, not a directory;",
                                                                "choose another path.")
    with pytest.raises(DatasetSourceError) as absent:
        whestbench.load_dataset(str(tmp_path / "absent"))
    assert absent.value.fix.startswith("Check the path;")
    with pytest.raises(InputPathError) as partial:
        whestbench.merge_datasets([str(tmp_path / "absent")], output_dir=tmp_path / "out")
    assert partial.value.fix == "pass a dataset directory (the directory holding metadata.json)."
    for e in (taken.value, under_file.value, absent.value, partial.value):
        assert str(e) == render(e) == " ".join(filter(None, (f"{e.where}: {e.problem}" if e.where else e.problem, e.fix)))
