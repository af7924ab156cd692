//! Race-free file confinement ([`Confined`], [`RootedFs`]): a swapper thread that keeps replacing a directory under
//! the root with a symlink to a directory outside it, while reads and writes run through that directory, thousands of
//! times; FIFOs and other non-files refused without blocking; the portable walk held to the same cases as `openat2`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentwire_acp::fs::{Confined, read_beneath, write_beneath};
use agentwire_acp::{FsError, RootedFs};

/// Tries per operation in the race tests.
const TRIES: u64 = 3000;

/// The bound on a race test's run: never reached unless something is broken (a loaded 2-core box does 3000 tries
/// in a few seconds).
const DEADLINE: Duration = Duration::from_secs(120);

struct RaceTree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// `root/real/f.txt` ("inside"), `root/evil` → `outside/` (absolute symlink), `root/file-real` ("inside"),
/// `root/file-evil` → `outside/f.txt`, and `outside/f.txt` ("OUTSIDE"). The swapper moves `real` and `evil` in turn
/// to `root/d` ([`Swap::Directory`]), or `file-real` and `file-evil` to `root/t` ([`Swap::File`]).
fn race_tree() -> RaceTree {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("real")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(root.join("real/f.txt"), "inside").expect("write");
    std::fs::write(outside.join("f.txt"), "OUTSIDE").expect("write");
    std::os::unix::fs::symlink(&outside, root.join("evil")).expect("symlink");
    std::fs::write(root.join("file-real"), "inside").expect("write");
    std::os::unix::fs::symlink(outside.join("f.txt"), root.join("file-evil")).expect("symlink");
    RaceTree {
        _dir: dir,
        root,
        outside,
    }
}

/// What the swapper swaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Swap {
    /// `root/d`: the directory `real` or the symlink `evil` to the outside directory; requests go to `d/f.txt` (read)
    /// and `d/new.txt` (write).
    Directory,
    /// `root/t`: the file `file-real` or the symlink `file-evil` to the outside file; requests go to `t`.
    File,
}

/// Swaps the [`Swap`] name between the real entry and the symlink to outside until `stop`; counts full cycles.
fn spawn_swapper(
    root: PathBuf,
    swap: Swap,
    stop: Arc<AtomicBool>,
    cycles: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (real, evil, name) = match swap {
            Swap::Directory => (root.join("real"), root.join("evil"), root.join("d")),
            Swap::File => (
                root.join("file-real"),
                root.join("file-evil"),
                root.join("t"),
            ),
        };
        let evil_target = std::fs::read_link(&evil).expect("evil link");
        while !stop.load(Ordering::Relaxed) {
            std::fs::rename(&real, &name).expect("real -> name");
            std::fs::rename(&name, &real).expect("name -> real");
            std::fs::rename(&evil, &name).expect("evil -> name");
            std::fs::rename(&name, &evil).expect("name -> evil");
            // A write that won the race replaced the link itself (never its target): put the link back.
            if !std::fs::symlink_metadata(&evil).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&evil).expect("remove replaced link");
                std::os::unix::fs::symlink(&evil_target, &evil).expect("relink");
            }
            cycles.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// What the outside directory holds: only `f.txt` with "OUTSIDE", whatever ran.
fn assert_outside_untouched(outside: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(outside)
        .expect("list outside")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["f.txt"], "files appeared outside the root");
    assert_eq!(
        std::fs::read_to_string(outside.join("f.txt")).expect("read"),
        "OUTSIDE"
    );
}

/// Outcome counts of a race run, by error code (`ok` for success).
#[derive(Debug, Default)]
struct Tally {
    counts: std::collections::BTreeMap<String, u64>,
}

impl Tally {
    fn add<T>(&mut self, result: &Result<T, FsError>) {
        let code = match result {
            Ok(_) => "ok",
            Err(error) => error.code(),
        };
        *self.counts.entry(code.to_owned()).or_default() += 1;
    }

    fn get(&self, code: &str) -> u64 {
        self.counts.get(code).copied().unwrap_or(0)
    }
}

