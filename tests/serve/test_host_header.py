"""A key-less server parses ``Host`` strictly (a name or address and an optional port, nothing
else) before its loopback check. On the old code (a41db9d) a Host with userinfo or a fragment,
``evil.example@127.0.0.1`` or ``localhost#.evil.example``, passed as a loopback name: the URL
parser read the part after ``@`` or before ``#`` as the host."""

from __future__ import annotations

import pytest

from tests.serve.test_api import _error, request

SMUGGLED = (
    "evil.example@127.0.0.1",
    "evil.example@127.0.0.1:8000",
    "localhost#.evil.example",
    "127.0.0.1:8000#.evil.example",
    "localhost/.evil.example",
    "localhost?.evil.example",
    "localhost\\.evil.example",
    "localhost:8000:9000",
    "localhost:port",
    "localhost%2eevil.example",
    "localhost evil.example",
    "[::1]evil.example",
    "",
)


@pytest.mark.parametrize("host", SMUGGLED)
def test_a_host_with_userinfo_a_fragment_or_a_path_is_refused(make_app, host):
    response = request(make_app(), "GET", "/v1/models", headers={"Host": host})
    assert "--allowed-host" in _error(response, 403, "host_not_allowed")["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8000", "LOCALHOST:1", "[::1]", "[::1]:8000"])
def test_plain_loopback_hosts_still_pass(make_app, host):
    assert request(make_app(), "GET", "/v1/models", headers={"Host": host}).status_code == 200
