//! The sandbox HumanEval code runs in: `python3 -I` (no user site, no environment), an empty
//! temporary working folder, a cleared environment, limits on address space, CPU time, file
//! size and open files set before the candidate runs, at most [`MORE_TASKS`] more processes (a
//! `pids` cgroup of its own where this process may make one, else `RLIMIT_NPROC`), its own
//! process group — and its cgroup — killed at the end, no network where `unshare --net` works, a
//! wall-clock timeout, and bounded output.

use super::grade::Grade;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Processes (tasks) a program may start beyond its own.
pub const MORE_TASKS: u32 = 16;

/// Where and how long HumanEval code may run.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The Python interpreter.
    pub python: String,
    /// Wall-clock limit for one program (also its CPU-time limit).
    pub timeout: Duration,
}

/// Sets the limits, reads the run's marker (first line of stdin) and the program (the rest),
/// runs the program as `__main__`, and writes the marker only when the program ran to its end:
/// a program that exits early (`sys.exit(0)`, `os._exit(0)`) before its tests ran does not pass.
const LAUNCHER: &str = r#"
import os, resource, sys
limit, more, procs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if procs:
    # Joins its own pids cgroup first: every process it starts is counted and killed there.
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
if not procs and os.getuid() != 0:
    # RLIMIT_NPROC counts every task of the user: allow `more` than run now.
    tasks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat("/proc/" + pid).st_uid == os.getuid():
                tasks += len(os.listdir("/proc/" + pid + "/task"))
        except OSError:
            pass
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks + more, tasks + more))
def run(marker=sys.stdin.readline().strip()):
    source = sys.stdin.read()
    sys.argv = ["candidate.py"]
    exec(compile(source, "candidate.py", "exec"), {"__name__": "__main__"})
    sys.stdout.flush()
    sys.stdout.write("\n" + marker + "\n")
    sys.stdout.flush()
run()
"#;

/// Output kept from a failing program, for the report.
const KEPT_OUTPUT: usize = 4096;

/// Standard output read from a program (its own output, then the marker).
const KEPT_STDOUT: usize = 1024 * 1024;

/// How the sandbox isolates a program beyond its resource limits, as `explain`-style text.
pub fn isolation() -> String {
    let tasks = match (task_cgroups(), is_root()) {
        (Some(_), _) => format!(
            "{MORE_TASKS} more processes (a pids cgroup of its own, killed whole at the end)"
        ),
        (None, false) => format!("{MORE_TASKS} more processes (RLIMIT_NPROC)"),
        (None, true) => {
            "process count not limited (root, and no pids cgroup can be made here)".to_owned()
        }
    };
    let network = if network_namespace().is_some() {
        "no network (unshare --net)"
    } else {
        "network not isolated (needs root and unshare)"
    };
    format!("rlimits (1 GiB memory, CPU, 1 MiB files, 64 files), {tasks}, own process group killed at the end, {network}")
}

/// True when this process runs as root.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|ids| ids.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Where this process may make `pids` cgroups: the v1 `pids` hierarchy, or the v2 root when it
/// delegates the `pids` controller. Probed once by making (and removing) one.
fn task_cgroups() -> Option<&'static Path> {
    static BASE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let v2 = Path::new("/sys/fs/cgroup");
        let v2_has_pids = std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|name| name == "pids"));
        let candidates = [v1.to_path_buf()]
            .into_iter()
            .chain(v2_has_pids.then(|| v2.to_path_buf()));
        candidates
            .into_iter()
            .find(|base| TaskCgroup::make(base, MORE_TASKS + 1).is_some_and(|probe| probe.remove()))
    })
    .as_deref()
}

/// One program's `pids` cgroup: at most `max` tasks; whatever is left in it is killed and the
/// cgroup removed when the program is done (also what left the process group with `setsid`).
struct TaskCgroup {
    dir: PathBuf,
}

