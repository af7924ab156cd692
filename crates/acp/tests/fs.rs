//! The provided file and terminal handlers: confinement to the root, `line`/`limit`, size limits at the limit and one past it,
//! the same through the wire (an agent asking over `fs/*`, including a 1 MB answer), and terminals run for an agent.

mod support;

use std::path::{Path, PathBuf};

use agentwire_acp::{ClientBuilder, FsError, FsLimits, RootedFs};
use agentwire_fixture_agents::acp_fixture::Mode;
use support::{memory_pair, within};

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// `root/` with `a.txt` ("one\ntwo\nthree\n") and `sub/`, next to `outside/secret.txt`; `root/link` → the secret,
/// `root/sub/up` → `outside/`.
fn tree() -> Tree {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(root.join("a.txt"), "one\ntwo\nthree\n").expect("write");
    std::fs::write(outside.join("secret.txt"), "secret").expect("write");
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link")).expect("symlink");
    std::os::unix::fs::symlink(&outside, root.join("sub/up")).expect("symlink");
    std::os::unix::fs::symlink(root.join("a.txt"), root.join("inner-link")).expect("symlink");
    Tree {
        _dir: dir,
        root,
        outside,
    }
}

fn code<T>(result: Result<T, FsError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.code().to_owned(),
    }
}

#[tokio::test]
async fn reads_are_confined_to_the_root() {
    let tree = tree();
    let fs = RootedFs::new(&tree.root).expect("root");
    let read = |path: PathBuf, line, limit| {
        let fs = &fs;
        async move { fs.read(&path, line, limit).await }
    };
    assert_eq!(
        read(tree.root.join("a.txt"), None, None).await,
        Ok("one\ntwo\nthree\n".to_owned())
    );
    assert_eq!(
        read(tree.root.join("a.txt"), Some(2), Some(1)).await,
        Ok("two\n".to_owned())
    );
    assert_eq!(
        read(tree.root.join("inner-link"), Some(3), None).await,
        Ok("three\n".to_owned())
    );
    let cases = [
        (tree.root.join("../outside/secret.txt"), "outside_root"),
        (tree.root.join("link"), "outside_root"),
        (tree.root.join("sub/up/secret.txt"), "outside_root"),
        (tree.outside.join("secret.txt"), "outside_root"),
        (PathBuf::from("a.txt"), "not_absolute"),
        (tree.root.join("missing.txt"), "not_found"),
        (tree.root.join("sub"), "not_a_file"),
    ];
    for (path, expect) in cases {
        assert_eq!(
            code(read(path.clone(), None, None).await),
            expect,
            "{}",
            path.display()
        );
    }
    assert_eq!(
        code(read(tree.root.join("a.txt"), Some(0), None).await),
        "invalid_line"
    );
    std::fs::write(tree.root.join("bin"), [0xff, 0xfe]).expect("write");
    assert_eq!(
        code(read(tree.root.join("bin"), None, None).await),
        "not_utf8"
    );
}

