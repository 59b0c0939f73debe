use super::*;

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
            p.check(Some("127.0.0.1:8080"), ok, None, None),
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
            p.check(Some("localhost"), Some(bad), None, None),
            Err(Refusal::Origin),
            "{bad}"
        );
    }
    assert_eq!(
        p.check(Some("localhost"), Some("null"), None, None),
        Err(Refusal::NullOrigin)
    );
}

#[test]
fn dns_rebinding_host_is_refused() {
    let p = loopback();
    assert_eq!(
        p.check(Some("evil.com"), None, None, None),
        Err(Refusal::Host)
    );
    assert_eq!(
        p.check(
            Some("evil.com:8080"),
            Some("http://evil.com:8080"),
            None,
            None
        ),
        Err(Refusal::Host)
    );
    assert_eq!(p.check(None, None, None, None), Err(Refusal::Host));
    assert_eq!(p.check(Some("[::1]:9"), None, None, None), Ok(()));
}

#[test]
fn explicit_allow_lists_compare_exactly() {
    let p = UpgradePolicy {
        hosts: vec!["app.example.com".into()],
        origins: vec![Origin::parse("https://app.example.com").expect("origin")],
        ..Default::default()
    };
    assert_eq!(
        p.check(
            Some("app.example.com"),
            Some("https://app.example.com:443"),
            None,
            None
        ),
        Ok(())
    );
    assert_eq!(
        p.check(
            Some("app.example.com"),
            Some("http://app.example.com"),
            None,
            None
        ),
        Err(Refusal::Origin)
    );
    assert_eq!(
        p.check(
            Some("app.example.com"),
            Some("https://app.example.com:8443"),
            None,
            None
        ),
        Err(Refusal::Origin)
    );
    assert_eq!(
        p.check(Some("other.example.com"), None, None, None),
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
        p.check(Some("h"), None, Some("Bearer s3cret"), None),
        Ok(())
    );
    assert_eq!(
        p.check(Some("h"), None, None, Some("a=1&token=s3cret")),
        Ok(())
    );
    assert_eq!(
        p.check(Some("h"), None, Some("Bearer nope"), None),
        Err(Refusal::Token)
    );
    assert_eq!(
        p.check(Some("h"), None, None, Some("token=s3cre")),
        Err(Refusal::Token)
    );
    assert_eq!(p.check(Some("h"), None, None, None), Err(Refusal::Token));
    assert_eq!(Refusal::Token.status(), 401);
    assert_eq!(Refusal::Origin.status(), 403);
}