impl TaskCgroup {
    fn make(base: &Path, max: u32) -> Option<Self> {
        let dir = base.join(format!("mom-router-eval-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&dir).ok()?;
        let made = Self { dir };
        std::fs::write(made.dir.join("pids.max"), max.to_string()).ok()?;
        Some(made)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Kills every task left in the cgroup and removes it; false when it could not be removed
    /// in about a second.
    fn remove(&self) -> bool {
        for _ in 0..100 {
            let left = std::fs::read_to_string(self.procs()).unwrap_or_default();
            let pids: Vec<&str> = left
                .split_whitespace()
                .filter(|p| p.parse::<u32>().is_ok())
                .collect();
            if !pids.is_empty() {
                let _ = std::process::Command::new("kill")
                    .arg("-KILL")
                    .args(&pids)
                    .stderr(Stdio::null())
                    .status();
            }
            if std::fs::remove_dir(&self.dir).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for TaskCgroup {
    /// A cgroup whose program never started (or whose limit could not be set) is removed too;
    /// after [`TaskCgroup::remove`] there is nothing left to remove.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `unshare`, when this process may give a child its own empty network namespace (root).
fn network_namespace() -> Option<&'static str> {
    static UNSHARE: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *UNSHARE.get_or_init(|| {
        let root = is_root();
        let tool = ["/usr/bin/unshare", "/bin/unshare"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())?;
        // Only when it works here (a container may forbid new namespaces).
        let works = std::process::Command::new(tool)
            .args(["--net", "--", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        (root && works).then_some(tool)
    })
}

/// Kills every process of group `pgid` (the program and whatever it started).
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// Reads at most `limit` bytes of `pipe` on a task of its own.
fn keep<R>(pipe: Option<R>, limit: usize) -> tokio::task::JoinHandle<Vec<u8>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut kept = Vec::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(limit as u64).read_to_end(&mut kept).await;
        }
        kept
    })
}

/// Runs `program` in the sandbox: passes when it runs to its end and exits 0 in time.
pub async fn run_python(program: &str, sandbox: &Sandbox) -> Grade {
    let Ok(folder) = tempfile::tempdir() else {
        return Grade::fail("cannot create a working folder");
    };
    // The CPU limit is a backstop one second past the wall clock, so a busy loop is reported
    // as the timeout it is rather than racing the kernel's SIGXCPU.
    let cpu_seconds = sandbox.timeout.as_secs().max(1) + 1;
    let cgroup = task_cgroups().and_then(|base| TaskCgroup::make(base, MORE_TASKS + 1));
    let mut command = match network_namespace() {
        Some(unshare) => {
            let mut command = tokio::process::Command::new(unshare);
            command.args(["--net", "--"]).arg(&sandbox.python);
            command
        }
        None => tokio::process::Command::new(&sandbox.python),
    };
    let spawned = command
        .arg("-I")
        .arg("-c")
        .arg(LAUNCHER)
        .arg(cpu_seconds.to_string())
        .arg(MORE_TASKS.to_string())
        .arg(cgroup.as_ref().map(TaskCgroup::procs).unwrap_or_default())
        .current_dir(folder.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Grade::fail(format!("cannot run {}: {e}", sandbox.python)),
    };
    let group = child.id();
    let marker = format!("mom-router-passed-{:032x}", rand::random::<u128>());
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(format!("{marker}\n").as_bytes()).await;
        let _ = stdin.write_all(program.as_bytes()).await;
    }
    // Past the kept parts the pipes close: a program flooding them gets EPIPE, not a full pipe
    // to block on. Read beside the wait, since a child the program started may hold them open.
    let out = keep(child.stdout.take(), KEPT_STDOUT);
    let err = keep(child.stderr.take(), KEPT_OUTPUT);
    let waited = tokio::time::timeout(sandbox.timeout, child.wait()).await;
    // Whatever the program started dies with it; then the pipes close.
    if let Some(group) = group {
        kill_group(group);
    }
    if let Some(cgroup) = cgroup {
        let removed = tokio::task::spawn_blocking(move || cgroup.remove()).await;
        if !removed.unwrap_or(false) {
            tracing::warn!("an eval sandbox cgroup could not be removed");
        }
    }
    let _ = child.kill().await;
    let output = |task: tokio::task::JoinHandle<Vec<u8>>| async {
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let (out, kept) = (output(out).await, output(err).await);
    let finished = waited.map(|status| (status, out, kept));
    match finished {
        Ok((Ok(status), out, _)) if status.success() => {
            let out = String::from_utf8_lossy(&out);
            if out.trim_end().ends_with(&marker) {
                Grade::pass()
            } else {
                Grade::fail("exit 0 before the tests ran to their end")
            }
        }
        Ok((Ok(status), _, kept)) => {
            let text = String::from_utf8_lossy(&kept);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            let how = match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "ended".to_owned(),
            };
            Grade::fail(format!("{how}: {last}"))
        }
        Ok((Err(e), _, _)) => Grade::fail(format!("cannot wait: {e}")),
        Err(_) => Grade::fail(format!("timed out after {} s", sandbox.timeout.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(seconds: u64) -> Sandbox {
        Sandbox {
            python: "python3".to_owned(),
            timeout: Duration::from_secs(seconds),
        }
    }

    #[tokio::test]
    async fn programs_pass_fail_and_time_out() {
        let good = run_python("assert 2 + 3 == 5\n", &sandbox(5)).await;
        assert_eq!(good.score, 1.0, "{}", good.detail);
        let wrong = run_python("assert 2 - 3 == 5\n", &sandbox(5)).await;
        assert_eq!(wrong.score, 0.0);
        assert!(wrong.detail.contains("AssertionError"), "{}", wrong.detail);
        let stuck = run_python("while True:\n    pass\n", &sandbox(1)).await;
        assert_eq!(stuck.score, 0.0);
        assert!(stuck.detail.contains("timed out"), "{}", stuck.detail);
        // The program cannot read the environment it was started from.
        let snoop = "import os\nassert 'CARGO' not in ''.join(os.environ)\n";
        assert_eq!(run_python(snoop, &sandbox(5)).await.score, 1.0);
    }

    #[tokio::test]
    async fn an_early_exit_fails_and_what_the_program_started_dies_with_it() {
        for exit in ["import sys\nsys.exit(0)", "import os\nos._exit(0)"] {
            let graded = run_python(&format!("{exit}\nassert False\n"), &sandbox(5)).await;
            assert_eq!(graded.score, 0.0, "{exit}");
            assert!(
                graded.detail.contains("before the tests ran"),
                "{}",
                graded.detail
            );
        }
        // Printing is fine; a passing program still passes.
        let chatty = run_python("print('hello ' * 1000)\n", &sandbox(5)).await;
        assert_eq!(chatty.score, 1.0, "{}", chatty.detail);
        // A child left running in the background dies with the program, also one that left its
        // process group (setsid) where the sandbox has a cgroup of its own.
        let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let escapes = if task_cgroups().is_some() {
            "'setsid', "
        } else {
            ""
        };
        let flag = folder.path().join("alive");
        let daemon = format!(
            "import subprocess\nsubprocess.Popen([{escapes}'sh', '-c', 'sleep 2; touch {}'])\n",
            flag.display()
        );
        let graded = run_python(&daemon, &sandbox(5)).await;
        assert_eq!(graded.score, 1.0, "{}", graded.detail);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!flag.exists(), "the background child outlived the program");
    }

    #[tokio::test]
    async fn a_fork_bomb_stops_at_the_task_limit() {
        // Passes only when forking fails within the limit (it would run 200 otherwise).
        let bomb = format!(
            "import os, time\nstarted = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        started += 1\nexcept OSError:\n    pass\nassert started <= {MORE_TASKS}, started\n"
        );
        let graded = run_python(&bomb, &sandbox(10)).await;
        if is_root() && task_cgroups().is_none() {
            // Said in `isolation()`: nothing limits root here.
            assert!(isolation().contains("not limited"));
            return;
        }
        assert_eq!(graded.score, 1.0, "{}", graded.detail);
    }
}