/// Runs `read` and `write` [`TRIES`] times each (on two threads) while the swapper runs, and keeps going until the
/// swapper has also completed as many cycles and both a success and an `outside_root` refusal were seen (so the
/// race was really run), within [`DEADLINE`].
fn race(
    tree: &RaceTree,
    swap: Swap,
    read: impl Fn(&Path) -> Result<String, FsError> + Send + Sync,
    write: impl Fn(&Path) -> Result<(), FsError> + Send + Sync,
) -> (Tally, Tally) {
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let swapper = spawn_swapper(tree.root.clone(), swap, stop.clone(), cycles.clone());
    let started = Instant::now();
    let (target, written, readable) = match swap {
        Swap::Directory => (
            tree.root.join("d/f.txt"),
            tree.root.join("d/new.txt"),
            &["inside"][..],
        ),
        // The writer replaces `t` (or the file moved from it) with "w".
        Swap::File => (
            tree.root.join("t"),
            tree.root.join("t"),
            &["inside", "w"][..],
        ),
    };
    let enough = |tally: &Tally, tries: u64| {
        tries >= TRIES
            && cycles.load(Ordering::Relaxed) >= TRIES
            && tally.get("ok") > 0
            && tally.get("outside_root") > 0
    };
    let (reads, writes) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut tally = Tally::default();
            let mut tries = 0;
            while !enough(&tally, tries) && started.elapsed() < DEADLINE {
                let result = read(&target);
                if let Ok(text) = &result {
                    assert!(
                        readable.contains(&text.as_str()),
                        "read a file outside the root: {text:?}"
                    );
                }
                tally.add(&result);
                tries += 1;
            }
            tally
        });
        let writer = scope.spawn(|| {
            let mut tally = Tally::default();
            let mut tries = 0;
            while !enough(&tally, tries) && started.elapsed() < DEADLINE {
                tally.add(&write(&written));
                tries += 1;
            }
            tally
        });
        (
            reader.join().expect("reader"),
            writer.join().expect("writer"),
        )
    });
    stop.store(true, Ordering::Relaxed);
    swapper.join().expect("swapper");
    assert_outside_untouched(&tree.outside);
    for (what, tally) in [("reads", &reads), ("writes", &writes)] {
        assert!(
            tally.get("ok") > 0 && tally.get("outside_root") > 0,
            "{what} did not see both outcomes within {DEADLINE:?} (swapper cycles {}): {tally:?}",
            cycles.load(Ordering::Relaxed)
        );
    }
    // No temporary files are left anywhere in the root.
    for dir in [tree.root.clone(), tree.root.join("real")] {
        for entry in std::fs::read_dir(&dir).expect("list") {
            let name = entry.expect("entry").file_name();
            assert!(
                !name.to_string_lossy().ends_with(".tmp"),
                "left behind: {name:?}"
            );
        }
    }
    if swap == Swap::File {
        return (reads, writes);
    }
    // Nothing but the written file is left in the real directory.
    let mut inside: Vec<String> = std::fs::read_dir(tree.root.join("real"))
        .expect("list real")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    inside.sort();
    assert_eq!(inside, ["f.txt", "new.txt"]);
    (reads, writes)
}

