//! The spool on a real filesystem: private directory, exclusive files, streaming quotas, ownership, expiry, cleanup.

use std::fs;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use agentwire_spool::{
    ArtifactId, ArtifactSpec, ArtifactSpool, Limits, QuotaKind, QuotaScope, Scope, SpoolError,
    Usage,
};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

fn spec(owner: &str, request: &str) -> ArtifactSpec {
    ArtifactSpec::new(
        Scope::new(owner, "conn-1", request),
        "image/png",
        "generated-image-1.png",
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("spool directory lists")
        .map(|entry| {
            let entry = entry.expect("directory entry");
            entry.file_name().into_string().expect("utf-8 name")
        })
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .expect("path exists")
        .permissions()
        .mode()
        & 0o777
}

fn small_limits(max_artifact_bytes: u64) -> Limits {
    let mut limits = Limits::default();
    limits.max_artifact_bytes = max_artifact_bytes;
    limits
}

async fn spool_in(temp: &tempfile::TempDir, limits: Limits) -> (ArtifactSpool, PathBuf) {
    let path = temp.path().join("data").join("spool");
    (
        ArtifactSpool::open(&path, limits)
            .await
            .expect("spool opens"),
        path,
    )
}

async fn publish(spool: &ArtifactSpool, owner: &str, bytes: &[u8]) -> String {
    let mut writer = spool
        .create(spec(owner, "req-1"))
        .await
        .expect("artifact starts");
    writer.write(bytes).await.expect("bytes fit");
    writer.publish().await.expect("artifact publishes").id
}

async fn read_all(spool: &ArtifactSpool, owner: &str, id: &str) -> Vec<u8> {
    let (_, mut reader) = spool.read(owner, id).await.expect("artifact opens");
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .await
        .expect("artifact reads");
    bytes
}

#[tokio::test]
async fn written_artifact_is_hashed_published_0600_and_streams_back() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    assert_eq!(mode(&dir), 0o700);

    let mut writer = spool.create(spec("human", "req-1")).await.unwrap();
    let partial = format!("aw-spool-{}.partial", writer.id());
    assert_eq!(names(&dir), vec![partial.clone()]);
    assert_eq!(mode(&dir.join(&partial)), 0o600);
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    for chunk in body.chunks(70_000) {
        writer.write(chunk).await.unwrap();
    }
    assert_eq!(writer.written(), body.len() as u64);
    let metadata = writer.publish().await.unwrap();

    assert_eq!(names(&dir), vec![format!("aw-spool-{}", metadata.id)]);
    assert_eq!(mode(&dir.join(format!("aw-spool-{}", metadata.id))), 0o600);
    assert_eq!(metadata.size, body.len() as u64);
    assert_eq!(metadata.sha256, format!("{:x}", Sha256::digest(&body)));
    assert_eq!(metadata.mime_type, "image/png");
    assert_eq!(metadata.filename, "generated-image-1.png");
    assert_eq!(metadata.owner, "human");
    assert_eq!(metadata.request_id, "req-1");
    assert_eq!(metadata.expires_at - metadata.created_at, 3_600_000);
    assert!(ArtifactId::parse(&metadata.id).is_ok());
    let json = serde_json::to_string(&metadata).unwrap();
    assert!(!json.contains(temp.path().to_str().unwrap()), "{json}");
    assert!(!json.contains("aw-spool-"), "{json}");

    assert_eq!(spool.describe("human", &metadata.id).unwrap(), metadata);
    // Small reads pull the file through a little at a time.
    let (described, mut reader) = spool.read("human", &metadata.id).await.unwrap();
    assert_eq!(described, metadata);
    let mut streamed = Vec::new();
    let mut small = [0u8; 4096];
    loop {
        let read = reader.read(&mut small).await.unwrap();
        if read == 0 {
            break;
        }
        streamed.extend_from_slice(&small[..read]);
    }
    assert_eq!(streamed, body);
    assert_eq!(
        spool.total_usage(),
        Usage {
            bytes: body.len() as u64,
            count: 1
        }
    );
}

#[tokio::test]
async fn empty_artifact_publishes() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, _) = spool_in(&temp, Limits::default()).await;
    let writer = spool.create(spec("human", "req-1")).await.unwrap();
    let metadata = writer.publish().await.unwrap();
    assert_eq!(metadata.size, 0);
    assert_eq!(metadata.sha256, format!("{:x}", Sha256::digest(b"")));
    assert!(read_all(&spool, "human", &metadata.id).await.is_empty());
}

