//! Grading an answer under its item's output contract. HumanEval code runs in a sandboxed
//! subprocess: `python3 -I` (no user site, no environment), an empty temporary working folder,
//! a cleared environment, limits on address space, CPU time, file size and open files set before
//! the candidate runs, a wall-clock timeout after which it is killed, and bounded output.

use super::suite::{Item, Kind};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How one answer fared.
#[derive(Debug, Clone, PartialEq)]
pub struct Grade {
    /// 1.0 when correct, else 0.0.
    pub score: f64,
    /// Why it failed, in a few words (empty when it passed).
    pub detail: String,
}

impl Grade {
    fn pass() -> Self {
        Self {
            score: 1.0,
            detail: String::new(),
        }
    }

    fn fail(detail: impl Into<String>) -> Self {
        Self {
            score: 0.0,
            detail: detail.into(),
        }
    }
}

/// Where and how long HumanEval code may run.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The Python interpreter.
    pub python: String,
    /// Wall-clock limit for one program (also its CPU-time limit).
    pub timeout: Duration,
}

/// Grades `answer` for `item`.
pub async fn grade(item: &Item, answer: &str, sandbox: &Sandbox) -> Grade {
    match item.kind {
        Kind::Choice => {
            let expected = item.answer.as_deref().unwrap_or_default().trim();
            match chosen_letter(answer) {
                Some(letter) if expected.eq_ignore_ascii_case(&letter.to_string()) => Grade::pass(),
                Some(letter) => Grade::fail(format!("answered {letter}")),
                None => Grade::fail("no ANSWER: X line"),
            }
        }
        Kind::Exact => {
            let expected = normalise(item.answer.as_deref().unwrap_or_default());
            let given = answer
                .rsplit_once("ANSWER:")
                .map_or(answer, |(_, after)| after);
            if normalise(given) == expected {
                Grade::pass()
            } else {
                Grade::fail("different answer")
            }
        }
        Kind::Contains => {
            if contains_words(answer, item.answer.as_deref().unwrap_or_default()) {
                Grade::pass()
            } else {
                Grade::fail("expected words absent")
            }
        }
        Kind::Number => {
            let expected = item.answer.as_deref().unwrap_or_default().trim();
            match (last_number(answer), expected.parse::<f64>()) {
                (Some(given), Ok(expected)) if (given - expected).abs() < 1e-9 => Grade::pass(),
                (Some(given), _) => Grade::fail(format!("answered {given}")),
                (None, _) => Grade::fail("no number"),
            }
        }
        Kind::Humaneval => {
            let program = humaneval_program(item, answer);
            run_python(&program, sandbox).await
        }
    }
}

/// Whether the words of `expected` appear in `answer` in order, whole (not inside a longer
/// word), ignoring case and punctuation between words.
pub fn contains_words(answer: &str, expected: &str) -> bool {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (haystack, needle) = (words(answer), words(expected));
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|w| w == needle.as_slice())
}

/// The last number written in `text` (an optional minus sign, digits, an optional decimal part;
/// thousands separators not read).
pub fn last_number(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut found = None;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let negative =
                i > 0 && bytes[i - 1] == b'-' && (i < 2 || !bytes[i - 2].is_ascii_digit());
            let start = if negative { i - 1 } else { i };
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            found = text[start..i].parse::<f64>().ok().or(found);
        } else {
            i += 1;
        }
    }
    found
}

/// The letter of the last `ANSWER: X` in `text`.
pub fn chosen_letter(text: &str) -> Option<char> {
    let upper = text.to_ascii_uppercase();
    upper.rmatch_indices("ANSWER").find_map(|(at, _)| {
        let rest = upper[at + "ANSWER".len()..].trim_start_matches([' ', ':', '*', '(', '\t']);
        let letter = rest.chars().next()?;
        let after = rest[letter.len_utf8()..].chars().next();
        (letter.is_ascii_uppercase() && after.is_none_or(|c| !c.is_ascii_alphanumeric()))
            .then_some(letter)
    })
}

/// Lower case, inner whitespace collapsed, surrounding punctuation and quotes removed.
pub fn normalise(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .join(" ")
        .trim_matches(|c: char| c.is_ascii_punctuation() || c == '"' || c == '\'')
        .to_lowercase()
}

