"""seed_protocol: each protocol's estimator-seed rule, the 4.0 salt, and that nothing there reads the environment."""

from __future__ import annotations

import hashlib

import pytest

from whestbench.compute.seed_protocol import SALT_ENV, seed_rule, v4_estimator_seed, v4_salt
from whestbench.compute.seeds import estimator_seed

SALT = bytes(range(32))
SEED = 6004799503160661
V4 = {"name": "whestbench_kdf_per_mlp_seeds", "version": "4.0", "kdf": "blake2b-keyed",
      "salt_digest": hashlib.sha256(SALT).hexdigest()}


def test_protocol_2_takes_the_stored_seed_as_it_is():
    assert seed_rule("2.0")(SEED) == SEED


def test_protocol_3_derives_the_seed_from_the_seed_sequence():
    assert seed_rule("3.0")(SEED) == estimator_seed(SEED)


def test_protocol_4_matches_the_facts_anchor():
    assert v4_estimator_seed(SEED, SALT) == 1914761819  # facts §2.1
    assert seed_rule("4.0", V4 | {"salt_source": "metadata", "salt": SALT.hex()})(SEED) == 1914761819


def test_protocol_4_takes_a_withheld_salt_only_from_what_the_caller_passes(monkeypatch):
    monkeypatch.setenv(SALT_ENV, SALT.hex())  # set, but this module must not read it
    sp = V4 | {"salt_source": "env", "salt_id": "s1"}
    with pytest.raises(ValueError, match=f"export the salt as hex in {SALT_ENV}"):
        seed_rule("4.0", sp)
    assert seed_rule("4.0", sp, env_salt=SALT.hex())(SEED) == 1914761819


@pytest.mark.parametrize("salt, message", [("zz", "not hex"), (" ", "export the salt"), ("00" * 32, "salt_digest")])
def test_a_bad_withheld_salt_is_refused_naming_why(salt, message):
    with pytest.raises(ValueError, match=message):
        v4_salt(V4 | {"salt_source": "env"}, salt)


def test_protocol_4_needs_the_seed_protocol_block():
    with pytest.raises(ValueError, match="pass the dataset's metadata"):
        seed_rule("4.0")


def test_an_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="unknown seed_protocol version '9.9'"):
        seed_rule("9.9")