#[tokio::test]
async fn another_owner_sees_not_found_exactly_like_a_missing_artifact() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    let id = publish(&spool, "agent:conv-1", b"secret output").await;
    let missing = ArtifactId::generate().unwrap().to_string();

    for probe in [id.as_str(), missing.as_str()] {
        let describe = spool.describe("agent:conv-2", probe).unwrap_err();
        let read = spool.read("agent:conv-2", probe).await.unwrap_err();
        let delete = spool.delete("agent:conv-2", probe).await.unwrap_err();
        for error in [describe, read, delete] {
            assert!(matches!(error, SpoolError::NotFound), "{error:?}");
            assert_eq!(error.to_string(), "artifact not found");
        }
    }
    // The foreign delete removed nothing.
    assert_eq!(names(&dir).len(), 1);
    assert_eq!(
        read_all(&spool, "agent:conv-1", &id).await,
        b"secret output"
    );
}

#[tokio::test]
async fn hostile_ids_are_refused_before_any_filesystem_call() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    let id = publish(&spool, "human", b"bytes").await;

    // Pull the directory out from under the spool and put a plain file in its place: from now on any
    // filesystem call for an artifact fails with an IO-class error, not `not_found`.
    fs::remove_dir_all(&dir).unwrap();
    fs::write(&dir, b"not a directory").unwrap();
    let known = spool.read("human", &id).await.unwrap_err();
    assert_eq!(
        known.code(),
        "internal_error",
        "a well-formed known id reaches the disk: {known:?}"
    );

    let overlong = "A".repeat(33);
    let padded = format!("{}==", &id[..30]);
    let with_nul = format!("{}\0", &id[..31]);
    let with_slash = format!("{}/", &id[..31]);
    for hostile in [
        "..%2F..",
        "../../etc/passwd",
        "/",
        "",
        "\0",
        &with_nul,
        &with_slash,
        &padded,
        &overlong,
        &id[..31],
    ] {
        let read = spool.read("human", hostile).await.unwrap_err();
        let delete = spool.delete("human", hostile).await.unwrap_err();
        let describe = spool.describe("human", hostile).unwrap_err();
        for error in [read, delete, describe] {
            assert!(
                matches!(error, SpoolError::NotFound),
                "{hostile:?}: {error:?}"
            );
            assert_eq!(error.code(), "not_found");
        }
    }
    assert_eq!(fs::read(&dir).unwrap(), b"not a directory");
}

#[tokio::test]
async fn quota_failure_while_streaming_leaves_nothing_on_disk() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, small_limits(10)).await;

    // Exactly at the limit: fine.
    let mut writer = spool.create(spec("human", "req-1")).await.unwrap();
    writer.write(b"0123456789").await.unwrap();
    let at_limit = writer.publish().await.unwrap();
    assert_eq!(at_limit.size, 10);

    // One byte past it: refused before the byte is written, and the partial file is gone.
    let mut writer = spool.create(spec("human", "req-2")).await.unwrap();
    writer.write(b"012345").await.unwrap();
    let error = writer.write(b"6789X").await.unwrap_err();
    assert!(
        matches!(
            error,
            SpoolError::QuotaExceeded {
                scope: QuotaScope::Artifact,
                kind: QuotaKind::Bytes
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.code(), "result_too_large");
    assert_eq!(names(&dir), vec![format!("aw-spool-{}", at_limit.id)]);
    assert_eq!(
        spool.total_usage(),
        Usage {
            bytes: 10,
            count: 1
        }
    );
    assert!(matches!(
        writer.write(b"x").await,
        Err(SpoolError::WriterClosed)
    ));
    assert!(matches!(
        writer.publish().await,
        Err(SpoolError::WriterClosed)
    ));

    // Streaming from a reader stops at the first chunk over the quota, with the same cleanup.
    let mut writer = spool.create(spec("human", "req-3")).await.unwrap();
    let mut source: &[u8] = b"this source is longer than ten bytes";
    let error = writer.write_from(&mut source).await.unwrap_err();
    assert_eq!(error.code(), "result_too_large");
    drop(writer);
    assert_eq!(names(&dir), vec![format!("aw-spool-{}", at_limit.id)]);
    assert_eq!(
        spool.total_usage(),
        Usage {
            bytes: 10,
            count: 1
        }
    );
}

#[tokio::test]
async fn a_write_dropped_half_way_closes_the_writer_and_removes_the_artifact() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    let mut writer = spool.create(spec("human", "req-1")).await.unwrap();
    writer.write(b"head").await.unwrap();
    let big = vec![7u8; 64 << 20];
    {
        // Poll the write once and drop it: tokio's file hands 2 MiB to a blocking thread per step, so 64 MiB
        // cannot complete within one poll.
        let mut write = std::pin::pin!(writer.write(&big));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(write.as_mut().poll(&mut cx).is_pending());
    }
    assert!(matches!(
        writer.write(b"tail").await,
        Err(SpoolError::WriterClosed)
    ));
    assert!(names(&dir).is_empty());
    assert_eq!(spool.total_usage(), Usage::default());
    assert!(matches!(
        writer.publish().await,
        Err(SpoolError::WriterClosed)
    ));
}