/// The code in `answer`: the last fenced block that defines the entry point, else the first
/// fenced block, else the whole answer.
pub fn extract_code(answer: &str, entry_point: &str) -> String {
    let mut blocks = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        let Some(close) = body.find("```") else {
            blocks.push(body.to_owned());
            break;
        };
        blocks.push(body[..close].to_owned());
        rest = &body[close + 3..];
    }
    let defines = format!("def {entry_point}");
    blocks
        .iter()
        .rev()
        .find(|b| b.contains(&defines))
        .or_else(|| blocks.first())
        .cloned()
        .unwrap_or_else(|| answer.to_owned())
}

/// The program that tests an answer: the prompt's imports, the answer's code (after the
/// prompt when the code does not define the entry point itself: a completion), the item's
/// tests and the call of `check`.
pub fn humaneval_program(item: &Item, answer: &str) -> String {
    let entry_point = item.entry_point.as_deref().unwrap_or_default();
    let code = extract_code(answer, entry_point);
    let imports: Vec<&str> = item
        .prompt
        .lines()
        .filter(|l| l.starts_with("import ") || l.starts_with("from "))
        .collect();
    let body = if code.contains(&format!("def {entry_point}")) {
        code
    } else {
        format!("{}{code}", item.prompt)
    };
    format!(
        "{}\n\n{body}\n\n{}\n\ncheck({entry_point})\n",
        imports.join("\n"),
        item.test.as_deref().unwrap_or_default()
    )
}

/// Sets the limits, reads the run's marker (first line of stdin) and the program (the rest),
/// runs the program as `__main__`, and writes the marker only when the program ran to its end:
/// a program that exits early (`sys.exit(0)`, `os._exit(0)`) before its tests ran does not pass.
const LAUNCHER: &str = r#"
import os, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
if os.getuid() != 0:
    # RLIMIT_NPROC counts every task of the user: allow 16 more than run now.
    tasks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat("/proc/" + pid).st_uid == os.getuid():
                tasks += len(os.listdir("/proc/" + pid + "/task"))
        except OSError:
            pass
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks + 16, tasks + 16))
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
pub fn isolation() -> &'static str {
    if network_namespace().is_some() {
        "rlimits (1 GiB memory, CPU, 1 MiB files, 64 files), own process group killed at the end, no network (unshare --net); as root the process count is not limited"
    } else {
        "rlimits (1 GiB memory, CPU, 1 MiB files, 64 files, 16 more processes), own process group killed at the end; network not isolated (needs root and unshare)"
    }
}

