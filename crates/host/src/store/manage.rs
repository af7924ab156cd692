//! Thread management on the store: id prefixes, the most recent thread, delete and rename.
//!
//! A child module of [`crate::store`] (it shares the connection and the run-lock rules) kept apart so the turn
//! path in `store.rs` stays small.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError, ThreadRecord, db, now_ms, run_holder, to_u64};
use crate::ids::{RunId, ThreadId};

/// Most candidates [`StoreError::ThreadAmbiguous`] lists (the count says how many match in all).
pub const MAX_PREFIX_CANDIDATES: usize = 10;

/// What [`Store::delete_thread`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletedThread {
    /// The thread.
    pub id: ThreadId,
    /// Its runs, deleted with it.
    pub runs: u64,
    /// Its messages, deleted with it.
    pub messages: u64,
}

/// Number of hex digits after `th_` in a full thread id.
const ID_HEX_DIGITS: usize = 16;

/// True while the process group `pgid` (an agent's pid, recorded by [`Store::record_agent_pid`]) has a live
/// member. With `/proc` (Linux): some process whose `/proc/<pid>/stat` names `pgid` as its group and is not a zombie
/// (an orphaned agent killed by its parent-death signal stays a zombie until the system's reaper collects it, which
/// in a container may be never). Elsewhere: a signal-0 probe of the group (a group of another user counts as
/// alive). Non-Unix: always false.
pub(crate) fn agent_group_alive(pgid: i64) -> bool {
    #[cfg(unix)]
    {
        let Some(pid) = i32::try_from(pgid)
            .ok()
            .filter(|p| *p > 1)
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        match rustix::process::test_kill_process_group(pid) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::PERM => {}
            Err(_) => return false,
        }
        match std::fs::read_dir("/proc") {
            Ok(entries) if std::path::Path::new("/proc/self/stat").exists() => {
                entries.flatten().any(|entry| {
                    let name = entry.file_name();
                    let is_pid = name
                        .to_str()
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                    is_pid
                        && std::fs::read_to_string(entry.path().join("stat"))
                            .ok()
                            .is_some_and(|stat| live_member_of(&stat, pgid))
                })
            }
            _ => true,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pgid;
        false
    }
}

/// Whether a `/proc/<pid>/stat` line (`pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses, so
/// the fields are read after the last `)`) is a non-zombie member of group `pgid`.
fn live_member_of(stat: &str, pgid: i64) -> bool {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    let group = fields.nth(1).and_then(|g| g.parse::<i64>().ok());
    state.is_some_and(|s| s != "Z" && s != "X") && group == Some(pgid)
}