#[tokio::test]
async fn abort_and_drop_remove_the_partial_file_and_release_the_quota() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;

    let mut writer = spool.create(spec("human", "req-1")).await.unwrap();
    writer.write(b"half").await.unwrap();
    writer.abort().await;
    assert!(names(&dir).is_empty());

    let mut writer = spool.create(spec("human", "req-1")).await.unwrap();
    writer.write(b"half").await.unwrap();
    assert_eq!(spool.total_usage(), Usage { bytes: 4, count: 1 });
    drop(writer);
    assert!(names(&dir).is_empty());
    assert_eq!(spool.total_usage(), Usage::default());
}

#[tokio::test]
async fn count_quota_is_enforced_at_the_limit_and_released_by_delete() {
    let temp = tempfile::tempdir().unwrap();
    let mut limits = Limits::default();
    limits.max_request_artifacts = 2;
    let (spool, _) = spool_in(&temp, limits).await;
    let first = publish(&spool, "human", b"a").await;
    publish(&spool, "human", b"b").await;
    let error = spool.create(spec("human", "req-1")).await.unwrap_err();
    assert!(
        matches!(
            error,
            SpoolError::QuotaExceeded {
                scope: QuotaScope::Request,
                kind: QuotaKind::Count
            }
        ),
        "{error:?}"
    );
    // Another request of the same owner is not affected.
    spool
        .create(spec("human", "req-2"))
        .await
        .unwrap()
        .abort()
        .await;
    spool.delete("human", &first).await.unwrap();
    publish(&spool, "human", b"c").await;
}

#[tokio::test]
async fn delete_removes_the_file_and_an_open_reader_keeps_streaming() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    let id = publish(&spool, "human", b"still readable").await;
    let (_, mut reader) = spool.read("human", &id).await.unwrap();
    spool.delete("human", &id).await.unwrap();
    assert!(names(&dir).is_empty());
    assert_eq!(spool.owner_usage("human"), Usage::default());
    assert!(matches!(
        spool.delete("human", &id).await,
        Err(SpoolError::NotFound)
    ));
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).await.unwrap();
    assert_eq!(bytes, b"still readable");
}

#[tokio::test]
async fn discard_removes_a_published_artifact_for_its_producer() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    let id = publish(&spool, "agent:conv-1", b"partial result").await;
    let parsed = ArtifactId::parse(&id).unwrap();
    assert!(spool.discard(parsed).await.unwrap());
    assert!(!spool.discard(parsed).await.unwrap());
    assert!(names(&dir).is_empty());
    assert!(matches!(
        spool.describe("agent:conv-1", &id),
        Err(SpoolError::NotFound)
    ));
    assert_eq!(spool.total_usage(), Usage::default());
}

#[tokio::test]
async fn sweep_removes_expired_artifacts_and_keeps_the_rest() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    let mut writer = spool
        .create(spec("human", "req-1").ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    writer.write(b"short-lived").await.unwrap();
    let short = writer.publish().await.unwrap();
    let long = publish(&spool, "human", b"default ttl").await;
    let pending = spool.create(spec("human", "req-2")).await.unwrap();

    assert_eq!(spool.sweep_expired(Instant::now()).await.unwrap(), 0);
    let later = Instant::now() + Duration::from_secs(61);
    assert_eq!(spool.sweep_expired(later).await.unwrap(), 1);
    assert!(matches!(
        spool.describe("human", &short.id),
        Err(SpoolError::NotFound)
    ));
    assert!(spool.describe("human", &long).is_ok());
    let mut expected = vec![
        format!("aw-spool-{long}"),
        format!("aw-spool-{}.partial", pending.id()),
    ];
    expected.sort();
    assert_eq!(names(&dir), expected);
    // A TTL above the maximum is refused.
    let too_long = Limits::default().max_ttl + Duration::from_secs(1);
    let error = spool
        .create(spec("human", "req-3").ttl(too_long))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "invalid_request");
}

#[tokio::test]
async fn create_gives_back_the_quota_of_expired_artifacts_without_a_sweep() {
    let temp = tempfile::tempdir().unwrap();
    let mut limits = Limits::default();
    limits.max_total_artifacts = 1;
    let (spool, _) = spool_in(&temp, limits).await;
    let writer = spool
        .create(spec("human", "req-1").ttl(Duration::from_nanos(1)))
        .await
        .unwrap();
    let short = writer.publish().await.unwrap();
    // The monotonic clock has moved past a 1 ns TTL by the time the next call reads it.
    let next = spool.create(spec("human", "req-2")).await.unwrap();
    assert!(matches!(
        spool.describe("human", &short.id),
        Err(SpoolError::NotFound)
    ));
    assert_eq!(spool.total_usage(), Usage { bytes: 0, count: 1 });
    next.abort().await;
}