/// Races [`Confined`] (both resolvers) under each [`Swap`].
fn race_confined(walk_only: bool, swap: Swap) {
    let tree = race_tree();
    let confined = Confined::open(&tree.root).expect("root");
    let confined = if walk_only {
        confined.walk_only()
    } else {
        confined
    };
    let rel = |path: &Path| {
        confined
            .relative(path)
            .map(Path::to_path_buf)
            .expect("inside")
    };
    race(
        &tree,
        swap,
        |path| {
            confined
                .read_file(&rel(path), 1024)
                .map(|bytes| String::from_utf8(bytes).expect("utf8"))
        },
        |path| confined.write_file(&rel(path), b"w"),
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_never_leaks_reads_or_writes_outside() {
    race_confined(false, Swap::Directory);
}

#[test]
fn a_file_swapped_for_a_symlink_never_leaks_reads_or_writes_outside() {
    race_confined(false, Swap::File);
}

#[test]
fn the_portable_walk_alone_never_leaks_reads_or_writes_outside() {
    race_confined(true, Swap::Directory);
    race_confined(true, Swap::File);
}

#[test]
fn rooted_fs_under_the_same_races_never_leaks() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    for swap in [Swap::Directory, Swap::File] {
        let tree = race_tree();
        let fs = RootedFs::new(&tree.root).expect("root");
        race(
            &tree,
            swap,
            |path| runtime.block_on(fs.read(path, None, None)),
            |path| runtime.block_on(fs.write(path, "w")),
        );
    }
}

/// A FIFO, a Unix socket and a directory in the root are refused at once, for reads and writes (a FIFO open for
/// reading would block until a writer appears).
#[test]
fn non_regular_files_are_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let fifo = root.join("fifo");
    make_fifo(&fifo);
    let _socket = std::os::unix::net::UnixListener::bind(root.join("sock")).expect("socket");
    std::fs::create_dir(root.join("dir")).expect("mkdir");
    for confined in [
        Confined::open(&root).expect("root"),
        Confined::open(&root).expect("root").walk_only(),
    ] {
        for name in ["fifo", "sock", "dir"] {
            assert_eq!(
                confined.read_file(Path::new(name), 1024),
                Err(FsError::NotAFile),
                "{name}"
            );
            assert_eq!(
                confined.write_file(Path::new(name), b"x"),
                Err(FsError::NotAFile),
                "{name}"
            );
        }
        // Through a symlink that stays inside, too.
        let link = root.join("to-fifo");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("fifo", &link).expect("symlink");
        assert_eq!(
            confined.read_file(Path::new("to-fifo"), 1024),
            Err(FsError::NotAFile)
        );
    }
    // The FIFO is still a FIFO: writes never replaced it.
    use std::os::unix::fs::FileTypeExt as _;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .expect("fifo")
            .file_type()
            .is_fifo()
    );
}

/// `mkfifo PATH`, without spawning (only agentwire-process spawns).
#[cfg(not(target_vendor = "apple"))]
fn make_fifo(path: &Path) {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).expect("mkfifo");
}

/// macOS lacks `mknodat` in rustix; `mkfifo` through agentwire-process there.
#[cfg(target_vendor = "apple")]
fn make_fifo(path: &Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut command = agentwire_process::Command::new("mkfifo");
        command.arg(path).inherit_os_env();
        let mut child = command.spawn().expect("spawn mkfifo");
        assert!(child.wait().await.expect("mkfifo").success());
    });
}

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

/// `root/a.txt`, `root/sub/b.txt`, links: `abs-in` → `root/a.txt` (absolute), `rel-in` → `sub/b.txt`,
/// `sub/up-in` → `../a.txt`, `abs-out` → `outside/secret.txt`, `rel-out` → `../outside/secret.txt`,
/// `sub/dir-out` → `../../outside`, `loop` ↔ `loop2`, `self` → `.`; and `outside/secret.txt`.
fn tree() -> Tree {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(root.join("a.txt"), "a").expect("write");
    std::fs::write(root.join("sub/b.txt"), "b").expect("write");
    std::fs::write(outside.join("secret.txt"), "secret").expect("write");
    let link = |target: &Path, name: &str| {
        std::os::unix::fs::symlink(target, root.join(name)).expect("symlink")
    };
    link(&root.join("a.txt"), "abs-in");
    link(Path::new("sub/b.txt"), "rel-in");
    link(Path::new("../a.txt"), "sub/up-in");
    link(&outside.join("secret.txt"), "abs-out");
    link(Path::new("../outside/secret.txt"), "rel-out");
    link(Path::new("../../outside"), "sub/dir-out");
    link(Path::new("loop2"), "loop");
    link(Path::new("loop"), "loop2");
    link(Path::new("."), "self");
    Tree { _dir: dir, root }
}

fn code<T>(result: Result<T, FsError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.code().to_owned(),
    }
}

