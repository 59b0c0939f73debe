//! Node.js tooling for the independent-client tests: checks that `node`
//! and `npm` exist (a missing tool fails the test, never skips it) and
//! installs `tests/node`'s locked dependencies once, under a lock shared by
//! every test process.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

/// How long to wait for another test process's `npm ci`.
const INSTALL_LOCK_WAIT: Duration = Duration::from_secs(300);

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

/// A lock directory, so that concurrent test processes run `npm ci` once.
struct InstallLock(PathBuf);

impl InstallLock {
    fn acquire() -> InstallLock {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("holon-node-client-npm.lock");
        let start = Instant::now();
        loop {
            match std::fs::create_dir(&path) {
                Ok(()) => return InstallLock(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // A lock left behind by a killed process goes stale.
                    let age = std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok());
                    if age.is_some_and(|age| age > INSTALL_LOCK_WAIT) {
                        let _ = std::fs::remove_dir(&path);
                        continue;
                    }
                    assert!(
                        start.elapsed() < INSTALL_LOCK_WAIT,
                        "waited {INSTALL_LOCK_WAIT:?} for {}",
                        path.display()
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("cannot create {}: {e}", path.display()),
            }
        }
    }
}

impl Drop for InstallLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Installs `tests/node`'s locked dependencies unless the pinned `ws` is
/// already there.
pub fn ensure_node_modules(dir: &Path) {
    let pinned = pinned_ws_version(dir);
    if installed_ws_version(dir).as_deref() == Some(pinned.as_str()) {
        return;
    }
    let _lock = InstallLock::acquire();
    if installed_ws_version(dir).as_deref() == Some(pinned.as_str()) {
        return; // another process installed it meanwhile
    }
    let npm = npm_program();
    require_tool(npm);
    let out = Command::new(npm)
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{npm} ci` in {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "`{npm} ci --no-audit --no-fund` in {} failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        installed_ws_version(dir).as_deref(),
        Some(pinned.as_str()),
        "`npm ci` did not install ws {pinned}"
    );
}
