use super::*;

/// The checks on text headers.
fn check(
    p: &UpgradePolicy,
    host: Option<&str>,
    origin: Option<&str>,
    authorization: Option<&str>,
    query: Option<&str>,
) -> Result<(), Refusal> {
    p.check(
        host.map(str::as_bytes),
        origin.map(str::as_bytes),
        authorization.map(str::as_bytes),
        query,
    )
}

fn loopback() -> UpgradePolicy {
    UpgradePolicy {
        loopback_only: true,
        ..Default::default()
    }
}

#[test]
fn origins_parse_into_scheme_host_port() {
    let o = Origin::parse("http://LocalHost:8080").expect("origin");
    assert_eq!(
        (o.scheme.as_str(), o.host.as_str(), o.port),
        ("http", "localhost", 8080)
    );
    assert_eq!(
        Origin::parse("https://app.example.com").map(|o| o.port),
        Some(443)
    );
    assert_eq!(
        Origin::parse("http://[::1]:3000").map(|o| o.host),
        Some("[::1]".to_owned())
    );
    for bad in [
        "null",
        "localhost",
        "http://",
        "http://a/b",
        "ftp://x",
        "http://u@h",
        "http://h:99999",
    ] {
        assert!(Origin::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn loopback_defaults_refuse_foreign_and_look_alike_origins() {
    let p = loopback();
    for ok in [
        None,
        Some("http://localhost:5173"),
        Some("http://127.0.0.1"),
        Some("https://[::1]:8443"),
    ] {
        assert_eq!(
            check(&p, Some("127.0.0.1:8080"), ok, None, None),
            Ok(()),
            "{ok:?}"
        );
    }
    for bad in [
        "http://evil.com",
        "http://localhost.evil.com",
        "http://evil-localhost.com",
        "http://127.0.0.1.evil.com",
    ] {
        assert_eq!(
            check(&p, Some("localhost"), Some(bad), None, None),
            Err(Refusal::Origin),
            "{bad}"
        );
    }
    assert_eq!(
        check(&p, Some("localhost"), Some("null"), None, None),
        Err(Refusal::NullOrigin)
    );
}

#[test]
fn dns_rebinding_host_is_refused() {
    let p = loopback();
    assert_eq!(
        check(&p, Some("evil.com"), None, None, None),
        Err(Refusal::Host)
    );
    assert_eq!(
        check(
            &p,
            Some("evil.com:8080"),
            Some("http://evil.com:8080"),
            None,
            None
        ),
        Err(Refusal::Host)
    );
    assert_eq!(check(&p, None, None, None, None), Err(Refusal::Host));
    assert_eq!(check(&p, Some("[::1]:9"), None, None, None), Ok(()));
}

#[test]
fn explicit_allow_lists_compare_exactly() {
    let p = UpgradePolicy {
        hosts: vec!["app.example.com".into()],
        origins: vec![Origin::parse("https://app.example.com").expect("origin")],
        ..Default::default()
    };
    assert_eq!(
        check(
            &p,
            Some("app.example.com"),
            Some("https://app.example.com:443"),
            None,
            None
        ),
        Ok(())
    );
    assert_eq!(
        check(
            &p,
            Some("app.example.com"),
            Some("http://app.example.com"),
            None,
            None
        ),
        Err(Refusal::Origin)
    );
    assert_eq!(
        check(
            &p,
            Some("app.example.com"),
            Some("https://app.example.com:8443"),
            None,
            None
        ),
        Err(Refusal::Origin)
    );
    assert_eq!(
        check(&p, Some("other.example.com"), None, None, None),
        Err(Refusal::Host)
    );
}

#[test]
fn tokens_from_header_or_query() {
    let p = UpgradePolicy {
        token: Some("s3cret".into()),
        ..Default::default()
    };
    assert_eq!(
        check(&p, Some("h"), None, Some("Bearer s3cret"), None),
        Ok(())
    );
    assert_eq!(
        check(&p, Some("h"), None, None, Some("a=1&token=s3cret")),
        Ok(())
    );
    assert_eq!(
        check(&p, Some("h"), None, Some("Bearer nope"), None),
        Err(Refusal::Token)
    );
    assert_eq!(
        check(&p, Some("h"), None, None, Some("token=s3cre")),
        Err(Refusal::Token)
    );
    assert_eq!(check(&p, Some("h"), None, None, None), Err(Refusal::Token));
    assert_eq!(Refusal::Token.status(), 401);
    assert_eq!(Refusal::Origin.status(), 403);
}

#[test]
fn unreadable_or_unparsable_headers_are_refused_never_taken_for_absent() {
    let open = UpgradePolicy::default();
    assert_eq!(open.check(None, None, None, None), Ok(()));
    for origin in [
        &b"http://\xe9vil.com"[..],
        b"http://localhost\xff",
        b"http://loc\x01alhost",
        b"http://exa mple.com",
        b"http://a\xc3\xa9.com",
    ] {
        assert_eq!(
            open.check(Some(b"h"), Some(origin), None, None),
            Err(Refusal::Origin),
            "{origin:?}"
        );
        assert_eq!(
            loopback().check(Some(b"localhost"), Some(origin), None, None),
            Err(Refusal::Origin),
            "{origin:?}"
        );
    }
    for host in [
        &b"h\xe9"[..],
        b"",
        b"h:port",
        b"h:99999",
        b"ex ample.com",
        b"[::1",
        b"[zz]:80",
    ] {
        assert_eq!(
            open.check(Some(host), None, None, None),
            Err(Refusal::Host),
            "{host:?}"
        );
    }
    // The Origin value of an allow-list is parsed the same way.
    assert!(Origin::parse("http://\u{e9}vil.com").is_none());
}

#[test]
fn query_tokens_are_form_decoded_and_the_scheme_is_case_insensitive() {
    let p = UpgradePolicy {
        token: Some("s3cr+t/=&x y".into()),
        ..Default::default()
    };
    for query in [
        "token=s3cr%2Bt%2F%3D%26x%20y",
        "token=s3cr%2bt%2f%3d%26x+y",
        "a=1&token=s3cr%2Bt/=%26x+y&token=other",
    ] {
        assert_eq!(
            check(&p, Some("h"), None, None, Some(query)),
            Ok(()),
            "{query}"
        );
    }
    assert_eq!(
        check(&p, Some("h"), None, None, Some("token=s3cr+t/=&x y")),
        Err(Refusal::Token)
    );
    for auth in [
        "Bearer s3cr+t/=&x y",
        "bearer s3cr+t/=&x y",
        "BEARER  s3cr+t/=&x y ",
        "bEaReR\ts3cr+t/=&x y",
    ] {
        assert_eq!(
            check(&p, Some("h"), None, Some(auth), None),
            Ok(()),
            "{auth}"
        );
    }
    for auth in ["Basic s3cr+t/=&x y", "Bearers3cr+t/=&x y", "Bearer "] {
        assert_eq!(
            check(&p, Some("h"), None, Some(auth), None),
            Err(Refusal::Token),
            "{auth}"
        );
    }
}

#[test]
fn the_admin_host_check_takes_ips_loopback_and_listed_names_only() {
    let listed = vec!["switchyard".to_owned()];
    for ok in [
        "127.0.0.1:9090",
        "localhost:9090",
        "LOCALHOST",
        "[::1]:9090",
        "10.1.2.3:9090",
        "[fd00::1]",
        "switchyard:9090",
        "SwitchYard",
    ] {
        assert_eq!(admin_host(Some(ok.as_bytes()), &listed), Ok(()), "{ok}");
    }
    for bad in [
        "evil.example",
        "evil.example:9090",
        "localhost.evil.example",
        "127.0.0.1.evil.example",
        "switchyard.evil.example",
        "",
        "a b",
    ] {
        assert_eq!(
            admin_host(Some(bad.as_bytes()), &listed),
            Err(Refusal::Host),
            "{bad}"
        );
    }
    assert_eq!(admin_host(None, &listed), Err(Refusal::Host));
}
