//! `switchyard demo` as a child process on free ports, with what it printed
//! parsed: the endpoints, the playground URL and the ready-to-paste
//! commands.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the demo may take to print its banner on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `switchyard demo`; stopped with SIGTERM when dropped.
pub struct Demo {
    child: Child,
    /// Every line printed up to "Press Ctrl-C".
    pub lines: Vec<String>,
    /// `(label, url)` of each endpoint line ("JSON-RPC 2.0 over WebSocket").
    pub endpoints: Vec<(String, String)>,
    /// The printed commands, as printed (after "Try it …").
    pub commands: Vec<String>,
    /// The playground URL.
    pub playground: String,
}

impl Demo {
    /// Starts `bin demo` with `args` (e.g. `--listen 127.0.0.1:0`) and
    /// reads its banner.
    pub fn start(bin: &str, args: &[&str]) -> Demo {
        let mut child = Command::new(bin)
            .arg("demo")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn switchyard demo");
        let stdout = child.stdout.take().expect("stdout");
        // Read on a thread so a silent demo fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let done = line.contains("Ctrl-C");
                if tx.send(line).is_err() || done {
                    break;
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains("Ctrl-C");
                    lines.push(line);
                    if done {
                        break;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "the demo printed no complete banner within {START_TIMEOUT:?}:\n{lines:#?}"
                    );
                }
            }
        }
        let mut demo = Demo {
            child,
            endpoints: Vec::new(),
            commands: Vec::new(),
            playground: String::new(),
            lines,
        };
        demo.parse();
        demo
    }

    fn parse(&mut self) {
        let mut section = "";
        for line in &self.lines {
            let trimmed = line.trim();
            if !line.starts_with("  ") {
                section = if trimmed.starts_with("Endpoints") {
                    "endpoints"
                } else if trimmed.starts_with("Playground") {
                    "playground"
                } else if trimmed.starts_with("Try it") {
                    "commands"
                } else {
                    ""
                };
                continue;
            }
            match section {
                "endpoints" => {
                    let url = trimmed.split_whitespace().last().expect("endpoint URL");
                    let label = trimmed[..trimmed.len() - url.len()].trim().to_owned();
                    self.endpoints.push((label, url.to_owned()));
                }
                "playground" => self.playground = trimmed.to_owned(),
                "commands" => self.commands.push(trimmed.to_owned()),
                _ => {}
            }
        }
    }

    /// The URL printed for the endpoint whose label contains `label`.
    pub fn endpoint(&self, label: &str) -> &str {
        self.endpoints
            .iter()
            .find(|(l, _)| l.contains(label))
            .map(|(_, url)| url.as_str())
            .unwrap_or_else(|| panic!("no endpoint {label:?} in {:#?}", self.lines))
    }

    /// Stops the demo with SIGTERM and checks it exits cleanly.
    pub fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(exit)) = self.child.try_wait() {
                assert!(exit.success(), "demo exit: {exit:?}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the demo did not exit within 30 s of SIGTERM");
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        // After `stop` this finds the process gone; otherwise (a failed
        // assertion) it must not outlive the test.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A GET of `url` (`http://host:port/path`) for synchronous tests, on
/// [`super::http`]: status, lower-case headers, body (dechunked, not
/// decompressed). Call it from a plain thread or `spawn_blocking`.
pub fn http_get(url: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let reply = super::http::blocking_get_url(url, headers);
    let pairs = reply.header_pairs();
    (reply.status, pairs, reply.body)
}

/// Splits a printed command into words: spaces separate, single quotes
/// group (what the banner prints; no other shell syntax).
pub fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in command.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}
