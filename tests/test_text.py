"""How numbers are shown: counts, durations and clocks stay readable at any size."""

from __future__ import annotations

import pytest

from whestbench.text import format_clock, format_count, format_duration, show_value


@pytest.mark.parametrize("n, shown", [(5, "5"), (1_000_000, "1,000,000"), (10**21 - 1, "999,999,999,999,999,999,999"),
                                      (10**21, "1.00e21"), (10**400, "1.00e400"), (-(10**25), "-1.00e25"),
                                      (123456789 * 10**40, "1.23e48"), (True, "True"), ("x", "x")])
def test_counts(n, shown):
    assert format_count(n) == shown


@pytest.mark.parametrize("s, shown", [(42.0, "42.0 s"), (5400, "90.0 min"), (9000, "2.5 h"), (3 * 86400, "3.0 days"),
                                      (26946 * 365.25 * 86400, "26,946 years"), (float("nan"), "unknown")])
def test_durations(s, shown):
    assert format_duration(s) == shown


@pytest.mark.parametrize("s, shown", [(3725, "1:02:05"), (99 * 3600, "99:00:00"), (400 * 3600, "16.7 days"),
                                      (1e12, "31,688 years"), (-1, "?"), (float("inf"), "?")])
def test_clocks(s, shown):
    assert format_clock(s) == shown


@pytest.mark.parametrize("x, shown", [(0.0312, "0.0312"), (0.01234, "0.0123"), (1.4249, "1.42"), (46.44, "46.4"),
                                      (312.4, "312"), (4123.4, "4,123"), (9.996, "10.0"), (0, "0")])
def test_rates_have_three_significant_digits(x, shown):
    from whestbench.text import format_rate

    assert format_rate(x) == shown


def test_a_slow_calibration_rate_is_not_rounded_to_hundredths():
    from whestbench.cli.progress import _rate

    assert _rate(12_345, "samples") == "12.3 k samples/s"
    assert _rate(3.456, "rows") == "3.46 rows/s"


def test_error_line_is_one_safe_line_or_the_class_name():
    from whestbench.text import error_line

    assert error_line(ValueError("a\n  b\x1b[31m c")) == "a b c"
    assert error_line(RuntimeError()) == "RuntimeError"
    assert error_line(OSError(" ".join(map(str, range(100)))), 3) == "0 1 2"


def test_format_traceback_masks_tokens():
    from whestbench.text import format_traceback

    try:
        raise ValueError("Authorization: Bearer hf_abcdefghijklmnop")
    except ValueError as exc:
        text = format_traceback(exc)
    assert "hf_abcdefghijklmnop" not in text and "ValueError" in text


@pytest.mark.parametrize("v, shown", [({"b": 1, "a": [2]}, '{"a": [2], "b": 1}'), ([1, "x"], '[1, "x"]'),
                                      ("x", "'x'"), (None, "null"), (True, "true"), (1.5, "1.5")])
def test_a_metadata_value_in_a_message_is_its_json_or_a_strings_repr(v, shown):
    assert show_value(v) == shown


def test_a_value_shown_short_is_cut_and_an_absent_one_named():
    assert show_value(list(range(100)), max_len=20) == "[0, 1, 2, 3, 4, 5..."
    assert show_value(None, absent="absent") == "absent" and show_value(0, absent="absent") == "0"


def test_scrub_masks_url_userinfo(monkeypatch):
    from whestbench.text import error_line, scrub

    assert scrub("at https://user:pa55word@hub.example.org/api and ftp://bob@x.org") == \
        "at https://***@hub.example.org/api and ftp://***@x.org"
    assert scrub("no credentials: https://hub.example.org/a@b") == "no credentials: https://hub.example.org/a@b"
    monkeypatch.setenv("HF_ENDPOINT", "http://user:s3cret%21pw@127.0.0.1:9")
    assert "s3cret" not in scrub("the server echoed s3cret%21pw and s3cret!pw")
    assert "s3cret" not in error_line(OSError("connect to http://user:s3cret%21pw@127.0.0.1:9 failed"))


@pytest.mark.parametrize("endpoint, secret", [
    ("alice:pw9secret@host:9", "pw9secret"),  # no scheme: urlsplit finds no password at all
    ("http://alice:p/w9secret@host:9", "w9secret"),  # a '/' in the password: the parser reads 'p' as the port
    ("http://alice:p@w9secret@host:9", "w9secret"),  # an unescaped '@' in the password
    ("http://host:9/?token=sekretsekret", "sekretsekret"),  # a query token
    ("http://host:9/api?x=1&access_token=sekretsekret#frag", "sekretsekret"),
    ("http://al%69ce:p%40ssw0rd99@host:9", "p@ssw0rd99"),  # percent-encoded, echoed decoded
    ("http://al%69ce:p%40ssw0rd99@host:9", "p%40ssw0rd99"),
])
def test_scrub_masks_every_spelling_of_an_endpoint_secret(monkeypatch, endpoint, secret):
    """issue 34: HF_ENDPOINT=alice:pw@host:9 (no scheme), a password holding '/', and ?token= were printed."""
    from whestbench.text import error_line, format_traceback, scrub

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    for text in (f"could not reach the Hub at {endpoint} (ConnectError)", f"Port could not be cast: {secret!r}",
                 f"GET {endpoint.rstrip('/')}/api/datasets/org/name failed", f"echo {secret} back"):
        assert secret not in scrub(text), text
        assert secret not in error_line(OSError(text))
    try:
        try:
            raise OSError(f"first {endpoint}")
        except OSError as e:
            raise RuntimeError("second") from e
    except RuntimeError as exc:
        assert secret not in format_traceback(exc)


@pytest.mark.parametrize("text, secret", [
    ("proxy at socks5://bob:hunter2/xyz@10.0.0.1:1080 refused", "hunter2/xyz"),
    ("at https://u:pa55/word@h.org/api", "pa55/word"),
    ("login alice:s3cr3tpw@mirror.example.org failed", "s3cr3tpw"),
    ("GET https://h.org/f?X-Amz-Signature=abcdef123456&X-Amz-Date=1", "abcdef123456"),
    ("GET https://h.org/f?api_key=abcdef123456", "abcdef123456"),
    ("headers {'Authorization': 'Basic YWxpY2U6cHc='}", "YWxpY2U6cHc="),
    ("Authorization: token 0123456789abcdef", "0123456789abcdef"),
])
def test_scrub_masks_credentials_in_any_text(text, secret):
    from whestbench.text import scrub

    assert secret not in scrub(text)


@pytest.mark.parametrize("text", [
    "pulling hf://org/name@main: done", "hf://datasets/org/name@v1", "org/name@refs/pr/1",
    "https://mastodon.social/@ada", "note: resuming unit mlp00000000 at 12:00:01", "Basic checks passed",
    "mlp_id/segment 0/1, 1/0", "a = {'key': 'value@x'}",
])
def test_scrub_leaves_ordinary_text_alone(text):
    from whestbench.text import scrub

    assert scrub(text) == text
