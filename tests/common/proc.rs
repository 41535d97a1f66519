//! Spawned processes (the daemon, pushers, servers, browser drivers) that cannot outlive the
//! test: a failing assertion unwinds, the guard drops, the process and all it started die.
//!
//! The whole tree is killed, not just the child: `node` starts Chromium (which forks its own
//! helpers, and which playwright puts in a process group of its own), `timeout` starts
//! gst-launch. SIGKILL on the direct child alone leaves those running.
//!
//! Tools that run to completion within one statement (`Command::output`, `status`) need no
//! guard, unless the tool under test might not exit: then [`run_within`].

use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A spawned process whose whole tree is killed when this drops.
pub struct Proc(Child);

impl Proc {
    /// Spawns `cmd`; `what` names the program in the panic when it is missing.
    pub fn spawn(cmd: &mut Command, what: &str) -> Proc {
        Proc(cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}")))
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }

    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.0.try_wait().unwrap()
    }

    /// Sends `sig` to the process itself (its children are left alone); it must still run.
    pub fn signal(&mut self, sig: Signal) {
        assert!(self.try_wait().is_none(), "kill -{sig}: already exited");
        kill(pid(self.0.id()), sig).unwrap_or_else(|e| panic!("kill -{sig}: {e}"));
    }

    /// Kills the tree and reaps the child.
    pub fn kill(&mut self) {
        // Only while unreaped: a reaped child's pid may already belong to someone else.
        if let Ok(None) = self.0.try_wait() {
            kill_tree(self.0.id());
        }
        let _ = self.0.wait();
    }

    /// Waits up to `within` for the exit; `None` (the tree killed) when it did not come.
    pub fn wait_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A tokio child (for drivers read and written asynchronously) with the same guarantee.
pub struct AsyncProc(tokio::process::Child);

impl AsyncProc {
    pub fn spawn(cmd: &mut tokio::process::Command, what: &str) -> AsyncProc {
        // Belt and braces: tokio reaps what it kills on drop; `kill_tree` reaches the rest.
        cmd.kill_on_drop(true);
        AsyncProc(cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}")))
    }

    pub fn child(&mut self) -> &mut tokio::process::Child {
        &mut self.0
    }

    /// Kills the tree and reaps the child.
    pub async fn kill(&mut self) {
        self.kill_tree();
        let _ = self.0.wait().await;
    }

    fn kill_tree(&mut self) {
        // Only while unreaped: a reaped child's pid may already belong to someone else.
        if let (Ok(None), Some(id)) = (self.0.try_wait(), self.0.id()) {
            kill_tree(id);
        }
    }
}

impl Drop for AsyncProc {
    fn drop(&mut self) {
        self.kill_tree();
    }
}

/// Runs `cmd` to completion with piped output, killing it (and failing) if it takes longer than
/// `within`: for a tool that must exit, but might not if the code under test is wrong.
pub fn run_within(cmd: &mut Command, what: &str, within: Duration) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut p = Proc::spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        what,
    );
    // Read both pipes on threads: a chatty child would block on a full pipe otherwise.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(p.0.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(p.0.stderr.take().map(|r| Box::new(r) as _));
    let status = p.wait_within(within);
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let status = status.unwrap_or_else(|| {
        panic!(
            "{what} still running after {within:?}: {}",
            String::from_utf8_lossy(&stderr)
        )
    });
    Output {
        status,
        stdout,
        stderr,
    }
}

fn pid(id: u32) -> Pid {
    Pid::from_raw(id as i32)
}

/// SIGKILLs `root` and every descendant. Each is stopped before its children are listed, so
/// none can fork a process the walk would miss (`/proc/…/children` is exact only for stopped
/// processes), and all are listed before any dies (a dead parent's children are re-parented
/// out of reach).
fn kill_tree(root: u32) {
    let mut tree = vec![root];
    let _ = kill(pid(root), Signal::SIGSTOP);
    let mut i = 0;
    while i < tree.len() {
        for child in children(tree[i]) {
            if !tree.contains(&child) {
                let _ = kill(pid(child), Signal::SIGSTOP);
                tree.push(child);
            }
        }
        i += 1;
    }
    for p in tree {
        let _ = kill(pid(p), Signal::SIGKILL);
    }
}

fn children(of: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{of}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}
