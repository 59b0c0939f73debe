//! The real `curl`, located like the other test tools: `$SWITCHYARD_CURL`,
//! else `curl` on PATH. A test never installs it:
//! `scripts/install-test-tools.sh` does.

use std::path::PathBuf;

/// One HTTP exchange as curl saw it.
#[derive(Debug)]
pub struct Answer {
    /// The status code of the final response.
    pub status: u16,
    /// The protocol of the status line (`HTTP/1.1`, `HTTP/2`).
    pub version: String,
    /// Header names in lower case, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The curl binary, or a panic saying how to get one.
pub fn require_curl() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("SWITCHYARD_CURL")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.join("curl")),
        )
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "this test needs curl and found none ($SWITCHYARD_CURL, PATH). Run \
                 scripts/install-test-tools.sh (it runs `apt-get install -y curl` on \
                 Debian), or point SWITCHYARD_CURL at a curl binary."
            )
        })
}

/// Runs curl with `args` (the URL among them) and parses the final
/// response: `-sS -i` are added (status line and headers, then the body),
/// and `Expect:` is cleared so that no `100 Continue` comes first.
pub async fn curl(args: &[&str]) -> Answer {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(require_curl())
            .args(["-sS", "-i", "--max-time", "50", "-H", "Expect:"])
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("curl did not finish")
    .expect("curl runs");
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&text)
}

fn parse(text: &str) -> Answer {
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let mut parts = status_line.split(' ');
    let version = parts.next().expect("version").to_owned();
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        version,
        headers,
        body: body.to_owned(),
    }
}