/// Both resolvers agree on every case: links inside are followed, links and `..` out are refused.
#[test]
fn the_walk_and_openat2_agree_on_links_and_dot_dot() {
    let tree = tree();
    let cases = [
        ("a.txt", "ok"),
        ("sub/b.txt", "ok"),
        ("abs-in", "ok"),
        ("rel-in", "ok"),
        ("sub/up-in", "ok"),
        ("sub/../a.txt", "ok"),
        ("self/self/a.txt", "ok"),
        ("abs-out", "outside_root"),
        ("rel-out", "outside_root"),
        ("sub/dir-out/secret.txt", "outside_root"),
        ("../outside/secret.txt", "outside_root"),
        ("sub/../../outside/secret.txt", "outside_root"),
        ("loop", "io_error"),
        ("missing", "not_found"),
        ("nodir/x", "not_found"),
        ("sub", "not_a_file"),
        ("self", "not_a_file"),
        ("", "not_a_file"),
    ];
    for confined in [
        Confined::open(&tree.root).expect("root"),
        Confined::open(&tree.root).expect("root").walk_only(),
    ] {
        for (rel, expect) in cases {
            assert_eq!(
                code(confined.read_file(Path::new(rel), 1024)),
                expect,
                "read {rel} ({confined:?})"
            );
        }
        // Writes: through links inside, never out; the target of `rel-in` is replaced, not the link.
        for (rel, expect) in [
            ("new.txt", "ok"),
            ("sub/new.txt", "ok"),
            ("rel-in", "ok"),
            ("abs-in", "ok"),
            ("sub/up-in", "ok"),
            ("abs-out", "outside_root"),
            ("rel-out", "outside_root"),
            ("sub/dir-out/new.txt", "outside_root"),
            ("../outside/new.txt", "outside_root"),
            ("nodir/new.txt", "not_found"),
            ("sub", "not_a_file"),
            ("..", "not_a_file"),
        ] {
            assert_eq!(
                code(confined.write_file(Path::new(rel), b"w")),
                expect,
                "write {rel}"
            );
        }
        assert!(
            std::fs::symlink_metadata(tree.root.join("rel-in"))
                .expect("link")
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(tree.root.join("sub/b.txt")).expect("b"),
            "w"
        );
    }
    let outside = tree.root.parent().expect("base").join("outside");
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).expect("secret"),
        "secret"
    );
    assert!(!outside.join("new.txt").exists());
}

#[test]
fn replacing_a_file_keeps_its_permission_bits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("script.sh");
    std::fs::write(&file, "old").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o751)).expect("chmod");
    let confined = Confined::open(dir.path()).expect("root");
    confined
        .write_file(Path::new("script.sh"), b"new")
        .expect("write");
    let metadata = std::fs::metadata(&file).expect("metadata");
    assert_eq!(metadata.permissions().mode() & 0o7777, 0o751);
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "new");
}

/// The free functions take a borrowed descriptor (what agentctl holds): same rules, and absolute links are
/// accepted only under the paths given.
#[test]
fn read_and_write_beneath_a_borrowed_descriptor() {
    let tree = tree();
    let dir = std::fs::File::open(&tree.root).expect("open root");
    use std::os::fd::AsFd as _;
    let paths = [tree.root.clone()];
    assert_eq!(
        read_beneath(dir.as_fd(), &paths, Path::new("abs-in"), 16),
        Ok(b"a".to_vec())
    );
    assert_eq!(
        read_beneath(dir.as_fd(), &[], Path::new("abs-in"), 16),
        Err(FsError::OutsideRoot)
    );
    assert_eq!(
        read_beneath(dir.as_fd(), &paths, Path::new("rel-out"), 16),
        Err(FsError::OutsideRoot)
    );
    write_beneath(dir.as_fd(), &paths, Path::new("sub/c.txt"), b"c").expect("write");
    assert_eq!(
        std::fs::read_to_string(tree.root.join("sub/c.txt")).expect("c"),
        "c"
    );
    // At the read limit and one past it.
    assert_eq!(
        read_beneath(dir.as_fd(), &paths, Path::new("a.txt"), 1),
        Ok(b"a".to_vec())
    );
    assert_eq!(
        read_beneath(dir.as_fd(), &paths, Path::new("a.txt"), 0),
        Err(FsError::TooLarge { bytes: 1, limit: 0 })
    );
}
