"""Seed-protocol rules: which estimator seed (``MLP.seed``) a dataset row's ``mlp_seed`` gives.

Beside ``compute/seeds.py`` (which makes and checks the seeds themselves). Pure: the caller reads
the environment and passes what it found; nothing here reads env vars, files or prints.

    2.0  MLP.seed is mlp_seed itself (whestbench 0.16's legacy datasets)
    3.0  MLP.seed = seeds.estimator_seed(mlp_seed)  (SeedSequence(mlp_seed).spawn(3)[2])
    4.0  MLP.seed = low 32 bits of BLAKE2b(mlp_seed as 8 big-endian bytes, key=salt,
         person="whest-4.0-est", 8-byte digest); the salt is in the metadata, or withheld from it
         (``salt_source: "env"``) and supplied by the user in ``SALT_ENV``, checked against
         ``salt_digest`` (sha256 of the salt) when the metadata has one.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping

from whestbench.compute.seeds import estimator_seed

# Where a withheld 4.0 salt is expected (hex). Named here for the messages; the loader reads it.
SALT_ENV = "WHEST_SEED_SALT"
_V4_PERSON = b"whest-4.0-est"

SeedRule = Callable[[int], int]


def seed_rule(version: str, seed_protocol: Mapping[str, Any] | None = None, *, env_salt: str | None = None) -> SeedRule:
    """``mlp_seed -> MLP.seed`` for protocol ``version`` (the salt, if any, is resolved once here).

    ``seed_protocol``: the metadata's ``seed_protocol`` block (4.0 needs it: it says where the salt
    is). ``env_salt``: the value of ``SALT_ENV`` (None or empty when unset), used only for a 4.0
    dataset whose salt is withheld. Raises ValueError naming the fix.
    """
    if version == "2.0":
        return int
    if version == "3.0":
        return estimator_seed
    if version == "4.0":
        if not isinstance(seed_protocol, Mapping):
            raise ValueError(
                "seed_protocol 4.0 derives seeds with the dataset's salt; pass the dataset's "
                "metadata (metadata(ds)) instead of the bare version string."
            )
        salt = v4_salt(seed_protocol, env_salt)
        return lambda s: v4_estimator_seed(s, salt)
    raise ValueError(
        f"unknown seed_protocol version {version!r}; this whestbench reads 2.0, 3.0 and 4.0 "
        "datasets (upgrade whestbench for newer ones)."
    )


def v4_salt(seed_protocol: Mapping[str, Any], env_salt: str | None) -> bytes:
    """A 4.0 dataset's salt: the metadata's ``salt``, or ``env_salt`` when ``salt_source`` is ``env``.

    Guards against a salt that is missing, not hex, empty, or not the one the dataset was baked
    with (its sha256 differs from ``salt_digest``): each would derive other seeds silently.
    """
    if seed_protocol.get("salt_source") == "env":
        text = env_salt or ""
        if not text.strip():
            raise ValueError(
                f"seed_protocol 4.0 keeps this dataset's salt out of it (salt_source 'env', "
                f"salt_id {seed_protocol.get('salt_id')!r}); export the salt as hex in {SALT_ENV}."
            )
        where = SALT_ENV
    else:
        text, where = str(seed_protocol.get("salt") or ""), "metadata seed_protocol.salt"
    try:
        salt = bytes.fromhex(text.strip())
    except ValueError as e:
        raise ValueError(f"the seed_protocol 4.0 salt in {where} is not hex ({e}).") from e
    if not salt:
        raise ValueError(f"the seed_protocol 4.0 salt in {where} is empty.")
    digest = seed_protocol.get("salt_digest")
    if isinstance(digest, str) and hashlib.sha256(salt).hexdigest() != digest:
        raise ValueError(
            f"the salt in {where} does not match the dataset's salt_digest, so it would derive "
            "different seeds than the bake used; use the salt the dataset was baked with."
        )
    return salt


def v4_estimator_seed(mlp_seed: int, salt: bytes) -> int:
    """Protocol 4.0 ``MLP.seed``: keyed BLAKE2b of the input seed, low 32 bits."""
    digest = hashlib.blake2b(
        int(mlp_seed).to_bytes(8, "big"), digest_size=8, key=salt, person=_V4_PERSON
    ).digest()
    return int.from_bytes(digest, "big") & 0xFFFFFFFF
