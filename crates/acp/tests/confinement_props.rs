//! Properties of [`Confined`] on random trees: directories, files and symlinks (relative, `..`-laden, absolute into
//! the root and out of it), queried by random paths. The portable walk agrees with `openat2` on every read and every
//! write, a read only ever returns a file of the root, and nothing outside the root changes.

use std::path::{Path, PathBuf};

use agentwire_acp::fs::Confined;
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Target {
    /// A relative target made of names, `..` and `.`.
    Relative(Vec<&'static str>),
    /// An absolute target inside the root (the root's path joined with these components).
    InsideAbsolute(Vec<&'static str>),
    /// The outside secret file, or the outside directory.
    Outside { file: bool },
}

#[derive(Clone, Debug)]
enum Entry {
    Dir(Vec<&'static str>),
    File(Vec<&'static str>),
    Link(Vec<&'static str>, Target),
}

fn component() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => proptest::sample::select(&NAMES[..]),
        1 => Just(".."),
        1 => Just("."),
    ]
}

fn name_path() -> impl Strategy<Value = Vec<&'static str>> {
    proptest::collection::vec(proptest::sample::select(&NAMES[..]), 1..=3)
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        4 => proptest::collection::vec(component(), 1..=4).prop_map(Target::Relative),
        2 => proptest::collection::vec(component(), 0..=3).prop_map(Target::InsideAbsolute),
        1 => any::<bool>().prop_map(|file| Target::Outside { file }),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        2 => name_path().prop_map(Entry::Dir),
        2 => name_path().prop_map(Entry::File),
        3 => (name_path(), target()).prop_map(|(path, target)| Entry::Link(path, target)),
    ]
}

fn query() -> impl Strategy<Value = Vec<&'static str>> {
    proptest::collection::vec(component(), 0..=5)
}

fn join(base: &Path, parts: &[&str]) -> PathBuf {
    parts
        .iter()
        .fold(base.to_path_buf(), |path, part| path.join(part))
}

struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// Whether every proper prefix of `parts` under `root` is a real directory (no symlink on the way), so that creating
/// the entry cannot itself write outside the root.
fn parent_is_real(root: &Path, parts: &[&str]) -> bool {
    (1..parts.len()).all(|n| {
        std::fs::symlink_metadata(join(root, &parts[..n])).is_ok_and(|m| m.file_type().is_dir())
    })
}

/// Builds the tree; entries whose parent is missing or goes through a symlink, or whose name is taken, are skipped.
fn build(entries: &[Entry]) -> Scene {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical");
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(&root).expect("root");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("secret.txt"), "OUTSIDE").expect("secret");
    for entry in entries {
        let (Entry::Dir(parts) | Entry::File(parts) | Entry::Link(parts, _)) = entry;
        if !parent_is_real(&root, parts) {
            continue;
        }
        match entry {
            Entry::Dir(parts) => {
                let _ = std::fs::create_dir(join(&root, parts));
            }
            Entry::File(parts) => {
                let path = join(&root, parts);
                if std::fs::symlink_metadata(&path).is_err() {
                    let _ = std::fs::write(&path, format!("in:{}", parts.join("/")));
                }
            }
            Entry::Link(parts, target) => {
                let target = match target {
                    Target::Relative(parts) => parts.iter().collect::<PathBuf>(),
                    Target::InsideAbsolute(parts) => join(&root, parts),
                    Target::Outside { file: true } => outside.join("secret.txt"),
                    Target::Outside { file: false } => outside.clone(),
                };
                let _ = std::os::unix::fs::symlink(target, join(&root, parts));
            }
        }
    }
    Scene {
        _dir: dir,
        root,
        outside,
    }
}

fn outcome<T>(result: &Result<T, agentwire_acp::FsError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.code().to_owned(),
    }
}

fn outside_untouched(outside: &Path) -> bool {
    let names: Vec<_> = std::fs::read_dir(outside)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names == ["secret.txt"]
        && std::fs::read_to_string(outside.join("secret.txt")).expect("secret") == "OUTSIDE"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_walk_agrees_with_openat2_and_never_leaves_the_root(
        entries in proptest::collection::vec(entry(), 0..12),
        queries in proptest::collection::vec(query(), 1..8),
    ) {
        let scene = build(&entries);
        let fast = Confined::open(&scene.root).expect("open");
        let walk = Confined::open(&scene.root).expect("open").walk_only();
        for query in &queries {
            let rel: PathBuf = query.iter().collect();
            let by_fast = fast.read_file(&rel, 1024);
            let by_walk = walk.read_file(&rel, 1024);
            prop_assert_eq!(&by_fast, &by_walk, "read {:?}", rel);
            if let Ok(bytes) = &by_fast {
                prop_assert!(bytes.starts_with(b"in:") || bytes.starts_with(b"w:"), "read {:?}: {:?}", rel, bytes);
            }
        }
        for query in &queries {
            let rel: PathBuf = query.iter().collect();
            let by_fast = fast.write_file(&rel, b"w:fast");
            let by_walk = walk.write_file(&rel, b"w:walk");
            prop_assert_eq!(outcome(&by_fast), outcome(&by_walk), "write {:?}", rel);
            if by_walk.is_ok() {
                prop_assert_eq!(walk.read_file(&rel, 1024), Ok(b"w:walk".to_vec()), "read back {:?}", rel);
            }
        }
        prop_assert!(outside_untouched(&scene.outside), "something changed outside the root");
    }
}
