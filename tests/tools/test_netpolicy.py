"""The address policy of http tools: what ``OPSLOOP_HTTP_ALLOW`` lets through, and what
nothing lets through (link-local and cloud metadata addresses).

Names are resolved by an injected table, so no test depends on DNS; two tests use the
system resolver for names it answers without a network (``localhost``, ``127.1``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence

import pytest

from bot.errors import ConfigError, ToolError
from tools.netpolicy import AddressPolicy, parse_address


class FakeDNS:
    """A resolver answering from a table; ``then`` answers every later question about a
    name differently (DNS rebinding)."""

    def __init__(
        self,
        table: Mapping[str, Sequence[str]] | None = None,
        *,
        then: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.table = dict(table or {})
        self.then = dict(then or {})
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Iterable[str]:
        again = host in self.asked
        self.asked.append(host)
        if again and host in self.then:
            return list(self.then[host])
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.table[host])


DNS = {
    "api.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "evil.test": ["169.254.169.254"],
    "evil6.test": ["fd00:ec2::254"],
    "alibaba.test": ["100.100.100.200"],
    "linklocal.test": ["169.254.10.20"],
    "linklocal6.test": ["fe80::1%eth0"],
    "private.test": ["10.0.0.5"],
    "private6.test": ["fd12:3456::1"],
    "loopback.test": ["127.0.0.1"],
    "loopback6.test": ["::1"],
    "zero.test": ["0.0.0.0"],
    "multicast.test": ["224.0.0.1"],
    "cgnat.test": ["100.64.0.1"],
    "reserved.test": ["240.0.0.1"],
    "mapped.test": ["::ffff:169.254.169.254"],
    "mixed.test": ["93.184.216.34", "10.0.0.5"],
    "sneaky.test": ["93.184.216.34", "169.254.169.254"],
    "api.internal": ["10.0.0.5"],
    "other.internal": ["10.0.0.6"],
    "a.corp.example": ["10.1.0.1"],
    "a.b.corp.example": ["10.1.0.2"],
    "corp.example": ["10.1.0.3"],
    "evilcorp.example": ["10.1.0.4"],
    "db.internal": ["10.9.9.9"],
    "split.internal": ["10.0.0.5", "192.168.1.5"],
}


PUBLIC_ONLY = "only public hosts are allowed while OPSLOOP_HTTP_ALLOW is not set"


def policy(*allow: str, table: Mapping[str, Sequence[str]] = DNS) -> AddressPolicy:
    return AddressPolicy(list(allow), resolver=FakeDNS(table))


async def refused(p: AddressPolicy, url: str) -> str:
    with pytest.raises(ToolError) as caught:
        await p.check(url)
    return str(caught.value)


# -- no allowlist: any public host --------------------------------------------------


async def test_a_public_host_is_allowed_with_every_address() -> None:
    target = await policy().check("https://api.example.com/v1/status?x=1")
    assert target.host == "api.example.com" and target.port == 443
    assert [str(a) for a in target.addresses] == DNS["api.example.com"]


async def test_a_public_ip_literal_is_allowed_without_resolving() -> None:
    dns = FakeDNS()
    target = await AddressPolicy(resolver=dns).check("http://93.184.216.34:8080/")
    assert [str(a) for a in target.addresses] == ["93.184.216.34"] and target.port == 8080
    assert dns.asked == []


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("evil.test", "refused: evil.test resolves to 169.254.169.254, a cloud metadata address"),
        ("evil6.test", "refused: evil6.test resolves to fd00:ec2::254, a cloud metadata address"),
        ("alibaba.test", "resolves to 100.100.100.200, a cloud metadata address"),
        ("mapped.test", "resolves to ::ffff:a9fe:a9fe, a cloud metadata address"),
        ("linklocal.test", "resolves to 169.254.10.20, a link-local address"),
        ("linklocal6.test", "resolves to fe80::1, a link-local address"),
        ("private.test", "resolves to 10.0.0.5, a private address"),
        ("private6.test", "resolves to fd12:3456::1, a private address"),
        ("loopback.test", "resolves to 127.0.0.1, a loopback address"),
        ("loopback6.test", "resolves to ::1, a loopback address"),
        ("zero.test", "resolves to 0.0.0.0, the unspecified address"),
        ("multicast.test", "resolves to 224.0.0.1, a multicast address"),
        ("cgnat.test", "resolves to 100.64.0.1, not a public address"),
        ("reserved.test", "resolves to 240.0.0.1, a reserved address"),
    ],
)
async def test_names_resolving_to_non_public_addresses_are_refused(host: str, message: str) -> None:
    assert message in await refused(policy(), f"http://{host}/")


async def test_every_resolved_address_must_be_public() -> None:
    message = await refused(policy(), "http://mixed.test/")
    assert message == f"refused: mixed.test resolves to 10.0.0.5, a private address; {PUBLIC_ONLY}"
    assert "cloud metadata" in await refused(policy(), "http://sneaky.test/")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
        ("http://[fd00:ec2::254]/latest/", "fd00:ec2::254 is a cloud metadata address"),
        ("http://100.100.100.200/latest/", "100.100.100.200 is a cloud metadata address"),
        ("http://169.254.170.2/v2/credentials", "169.254.170.2 is a cloud metadata address"),
        ("http://169.254.1.1/", "169.254.1.1 is a link-local address"),
        ("http://[fe80::1%25eth0]/", "fe80::1 is a link-local address"),
        ("http://[::ffff:169.254.169.254]/", "::ffff:a9fe:a9fe is a cloud metadata address"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1 is a loopback address"),
        ("http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe is a cloud metadata address"),
        ("http://[2002:a9fe:a9fe::1]/", "2002:a9fe:a9fe::1 is a cloud metadata address"),  # 6to4
        ("http://[2002:a9fe:101::1]/", "2002:a9fe:101::1 is a link-local address"),
        ("http://127.0.0.1:8080/", "127.0.0.1 is a loopback address"),
        ("http://[::1]/", "::1 is a loopback address"),
        ("http://10.1.2.3/", "10.1.2.3 is a private address"),
        ("http://192.168.0.1/", "192.168.0.1 is a private address"),
        ("http://172.16.0.1/", "172.16.0.1 is a private address"),
        ("http://0.0.0.0:22/", "0.0.0.0 is the unspecified address"),
        ("http://[::]/", ":: is the unspecified address"),
    ],
)
async def test_ip_literals_are_judged_without_resolving(url: str, message: str) -> None:
    dns = FakeDNS()
    found = await refused(AddressPolicy(resolver=dns), url)
    assert found.startswith(f"refused: {message}")
    # Only what an allowlist could open says so.
    never = "metadata" in message or "link-local" in message
    assert found.endswith(PUBLIC_ONLY) is not never
    assert dns.asked == []


async def test_the_metadata_message_is_exact() -> None:
    message = await refused(AddressPolicy(), "http://169.254.169.254/latest/meta-data/iam/")
    assert message == "refused: 169.254.169.254 is a cloud metadata address"


@pytest.mark.parametrize(
    "url",
    [
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.Google.Internal./computeMetadata/v1/",
        "http://metadata/computeMetadata/v1/",
        "http://instance-data.ec2.internal/latest/",
    ],
)
async def test_metadata_names_are_refused_before_resolving(url: str) -> None:
    dns = FakeDNS({"metadata.google.internal": ["93.184.216.34"]})
    p = AddressPolicy(["metadata.google.internal", "0.0.0.0/0"], resolver=dns)
    assert "is a cloud metadata host name" in await refused(p, url)
    assert "is a cloud metadata host name" in await refused(AddressPolicy(resolver=dns), url)
    assert dns.asked == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "refused: scheme 'file' is not allowed (http, https)"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "refused: scheme 'gopher' is not allowed"),
        ("ftp://ftp.example.com/", "refused: scheme 'ftp' is not allowed"),
        ("dict://127.0.0.1:11211/stats", "refused: scheme 'dict' is not allowed"),
        ("//api.example.com/x", "is not an absolute http(s) URL"),
        ("api.example.com/x", "is not an absolute http(s) URL"),
        ("http:///nohost", "has no host"),
    ],
)
async def test_only_http_and_https_urls(url: str, message: str) -> None:
    assert message in await refused(policy("0.0.0.0/0"), url)


@pytest.mark.parametrize(
    "url",
    [
        "http://good.example@169.254.169.254/latest/meta-data/",
        "http://good.example:secret@169.254.169.254/",
        "http://169.254.169.254#@good.example/",
        "http://169.254.169.254?@good.example/",
    ],
)
async def test_userinfo_and_delimiter_tricks_judge_the_real_host(url: str) -> None:
    p = policy("good.example", table={"good.example": ["93.184.216.34"]})
    assert await refused(p, url) == "refused: 169.254.169.254 is a cloud metadata address"


async def test_an_address_in_the_userinfo_is_not_the_host() -> None:
    # The policy parses URLs with httpx, as the client does: no parser differential.
    p = policy("good.example", table={"good.example": ["93.184.216.34"]})
    for url in (
        "http://[::ffff:169.254.169.254]@good.example/",
        "http://169.254.169.254\\@good.example/",
    ):
        assert (await p.check(url)).host == "good.example"


async def test_a_name_that_cannot_be_resolved_is_an_error() -> None:
    assert await refused(policy(), "http://nowhere.test/") == (
        "cannot resolve nowhere.test: Name or service not known"
    )


async def test_the_system_resolver_is_used_by_default() -> None:
    # Both answered without a network: /etc/hosts and inet_aton's short forms.
    assert "a loopback address" in await refused(AddressPolicy(), "http://localhost:9/")
    assert "127.1 resolves to 127.0.0.1, a loopback address" in await refused(
        AddressPolicy(), "http://127.1/"
    )


# -- with an allowlist ---------------------------------------------------------------


async def test_allowed_by_name_any_case_and_trailing_dot() -> None:
    p = policy("api.internal")
    for url in ("http://api.internal/", "http://API.Internal./x", "https://api.internal:8443/"):
        target = await p.check(url)
        assert [str(a) for a in target.addresses] == ["10.0.0.5"]
    assert await refused(p, "http://other.internal/") == (
        "refused: other.internal (10.0.0.6) is not in OPSLOOP_HTTP_ALLOW"
    )


async def test_a_public_host_is_refused_when_not_in_the_allowlist() -> None:
    message = await refused(policy("api.internal"), "https://api.example.com/")
    assert message.startswith("refused: api.example.com (93.184.216.34, ")
    assert message.endswith("is not in OPSLOOP_HTTP_ALLOW")


async def test_wildcards_match_subdomains_not_the_domain_itself() -> None:
    p = policy("*.corp.example")
    await p.check("http://a.corp.example/")
    await p.check("http://a.b.corp.example/")
    assert "is not in OPSLOOP_HTTP_ALLOW" in await refused(p, "http://corp.example/")
    assert "is not in OPSLOOP_HTTP_ALLOW" in await refused(p, "http://evilcorp.example/")


async def test_allowed_by_ip() -> None:
    p = policy("127.0.0.1")
    target = await p.check("http://127.0.0.1:8080/health")
    assert [str(a) for a in target.addresses] == ["127.0.0.1"]
    await p.check("http://[::ffff:127.0.0.1]:8080/")  # the same address, spelt in IPv6
    await p.check("http://loopback.test/")  # a name resolving to the allowed address
    message = await refused(p, "http://127.0.0.2/")
    assert message == "refused: 127.0.0.2 is not in OPSLOOP_HTTP_ALLOW"
    assert "is not in OPSLOOP_HTTP_ALLOW" in await refused(p, "http://[::1]/")


async def test_allowed_by_cidr_and_only_the_allowed_addresses_are_used() -> None:
    p = policy("10.0.0.0/8", "fd12::/16")
    await p.check("http://10.200.0.1/")
    await p.check("http://[fd12:3456::1]/")
    assert [str(a) for a in (await p.check("http://db.internal/")).addresses] == ["10.9.9.9"]
    # A name with addresses inside and outside: only the inside ones may be connected to.
    target = await p.check("http://split.internal/")
    assert [str(a) for a in target.addresses] == ["10.0.0.5"]
    assert "is not in OPSLOOP_HTTP_ALLOW" in await refused(p, "http://192.168.1.5/")


async def test_an_allowlist_opens_private_and_loopback_addresses() -> None:
    p = policy("localhost", "private.test", "::1")
    assert [str(a) for a in (await p.check("http://private.test/")).addresses] == ["10.0.0.5"]
    assert [str(a) for a in (await p.check("http://[::1]:9000/")).addresses] == ["::1"]


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
        "http://169.254.1.1/",
        "http://[fe80::1]/",
        "http://evil.test/",
        "http://linklocal.test/",
    ],
)
async def test_metadata_and_link_local_stay_refused_even_when_allowed(url: str) -> None:
    p = policy(
        "169.254.169.254",
        "169.254.0.0/16",
        "fe80::/10",
        "fd00::/8",
        "0.0.0.0/0",
        "::/0",
        "evil.test",
        "linklocal.test",
    )
    message = await refused(p, url)
    assert "cloud metadata address" in message or "link-local address" in message


# -- the setting ---------------------------------------------------------------------


def test_the_setting_is_comma_separated_and_empty_means_any_public_host() -> None:
    p = AddressPolicy.from_setting(" api.example.com , 10.0.0.0/8,,*.corp.example , [::1] ")
    assert p.restricted
    assert p.entries == ("api.example.com", "10.0.0.0/8", "*.corp.example", "[::1]")
    assert not AddressPolicy.from_setting("").restricted
    assert not AddressPolicy.from_setting(None).restricted
    assert not AddressPolicy([]).restricted
    assert repr(AddressPolicy()) == "AddressPolicy(any public host)"


@pytest.mark.parametrize(
    "entry",
    [
        "https://api.example.com",
        "api.example.com:8443",
        "api.example.com/v1",
        "10.0.0.0/33",
        "*",
        "*.",
        "a b",
        "-bad-.example",
    ],
)
def test_bad_entries_are_configuration_errors(entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AddressPolicy.from_setting(f"api.example.com,{entry}")
    assert str(caught.value).startswith(f"OPSLOOP_HTTP_ALLOW: {entry!r} is not")


def test_parse_address_drops_brackets_and_zones() -> None:
    assert str(parse_address("[fe80::1%25eth0]")) == "fe80::1"
    assert str(parse_address("::ffff:10.0.0.1")) == "::ffff:a00:1"
    assert parse_address("api.example.com") is None


@pytest.mark.parametrize(
    "url",
    [
        "http://ops:hunter2@[::1/status",  # does not parse
        "http://ops:hunter2@/status",  # no host
        "//ops:hunter2@/status",  # not absolute
    ],
)
async def test_a_refused_url_never_echoes_its_password(url: str) -> None:
    said = await refused(policy("0.0.0.0/0"), url)
    assert "hunter2" not in said and "ops:***@" in said, said