#[tokio::test]
async fn writes_are_confined_and_atomic() {
    let tree = tree();
    let fs = RootedFs::new(&tree.root).expect("root");
    fs.write(&tree.root.join("new.txt"), "fresh")
        .await
        .expect("create");
    assert_eq!(
        std::fs::read_to_string(tree.root.join("new.txt")).expect("read"),
        "fresh"
    );
    fs.write(&tree.root.join("a.txt"), "replaced")
        .await
        .expect("replace");
    assert_eq!(
        std::fs::read_to_string(tree.root.join("a.txt")).expect("read"),
        "replaced"
    );
    // Through a symlink that stays inside the root: the target is written.
    fs.write(&tree.root.join("inner-link"), "via link")
        .await
        .expect("inner link");
    assert_eq!(
        std::fs::read_to_string(tree.root.join("a.txt")).expect("read"),
        "via link"
    );
    let cases = [
        (tree.root.join("link"), "outside_root"),
        (tree.root.join("sub/up/new.txt"), "outside_root"),
        (tree.root.join("../outside/new.txt"), "outside_root"),
        (tree.root.join("nodir/new.txt"), "not_found"),
        (tree.root.join("sub"), "not_a_file"),
        (PathBuf::from("rel.txt"), "not_absolute"),
    ];
    for (path, expect) in cases {
        assert_eq!(
            code(fs.write(&path, "x").await),
            expect,
            "{}",
            path.display()
        );
    }
    assert_eq!(
        std::fs::read_to_string(tree.outside.join("secret.txt")).expect("read"),
        "secret"
    );
    assert!(!tree.outside.join("new.txt").exists());
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&tree.root)
        .expect("list")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn size_limits_hold_at_the_limit_and_one_past_it() {
    let tree = tree();
    let limits = FsLimits {
        max_read_bytes: 10,
        max_write_bytes: 10,
    };
    let fs = RootedFs::new(&tree.root).expect("root").with_limits(limits);
    std::fs::write(tree.root.join("ten"), "0123456789").expect("write");
    std::fs::write(tree.root.join("eleven"), "0123456789a").expect("write");
    assert_eq!(
        code(fs.read(&tree.root.join("ten"), None, None).await),
        "ok"
    );
    assert_eq!(
        fs.read(&tree.root.join("eleven"), None, None).await,
        Err(FsError::TooLarge {
            bytes: 11,
            limit: 10
        })
    );
    assert_eq!(
        code(fs.write(&tree.root.join("w"), "0123456789").await),
        "ok"
    );
    assert_eq!(
        code(fs.write(&tree.root.join("w"), "0123456789a").await),
        "too_large"
    );
    assert_eq!(
        std::fs::read_to_string(tree.root.join("w")).expect("read"),
        "0123456789"
    );
}