impl Store {
    /// Records the pid of `run`'s agent (its process group id: `agentwire-process` starts every agent in its own
    /// group), one transaction. While that group has a live member, a `running` run whose host died still counts
    /// as live: [`Store::begin_run`] refuses the thread ([`StoreError::ThreadBusy`]) and [`Store::open`] does not
    /// mark it `interrupted`.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn record_agent_pid(&mut self, run: &super::RunGuard, pid: u32) -> Result<(), StoreError> {
        let op = "recording the agent's pid";
        let tx = self.write_tx(op)?;
        tx.execute(
            "UPDATE runs SET agent_pid=?2 WHERE id=?1",
            params![run.run_id.as_str(), i64::from(pid)],
        )
        .map_err(db(op))?;
        tx.commit().map_err(db(op))
    }

    /// The thread a user means by `text`: a full id (`th_` + 16 hex digits, returned as is; whether it exists is
    /// checked where it is used), or a unique prefix of one, with or without `th_` (`th_3f9a`, `3f9a`; at least one
    /// hex digit, case-insensitive).
    ///
    /// # Errors
    /// [`StoreError::Id`] (`invalid_id`) for text that cannot start a thread id;
    /// [`StoreError::ThreadPrefixNotFound`] (`thread_not_found`) when nothing matches;
    /// [`StoreError::ThreadAmbiguous`] (`thread_ambiguous`) when several do; [`StoreError::Database`].
    pub fn resolve_thread(&self, text: &str) -> Result<ThreadId, StoreError> {
        if let Ok(id) = ThreadId::parse(text) {
            return Ok(id);
        }
        let lower = text.to_ascii_lowercase();
        let digits = lower.strip_prefix(ThreadId::PREFIX).unwrap_or(&lower);
        if digits.is_empty()
            || digits.len() > ID_HEX_DIGITS
            || !digits.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(StoreError::Id(crate::ids::IdError::MalformedReference {
                kind: "thread",
                prefix: ThreadId::PREFIX,
            }));
        }
        // Only hex digits reach the pattern: no LIKE wildcard can be smuggled in.
        let pattern = format!("{}{digits}%", ThreadId::PREFIX);
        let op = "resolving a thread id prefix";
        let count: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM threads WHERE id LIKE ?1",
                params![pattern],
                |r| r.get(0),
            )
            .map_err(db(op))?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id FROM threads WHERE id LIKE ?1 ORDER BY updated_at_ms DESC, id LIMIT ?2",
            )
            .map_err(db(op))?;
        let ids = stmt
            .query_map(
                params![pattern, i64::try_from(MAX_PREFIX_CANDIDATES).unwrap_or(10)],
                |r| r.get::<_, String>(0),
            )
            .map_err(db(op))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db(op))?
            .iter()
            .map(|s| super::parse_thread(s))
            .collect::<Result<Vec<_>, _>>()?;
        match ids.as_slice() {
            [] => Err(StoreError::ThreadPrefixNotFound(text.to_owned())),
            [one] if count == 1 => Ok(one.clone()),
            _ => Err(StoreError::ThreadAmbiguous {
                prefix: text.to_owned(),
                candidates: ids,
                count: to_u64(count),
            }),
        }
    }

    /// The most recently updated thread (the one `chat --continue` continues).
    ///
    /// # Errors
    /// [`StoreError::NoThreads`] when the store has none; [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn latest_thread(&self) -> Result<ThreadRecord, StoreError> {
        self.list_threads(1)?
            .into_iter()
            .next()
            .ok_or(StoreError::NoThreads)
    }

    /// Deletes thread `id` with its runs, messages and session history, in one transaction. A thread with a live
    /// run (its lock file held by a turn) is refused; a `running` run whose owner died is deleted with the rest.
    ///
    /// # Errors
    /// [`StoreError::ThreadNotFound`], [`StoreError::ThreadBusy`], [`StoreError::Io`] (a lock file),
    /// [`StoreError::Database`].
    pub fn delete_thread(&mut self, id: &ThreadId) -> Result<DeletedThread, StoreError> {
        let op = "deleting a thread";
        let locks_dir = self.locks_dir.clone();
        let tx = self.write_tx(op)?;
        let exists = tx
            .query_row(
                "SELECT 1 FROM threads WHERE id=?1",
                params![id.as_str()],
                |_| Ok(()),
            )
            .optional()
            .map_err(db(op))?
            .is_some();
        if !exists {
            return Err(StoreError::ThreadNotFound(id.clone()));
        }
        let running: Vec<String> = {
            let mut stmt = tx
                .prepare("SELECT id FROM runs WHERE thread_id=?1 AND status='running'")
                .map_err(db(op))?;
            stmt.query_map(params![id.as_str()], |r| r.get(0))
                .map_err(db(op))?
                .collect::<Result<_, _>>()
                .map_err(db(op))?
        };
        for run in running {
            let Ok(run) = RunId::parse(&run) else {
                continue;
            };
            if let Some(busy) = run_holder(&tx, &locks_dir, &run)?.busy(id.clone(), run) {
                return Err(busy);
            }
        }
        let count = |sql: &str| -> Result<u64, StoreError> {
            tx.query_row(sql, params![id.as_str()], |r| r.get::<_, i64>(0))
                .map(to_u64)
                .map_err(db(op))
        };
        let runs = count("SELECT COUNT(*) FROM runs WHERE thread_id=?1")?;
        let messages = count("SELECT COUNT(*) FROM messages WHERE thread_id=?1")?;
        // Children first: correct whether or not `foreign_keys` cascades are on for this connection.
        for sql in [
            "DELETE FROM sessions WHERE thread_id=?1",
            "DELETE FROM messages WHERE thread_id=?1",
            "DELETE FROM runs WHERE thread_id=?1",
            "DELETE FROM threads WHERE id=?1",
        ] {
            tx.execute(sql, params![id.as_str()]).map_err(db(op))?;
        }
        tx.commit().map_err(db(op))?;
        Ok(DeletedThread {
            id: id.clone(),
            runs,
            messages,
        })
    }

    /// Sets thread `id`'s title to `title` and its update time to now. The title is stored trimmed, with every
    /// inner run of whitespace collapsed to one space (`"a   b"` becomes `"a b"`); the length bound applies to
    /// that.
    ///
    /// # Errors
    /// [`StoreError::InvalidTitle`] for a title that is empty, longer than
    /// [`super::StoreConfig::max_title_chars`] characters or holds control characters other than whitespace
    /// (a tab, newline or carriage return is whitespace and collapses like a space);
    /// [`StoreError::ThreadNotFound`]; [`StoreError::Database`].
    pub fn rename_thread(&mut self, id: &ThreadId, title: &str) -> Result<(), StoreError> {
        if title.chars().any(|c| c.is_control() && !c.is_whitespace()) {
            return Err(StoreError::InvalidTitle(
                "holds control characters".to_owned(),
            ));
        }
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        let max = self.config.max_title_chars;
        if title.is_empty() {
            return Err(StoreError::InvalidTitle("empty".to_owned()));
        }
        if title.chars().count() > max {
            return Err(StoreError::InvalidTitle(format!(
                "longer than {max} characters"
            )));
        }
        let op = "renaming a thread";
        let tx = self.write_tx(op)?;
        let n = tx
            .execute(
                "UPDATE threads SET title=?2, updated_at_ms=?3 WHERE id=?1",
                params![id.as_str(), title, now_ms()],
            )
            .map_err(db(op))?;
        if n == 0 {
            return Err(StoreError::ThreadNotFound(id.clone()));
        }
        tx.commit().map_err(db(op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewRun, RunEnd, RunStatus, ThreadChoice};

    fn start(store: &mut Store, thread: ThreadChoice) -> crate::store::RunGuard {
        store
            .begin_run(NewRun {
                thread,
                agent: "a",
                model: None,
                prompt: "hello",
                resumed_session_id: None,
                title: None,
                cwd: None,
            })
            .expect("begin")
    }

    fn end() -> RunEnd {
        RunEnd {
            status: RunStatus::Succeeded,
            usage: None,
            error_code: None,
            error_reason: None,
            total_cost_usd: None,
            pending_text: None,
        }
    }

    #[test]
    fn a_stat_line_is_a_live_member_only_when_in_the_group_and_not_a_zombie() {
        assert!(live_member_of("42 (a b) c) S 1 42 42 0", 42));
        assert!(!live_member_of("42 (sh) Z 1 42 42 0", 42));
        assert!(!live_member_of("43 (sh) S 1 41 41 0", 42));
        assert!(!live_member_of("garbage", 42));
        // This test process is a live member of its own group.
        let own = i64::from(rustix::process::getpgrp().as_raw_nonzero().get());
        assert!(agent_group_alive(own));
        assert!(!agent_group_alive(0));
    }

    #[test]
    fn a_unique_prefix_resolves_and_an_ambiguous_one_lists_candidates() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut ids = Vec::new();
        for _ in 0..40 {
            let run = start(
                &mut store,
                ThreadChoice::New {
                    agent: "a".to_owned(),
                },
            );
            ids.push(run.thread_id.clone());
            store.finish_run(run, &end()).unwrap();
        }
        let id = &ids[0];
        // The full id and a 16-digit prefix without `th_` resolve to it.
        assert_eq!(store.resolve_thread(id.as_str()).unwrap(), *id);
        assert_eq!(store.resolve_thread(&id.as_str()[3..]).unwrap(), *id);
        assert_eq!(
            store
                .resolve_thread(&id.as_str().to_ascii_uppercase()[3..])
                .unwrap(),
            *id
        );
        // With 40 threads over 16 first digits, one digit is shared by some pair: ambiguous.
        let shared = (0..ids.len())
            .flat_map(|i| (i + 1..ids.len()).map(move |j| (i, j)))
            .find(|&(i, j)| ids[i].as_str()[..4] == ids[j].as_str()[..4])
            .expect("pigeonhole: two of 40 ids share a first digit");
        let prefix = &ids[shared.0].as_str()[..4];
        match store.resolve_thread(prefix).unwrap_err() {
            StoreError::ThreadAmbiguous {
                candidates, count, ..
            } => {
                assert!(count >= 2);
                assert!(candidates.contains(&ids[shared.0]));
                assert!(candidates.contains(&ids[shared.1]));
                assert!(candidates.len() <= MAX_PREFIX_CANDIDATES);
            }
            other => panic!("{other:?}"),
        }
        // Text that cannot start a thread id.
        let e = store.resolve_thread("th_").unwrap_err();
        assert_eq!(e.code(), "invalid_id");
        let e = store.resolve_thread("th_x").unwrap_err();
        assert_eq!(e.code(), "invalid_id");
        let e = store.resolve_thread("%").unwrap_err();
        assert_eq!(e.code(), "invalid_id");
        let e = store.resolve_thread("th_0123456789abcdef0").unwrap_err();
        assert_eq!(e.code(), "invalid_id");
        // A prefix nothing starts with.
        let unused = (0..16u8)
            .map(|d| format!("{d:x}"))
            .flat_map(|a| (0..16u8).map(move |b| format!("{a}{b:x}")))
            .find(|p| {
                !ids.iter()
                    .any(|id| id.as_str()[3..].starts_with(p.as_str()))
            })
            .expect("40 ids cannot cover 256 two-digit prefixes");
        assert_eq!(
            store.resolve_thread(&unused).unwrap_err().code(),
            "thread_not_found"
        );
    }

    #[test]
    fn an_ambiguous_prefix_bounds_its_candidate_list() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        // 200 threads over 16 first digits: some digit starts more than 10 of them.
        for _ in 0..200 {
            let run = start(
                &mut store,
                ThreadChoice::New {
                    agent: "a".to_owned(),
                },
            );
            store.finish_run(run, &end()).unwrap();
        }
        let busiest = (0..16u8)
            .map(|d| format!("{d:x}"))
            .max_by_key(|d| match store.resolve_thread(d) {
                Err(StoreError::ThreadAmbiguous { count, .. }) => count,
                _ => 0,
            })
            .unwrap();
        match store.resolve_thread(&busiest).unwrap_err() {
            StoreError::ThreadAmbiguous {
                candidates, count, ..
            } => {
                assert!(count > MAX_PREFIX_CANDIDATES as u64, "{count}");
                assert_eq!(candidates.len(), MAX_PREFIX_CANDIDATES);
                let e = store.resolve_thread(&busiest).unwrap_err().to_string();
                assert!(e.ends_with(", …)"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_latest_thread_is_the_most_recently_updated() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.latest_thread().unwrap_err().code(), "no_threads");
        let a = start(
            &mut store,
            ThreadChoice::New {
                agent: "a".to_owned(),
            },
        );
        let a_id = a.thread_id.clone();
        store.finish_run(a, &end()).unwrap();
        let b = start(
            &mut store,
            ThreadChoice::New {
                agent: "a".to_owned(),
            },
        );
        let b_id = b.thread_id.clone();
        store.finish_run(b, &end()).unwrap();
        assert_eq!(store.latest_thread().unwrap().id, b_id);
        // A follow-up turn makes a thread the latest again.
        let again = start(&mut store, ThreadChoice::Existing(a_id.clone()));
        store.finish_run(again, &end()).unwrap();
        assert!(
            store.thread(&a_id).unwrap().unwrap().updated_at_ms
                >= store.thread(&b_id).unwrap().unwrap().updated_at_ms
        );
    }

    #[test]
    fn delete_removes_runs_and_messages_and_refuses_a_live_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let live = start(
            &mut store,
            ThreadChoice::New {
                agent: "a".to_owned(),
            },
        );
        let id = live.thread_id.clone();
        let e = store.delete_thread(&id).unwrap_err();
        assert_eq!(e.code(), "thread_busy");
        store.finish_run(live, &end()).unwrap();
        let again = start(&mut store, ThreadChoice::Existing(id.clone()));
        store.finish_run(again, &end()).unwrap();
        let deleted = store.delete_thread(&id).unwrap();
        assert_eq!(
            deleted,
            DeletedThread {
                id: id.clone(),
                runs: 2,
                messages: 2
            }
        );
        assert!(store.thread(&id).unwrap().is_none());
        let left: i64 = store
            .conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM runs) + (SELECT COUNT(*) FROM messages)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
        assert_eq!(
            store.delete_thread(&id).unwrap_err().code(),
            "thread_not_found"
        );
    }

    #[test]
    fn rename_validates_the_title_at_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let run = start(
            &mut store,
            ThreadChoice::New {
                agent: "a".to_owned(),
            },
        );
        let id = run.thread_id.clone();
        store.finish_run(run, &end()).unwrap();
        let max = crate::store::StoreConfig::default().max_title_chars;
        store.rename_thread(&id, &"é".repeat(max)).unwrap();
        assert_eq!(store.thread(&id).unwrap().unwrap().title, "é".repeat(max));
        let e = store.rename_thread(&id, &"é".repeat(max + 1)).unwrap_err();
        assert_eq!(e.code(), "invalid_title");
        assert_eq!(
            store.rename_thread(&id, "  ").unwrap_err().code(),
            "invalid_title"
        );
        assert_eq!(
            store.rename_thread(&id, "a\u{1b}b").unwrap_err().code(),
            "invalid_title"
        );
        store.rename_thread(&id, "  spaced  ").unwrap();
        assert_eq!(store.thread(&id).unwrap().unwrap().title, "spaced");
        // Inner runs of whitespace collapse to one space (no-break and ideographic spaces too); the bound counts
        // the collapsed title.
        store
            .rename_thread(&id, " two   words \u{a0}\u{3000} and  more ")
            .unwrap();
        assert_eq!(
            store.thread(&id).unwrap().unwrap().title,
            "two words and more"
        );
        store
            .rename_thread(
                &id,
                &format!("{}   {}", "a".repeat(max / 2), "b".repeat(max / 2 - 1)),
            )
            .unwrap();
        assert_eq!(
            store.thread(&id).unwrap().unwrap().title.chars().count(),
            max
        );
        // Whitespace control characters collapse like spaces; other control characters are refused.
        store.rename_thread(&id, " a\t\tb\r\nc\t").unwrap();
        assert_eq!(store.thread(&id).unwrap().unwrap().title, "a b c");
        for bad in ["a\u{1b}b", "a\u{0}b", "a\u{7f}b"] {
            assert_eq!(
                store.rename_thread(&id, bad).unwrap_err().code(),
                "invalid_title",
                "{bad:?}"
            );
        }
        let other = ThreadId::random().unwrap();
        assert_eq!(
            store.rename_thread(&other, "x").unwrap_err().code(),
            "thread_not_found"
        );
    }
}