/// `unshare`, when this process may give a child its own empty network namespace (root).
fn network_namespace() -> Option<&'static str> {
    static UNSHARE: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *UNSHARE.get_or_init(|| {
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|ids| ids.split_whitespace().next() == Some("0"));
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

    fn item(kind: Kind) -> Item {
        Item {
            id: "t".to_owned(),
            kind,
            prompt:
                "from typing import List\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n"
                    .to_owned(),
            choices: Vec::new(),
            answer: Some("B".to_owned()),
            test: Some("def check(candidate):\n    assert candidate(2, 3) == 5\n".to_owned()),
            entry_point: Some("add".to_owned()),
            max_tokens: None,
        }
    }

    #[test]
    fn facts_count_in_a_sentence_and_numbers_by_the_last_one() {
        assert!(contains_words("The capital of France is Paris.", "Paris"));
        assert!(contains_words(
            "It is Mexico City, of course",
            "Mexico City"
        ));
        assert!(!contains_words("Parisian food", "Paris"));
        assert!(contains_words("paris!", "Paris"));
        assert!(!contains_words("Mexico is a city", "Mexico City"));
        assert!(!contains_words("anything", ""));
        assert_eq!(last_number("23 + 19 = 42"), Some(42.0));
        assert_eq!(last_number("It is -7."), Some(-7.0));
        assert_eq!(last_number("10-3 leaves 7"), Some(7.0));
        assert_eq!(last_number("it weighs 2.5 kg!"), Some(2.5));
        assert_eq!(last_number("३३ and none"), None);
        assert_eq!(last_number("no digits"), None);
    }

    #[test]
    fn the_last_answer_line_gives_the_letter() {
        assert_eq!(chosen_letter("I think A.\nANSWER: B"), Some('B'));
        assert_eq!(chosen_letter("answer: (c)"), Some('C'));
        assert_eq!(chosen_letter("**Answer:** D"), Some('D'));
        assert_eq!(chosen_letter("The answer is unclear"), None);
        assert_eq!(chosen_letter("ANSWER: Because"), None);
    }

    #[test]
    fn exact_answers_are_compared_normalised() {
        assert_eq!(normalise("  The  Paris. "), "the paris");
        assert_eq!(normalise("\"Paris\""), "paris");
    }

    #[test]
    fn code_comes_from_the_block_that_defines_the_entry_point() {
        let answer = "Here:\n```python\nimport math\n```\nand\n```python\ndef add(a, b):\n    return a + b\n```\n";
        assert_eq!(
            extract_code(answer, "add"),
            "def add(a, b):\n    return a + b\n"
        );
        assert_eq!(extract_code("```\nx = 1\n```", "add"), "x = 1\n");
        assert_eq!(extract_code("return a + b", "add"), "return a + b");
        // A bare completion is appended to the prompt.
        let program = humaneval_program(&item(Kind::Humaneval), "    return a + b\n");
        assert!(program.starts_with("from typing import List\n\nfrom typing import List"));
        assert!(program.contains("\"\"\"Sum.\"\"\"\n    return a + b"));
        assert!(program.ends_with("check(add)\n"));
    }

    #[tokio::test]
    async fn humaneval_code_passes_fails_and_times_out_in_the_sandbox() {
        let sandbox = Sandbox {
            python: "python3".to_owned(),
            timeout: Duration::from_secs(5),
        };
        let good = "```python\ndef add(a, b):\n    return a + b\n```";
        assert_eq!(
            grade(&item(Kind::Humaneval), good, &sandbox).await.score,
            1.0
        );
        let wrong = grade(
            &item(Kind::Humaneval),
            "```python\ndef add(a, b):\n    return a - b\n```",
            &sandbox,
        )
        .await;
        assert_eq!(wrong.score, 0.0);
        assert!(wrong.detail.contains("AssertionError"), "{}", wrong.detail);
        let quick = Sandbox {
            python: "python3".to_owned(),
            timeout: Duration::from_secs(1),
        };
        let endless = "```python\ndef add(a, b):\n    while True:\n        pass\n```";
        let stuck = grade(&item(Kind::Humaneval), endless, &quick).await;
        assert_eq!(stuck.score, 0.0);
        assert!(stuck.detail.contains("timed out"), "{}", stuck.detail);
        // The candidate cannot read the environment it was started from.
        let snoop = "```python\nimport os\ndef add(a, b):\n    assert 'CARGO' not in ''.join(os.environ)\n    return a + b\n```";
        assert_eq!(
            grade(&item(Kind::Humaneval), snoop, &sandbox).await.score,
            1.0
        );
    }

    #[tokio::test]
    async fn an_early_exit_fails_and_what_the_program_started_dies_with_it() {
        let sandbox = Sandbox {
            python: "python3".to_owned(),
            timeout: Duration::from_secs(5),
        };
        for exit in ["import sys\nsys.exit(0)", "import os\nos._exit(0)"] {
            let answer = format!("```python\n{exit}\ndef add(a, b):\n    return a - b\n```");
            let graded = grade(&item(Kind::Humaneval), &answer, &sandbox).await;
            assert_eq!(graded.score, 0.0, "{exit}");
            assert!(
                graded.detail.contains("before the tests ran"),
                "{}",
                graded.detail
            );
        }
        // Printing is fine; a passing program still passes.
        let chatty = "```python\nprint('hello ' * 1000)\ndef add(a, b):\n    return a + b\n```";
        assert_eq!(
            grade(&item(Kind::Humaneval), chatty, &sandbox).await.score,
            1.0
        );
        // A child left running in the background is killed with the program's group.
        let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let flag = folder.path().join("alive");
        let daemon = format!(
            "```python\nimport subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 2; touch {}'])\ndef add(a, b):\n    return a + b\n```",
            flag.display()
        );
        assert_eq!(
            grade(&item(Kind::Humaneval), &daemon, &sandbox).await.score,
            1.0
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!flag.exists(), "the background child outlived the program");
    }
}