async fn fs_turn(root: &Path, builder: ClientBuilder, prompt: &str) -> String {
    let (client, tap) = memory_pair(Mode::Fs, builder);
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(root)).await.expect("session");
    let turn = within(session.prompt_text(prompt)).await.expect("prompt");
    let (updates, result) = within(turn.finish()).await;
    assert!(result.is_ok(), "{result:?}");
    tap.assert_clean(true);
    updates
        .iter()
        .filter_map(|u| u.agent_text().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn agents_read_and_write_through_the_wire() {
    let tree = tree();
    let builder = || ClientBuilder::new().fs_handler(RootedFs::new(&tree.root).expect("root"));
    let a = tree.root.join("a.txt");
    assert_eq!(
        fs_turn(&tree.root, builder(), &format!("read {} 2 1", a.display())).await,
        "two\n"
    );
    let b = tree.root.join("b.txt");
    assert_eq!(
        fs_turn(
            &tree.root,
            builder(),
            &format!("write {} hello world", b.display())
        )
        .await,
        "written"
    );
    assert_eq!(std::fs::read_to_string(&b).expect("read"), "hello world");
    let secret = tree.root.join("link");
    let refused = fs_turn(&tree.root, builder(), &format!("read {}", secret.display())).await;
    assert_eq!(refused, "error -32602 outside_root");
    let missing = fs_turn(
        &tree.root,
        builder(),
        &format!("read {}", tree.root.join("nope").display()),
    )
    .await;
    assert_eq!(missing, "error -32002 not_found");
    // Without a handler the client does not serve fs/*: method not found.
    let plain = fs_turn(
        &tree.root,
        ClientBuilder::new(),
        &format!("read {}", a.display()),
    )
    .await;
    assert_eq!(plain, "error -32601 ");
}

#[tokio::test]
async fn a_one_megabyte_read_answer_crosses_the_wire() {
    let tree = tree();
    let big: String = (0..20_000)
        .map(|i| format!("line {i:05} {}\n", "x".repeat(40)))
        .collect();
    assert!(big.len() > 1_000_000);
    let path = tree.root.join("big.txt");
    std::fs::write(&path, &big).expect("write");
    let builder = ClientBuilder::new().fs_handler(RootedFs::new(&tree.root).expect("root"));
    let text = fs_turn(&tree.root, builder, &format!("read {}", path.display())).await;
    assert_eq!(text.len(), big.len());
    assert!(text == big);
}

async fn terminal_turn(builder: ClientBuilder, prompt: &str) -> (String, support::Tap) {
    let (client, tap) = memory_pair(Mode::Terminal, builder);
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/tmp")))
        .await
        .expect("session");
    let turn = within(session.prompt_text(prompt)).await.expect("prompt");
    let (updates, result) = within(turn.finish()).await;
    assert!(result.is_ok(), "{result:?}");
    (
        updates
            .iter()
            .filter_map(|u| u.agent_text().map(str::to_owned))
            .collect(),
        tap,
    )
}

#[tokio::test]
async fn terminals_run_commands_for_the_agent() {
    use agentwire_acp::{ProcessTerminals, TerminalLimits};
    let terminals =
        || ClientBuilder::new().terminal_handler(ProcessTerminals::new(TerminalLimits::default()));
    assert!(terminals().capabilities().terminal);
    let (text, tap) = terminal_turn(terminals(), "printf hello-terminal").await;
    assert_eq!(text, "exit 0 truncated false: hello-terminal");
    tap.assert_clean(true);
    // outputByteLimit keeps the last bytes, at a character boundary: at the limit, and one past it.
    let (text, _) = terminal_turn(terminals(), "limit=5 printf héllo").await;
    assert_eq!(text, "exit 0 truncated true: éllo");
    let (text, _) = terminal_turn(terminals(), "limit=6 printf héllo").await;
    assert_eq!(text, "exit 0 truncated false: héllo");
    let (text, _) = terminal_turn(terminals(), "false").await;
    assert_eq!(text, "exit 1 truncated false: ");
    // Without a handler, terminal/* is not served.
    let (text, _) = terminal_turn(ClientBuilder::new(), "printf x").await;
    assert_eq!(text, "error -32601 ");
}

#[tokio::test]
async fn terminal_limits_hold_at_the_limit_and_one_past_it() {
    use agentwire_acp::schema::{
        CreateTerminalRequest, ReleaseTerminalRequest, TerminalOutputRequest,
        WaitForTerminalExitRequest,
    };
    use agentwire_acp::{ProcessTerminals, TerminalHandler, TerminalLimits};
    let limits = TerminalLimits {
        default_output_byte_limit: 4,
        max_output_byte_limit: 6,
        max_terminals: 1,
    };
    let terminals = ProcessTerminals::new(limits);
    let run = |limit: Option<u64>| {
        CreateTerminalRequest::new("s", "printf")
            .args(vec!["0123456789".to_owned()])
            .output_byte_limit(limit)
    };
    // At max_terminals: one runs; one past it is refused until it is released.
    let first = within(terminals.create(run(None)))
        .await
        .expect("first terminal")
        .terminal_id;
    let refused = within(terminals.create(run(None)))
        .await
        .expect_err("second terminal");
    assert_eq!(refused.code.0, -32603);
    within(terminals.wait_for_exit(WaitForTerminalExitRequest::new("s", first.clone())))
        .await
        .expect("exit");
    // The default limit applies without outputByteLimit.
    let output = within(terminals.output(TerminalOutputRequest::new("s", first.clone())))
        .await
        .expect("output");
    assert!(output.exit_status.is_some());
    assert!(output.output.len() <= 4 && output.truncated, "{output:?}");
    within(terminals.release(ReleaseTerminalRequest::new("s", first.clone())))
        .await
        .expect("release");
    let gone = within(terminals.output(TerminalOutputRequest::new("s", first)))
        .await
        .expect_err("released");
    assert_eq!(gone.code.0, -32002);
    // A requested limit over max_output_byte_limit is clamped to it (6), one at it is honoured (6).
    for requested in [6, 7] {
        let id = within(terminals.create(run(Some(requested))))
            .await
            .expect("terminal")
            .terminal_id;
        within(terminals.wait_for_exit(WaitForTerminalExitRequest::new("s", id.clone())))
            .await
            .expect("exit");
        let output = within(async {
            loop {
                let output = terminals
                    .output(TerminalOutputRequest::new("s", id.clone()))
                    .await
                    .expect("output");
                if output.output == "456789" {
                    break output;
                }
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(output.truncated);
        within(terminals.release(ReleaseTerminalRequest::new("s", id)))
            .await
            .expect("release");
    }
}
