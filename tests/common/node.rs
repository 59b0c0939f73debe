//! Node.js tooling for the independent-client tests: checks that `node`,
//! `npm` and `tests/node`'s locked dependencies exist (a missing tool fails
//! the test with what to run, never skips it; `scripts/test.sh` installs
//! them).
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

pub fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

pub fn npm_program() -> &'static str {
    if cfg!(windows) {
        "npm.cmd"
    } else {
        "npm"
    }
}

/// Runs `program --version`, failing the test with a clear message when the
/// tool is missing.
pub fn require_tool(program: &str) -> String {
    let out = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "`{program}` is required by this test but could not be run ({e}). \
                 Install Node.js >= 18 with npm (e.g. `apt-get install nodejs npm`) and \
                 make sure `{program}` is on PATH."
            )
        });
    assert!(
        out.status.success(),
        "`{program} --version` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub fn read_json(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// The exact `ws` version `package.json` pins.
pub fn pinned_ws_version(dir: &Path) -> String {
    let pkg = read_json(&dir.join("package.json")).expect("tests/node/package.json");
    pkg["dependencies"]["ws"]
        .as_str()
        .expect("tests/node/package.json pins dependencies.ws")
        .to_owned()
}

pub fn installed_ws_version(dir: &Path) -> Option<String> {
    read_json(&dir.join("node_modules/ws/package.json"))?["version"]
        .as_str()
        .map(str::to_owned)
}

/// Every dependency `package.json` pins, with its exact version.
pub fn pinned_dependencies(dir: &Path) -> Vec<(String, String)> {
    let pkg = read_json(&dir.join("package.json")).expect("tests/node/package.json");
    let deps = pkg["dependencies"]
        .as_object()
        .expect("tests/node/package.json has dependencies");
    deps.iter()
        .map(|(name, v)| {
            let version = v.as_str().expect("exact version strings");
            (name.clone(), version.to_owned())
        })
        .collect()
}

/// True when every pinned dependency is installed at its pinned version.
fn all_installed(dir: &Path) -> bool {
    pinned_dependencies(dir).iter().all(|(name, version)| {
        let pkg = dir.join("node_modules").join(name).join("package.json");
        read_json(&pkg).is_some_and(|p| p["version"].as_str() == Some(version.as_str()))
    })
}

/// Checks that `tests/node`'s locked dependencies (`ws`, `json-rpc-2.0`,
/// `puppeteer-core`) are installed at their pinned versions. A test never
/// installs them itself: `scripts/test.sh` (through
/// `scripts/install-test-tools.sh`) runs `npm ci` there.
pub fn ensure_node_modules(dir: &Path) {
    require_tool(npm_program());
    assert!(
        all_installed(dir),
        "tests/node's locked dependencies are not installed at their pinned versions \
         {:?}. Run scripts/test.sh, or `npm ci` in {}.",
        pinned_dependencies(dir),
        dir.display()
    );
}

/// `node tests/node/<script> <args…>`, once the locked dependencies are
/// installed: stdin and stdout piped (stdout read by lines), stderr
/// inherited, killed on drop. A missing `node` fails the test.
pub async fn spawn_script(
    script: &str,
    args: &[&str],
) -> (Child, ChildStdin, Lines<BufReader<ChildStdout>>) {
    require_tool("node");
    let dir = node_dir();
    tokio::task::spawn_blocking(move || ensure_node_modules(&dir))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let script = node_dir().join(script);
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `node {}`: {e}", script.display()));
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    (child, stdin, stdout)
}

/// Debian's Chromium for the browser tests: `$SWITCHYARD_CHROMIUM`, else
/// `/usr/bin/chromium` (or `chromium-browser`). A missing browser fails the
/// test with what to do, never skips it.
pub fn require_chromium() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("SWITCHYARD_CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(PathBuf::from))
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "this test drives headless Chromium and found none at {candidates:?}. \
                 Run scripts/install-test-tools.sh (it runs `apt-get install -y chromium` \
                 on Debian), or point SWITCHYARD_CHROMIUM at a Chromium binary."
            )
        })
}