#[tokio::test]
async fn clear_removes_published_and_partial_files() {
    let temp = tempfile::tempdir().unwrap();
    let (spool, dir) = spool_in(&temp, Limits::default()).await;
    publish(&spool, "human", b"published").await;
    let mut pending = spool.create(spec("human", "req-2")).await.unwrap();
    pending.write(b"partial").await.unwrap();
    fs::write(dir.join("foreign.txt"), b"keep").unwrap();
    spool.clear().await.unwrap();
    assert_eq!(names(&dir), vec!["foreign.txt".to_string()]);
    assert_eq!(spool.total_usage(), Usage::default());
    assert!(matches!(
        pending.write(b"more").await,
        Err(SpoolError::WriterClosed)
    ));
}

#[tokio::test]
async fn startup_removes_only_files_with_the_spools_own_names() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("spool");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let id = ArtifactId::generate().unwrap();
    let other = ArtifactId::generate().unwrap();
    fs::write(dir.join(format!("aw-spool-{id}")), b"old").unwrap();
    fs::write(dir.join(format!("aw-spool-{other}.partial")), b"old").unwrap();
    let foreign = [
        "notes.txt".to_string(),
        format!("aw-spool-{id}.tmp"),
        format!("aw-spool-{}", &id.as_str()[..31]),
        format!("x-aw-spool-{id}"),
    ];
    for name in &foreign {
        fs::write(dir.join(name), b"keep").unwrap();
    }
    // A directory with an own-looking name is not a spool file either.
    let third = ArtifactId::generate().unwrap();
    fs::create_dir(dir.join(format!("aw-spool-{third}"))).unwrap();

    let spool = ArtifactSpool::open(&dir, Limits::default()).await.unwrap();
    assert_eq!(spool.removed_at_startup(), 2);
    let mut expected: Vec<String> = foreign.to_vec();
    expected.push(format!("aw-spool-{third}"));
    expected.sort();
    assert_eq!(names(&dir), expected);
    for name in &foreign {
        assert_eq!(fs::read(dir.join(name)).unwrap(), b"keep");
    }
}

#[tokio::test]
async fn unsafe_directories_are_refused() {
    let temp = tempfile::tempdir().unwrap();

    let real = temp.path().join("real");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
    let link = temp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let error = ArtifactSpool::open(&link, Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(error, SpoolError::UnsafeDirectory(_)), "{error:?}");
    assert_eq!(error.code(), "unavailable");
    assert!(
        !error.to_string().contains(temp.path().to_str().unwrap()),
        "{error}"
    );

    let shared = temp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o750)).unwrap();
    let error = ArtifactSpool::open(&shared, Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(error, SpoolError::UnsafeDirectory(_)), "{error:?}");
    assert_eq!(mode(&shared), 0o750, "refused, not repaired");

    let file = temp.path().join("file");
    fs::write(&file, b"").unwrap();
    let error = ArtifactSpool::open(&file, Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(error, SpoolError::UnsafeDirectory(_)), "{error:?}");

    // The verified real directory itself is fine.
    ArtifactSpool::open(&real, Limits::default()).await.unwrap();
}

#[tokio::test]
async fn concurrent_writers_share_the_total_quota() {
    let temp = tempfile::tempdir().unwrap();
    let mut limits = Limits::default();
    limits.max_total_bytes = 100;
    let (spool, dir) = spool_in(&temp, limits).await;
    let mut tasks = Vec::new();
    for n in 0..8 {
        let spool = spool.clone();
        tasks.push(tokio::spawn(async move {
            let mut writer = spool
                .create(ArtifactSpec::new(
                    Scope::new(format!("owner-{n}"), format!("conn-{n}"), "req"),
                    "application/octet-stream",
                    "blob.bin",
                ))
                .await
                .unwrap();
            for _ in 0..5 {
                writer.write(&[n; 5]).await?;
            }
            writer.publish().await
        }));
    }
    let mut published = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(metadata) => {
                assert_eq!(metadata.size, 25);
                published += 1;
            }
            Err(error) => assert_eq!(error.code(), "rate_limited", "{error:?}"),
        }
    }
    assert!((1..=4).contains(&published), "{published}");
    assert_eq!(names(&dir).len(), published);
    assert_eq!(spool.total_usage().bytes, 25 * published as u64);
}
