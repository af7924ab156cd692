//! The managed-task API as a client sees it: a real `TaskServer` on a loopback port, a real SQLite store in a
//! temp dir, real worker processes (`/bin/echo`, `/bin/sh`), and raw HTTP/1.1 over TCP so every byte (hosts,
//! origins, chunked bodies, stalled heads) is under the test's control.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agentwire_host::tasks::{
    AllowList, ApiConfig, ApiKey, TaskLimits, TaskRequest, TaskServer, TaskService, TaskStore,
    WorkerConfig,
};
use agentwire_process::CancellationToken;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "test-key-0123456789abcdef";
/// Upper bound for anything a test waits on; reaching it is a failure, never a pass.
const PATIENCE: Duration = Duration::from_secs(20);

struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(dir: &Path, allow: &[&str], config: ApiConfig) -> Server {
        let store = TaskStore::open(dir).expect("open task store");
        let service = TaskService::new(store, TaskLimits::default());
        let allow = AllowList::new(allow).expect("allow-list");
        let server = TaskServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), false)
            .await
            .expect("bind");
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        let workers = service.start_workers(allow, WorkerConfig::default(), shutdown.clone());
        let key = ApiKey::new(Some(KEY)).expect("test key");
        let token = shutdown.clone();
        let done = tokio::spawn(async move {
            server.serve(service, key, config, token).await;
            workers.join().await;
        });
        Server {
            addr,
            shutdown,
            done,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(PATIENCE, self.done)
            .await
            .expect("server stops")
            .expect("server task");
    }

    fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// Sends raw request bytes on a fresh connection and returns (status, JSON body).
async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, Value) {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request).await.expect("write request");
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .expect("read response");
        response
    };
    let response = tokio::time::timeout(PATIENCE, exchange)
        .await
        .expect("response in time");
    let text = String::from_utf8(response).expect("utf-8 response");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

struct Req<'a> {
    method: &'a str,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

impl<'a> Req<'a> {
    fn new(server: &Server, method: &'a str, path: &str) -> Self {
        Req {
            method,
            path: path.to_owned(),
            headers: vec![
                ("Host".into(), server.host()),
                ("Authorization".into(), format!("Bearer {KEY}")),
                ("Connection".into(), "close".into()),
            ],
            body: None,
        }
    }

    fn post(server: &Server, key: &str, body: &str) -> Self {
        Req::new(server, "POST", "/v1/tasks")
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", key)
            .body(body)
    }

    fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    fn body(mut self, body: &str) -> Self {
        self.body = Some(body.to_owned());
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(body) = &self.body {
            out.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        out.push_str("\r\n");
        if let Some(body) = &self.body {
            out.push_str(body);
        }
        out.into_bytes()
    }

    async fn send(&self, server: &Server) -> (u16, Value) {
        raw(server.addr, &self.bytes()).await
    }
}

async fn task(server: &Server, id: &str) -> Value {
    let (status, body) = Req::new(server, "GET", &format!("/v1/tasks/{id}"))
        .send(server)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Polls the task until it is terminal (the worker reports through the store; there is no event to wait on).
async fn finished(server: &Server, id: &str) -> Value {
    let poll = async {
        loop {
            let body = task(server, id).await;
            if !matches!(body["status"].as_str(), Some("queued" | "running")) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, poll)
        .await
        .expect("task finishes")
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_and_its_output_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path(), &["/bin/echo"], ApiConfig::default()).await;
    let (status, created) = Req::post(&server, "k-1", r#"{"argv":["echo","hello","world"]}"#)
        .send(&server)
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "queued");
    assert_eq!(created["timeout_seconds"], 60);
    let id = created["id"].as_str().unwrap().to_owned();
    let done = finished(&server, &id).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["stdout"], "hello world\n");
    assert_eq!(done["stdout_truncated"], false);
    assert_eq!(done["argv"], json!(["echo", "hello", "world"]));
    assert!(done["created_at"].as_str().unwrap().ends_with('Z'));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_need_the_key_the_host_and_no_foreign_origin() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path(), &["/bin/echo"], ApiConfig::default()).await;
    let body = r#"{"argv":["echo"]}"#;
    let check = |req: Req<'static>, expect_status: u16, expect_code: &'static str| {
        let server = &server;
        async move {
            let (status, got) = req.send(server).await;
            assert_eq!((status, code(&got)), (expect_status, expect_code), "{got}");
        }
    };
    check(
        Req::post(&server, "a", body).without("Authorization"),
        401,
        "unauthorized",
    )
    .await;
    check(
        Req::post(&server, "a", body).header("Authorization", "Bearer wrong-key-0123456789"),
        401,
        "unauthorized",
    )
    .await;
    check(
        Req::post(&server, "a", body).header("Authorization", KEY),
        401,
        "unauthorized",
    )
    .await;
    check(
        Req::post(&server, "a", body).header("Host", "evil.example:80"),
        403,
        "host_forbidden",
    )
    .await;
    check(
        Req::post(&server, "a", body).header("Origin", "http://evil.example"),
        403,
        "origin_forbidden",
    )
    .await;
    check(
        Req::new(&server, "GET", "/v1/tasks/task_0000000000000000").without("Authorization"),
        401,
        "unauthorized",
    )
    .await;
    check(
        Req::new(&server, "GET", "/v1/tasks/task_0000000000000000"),
        404,
        "task_not_found",
    )
    .await;
    check(Req::new(&server, "GET", "/v1/nothing"), 404, "not_found").await;
    check(
        Req::post(&server, "a", body).header("Content-Type", "text/plain"),
        415,
        "unsupported_media_type",
    )
    .await;
    check(
        Req::post(&server, "a", body).without("Idempotency-Key"),
        400,
        "idempotency_key_missing",
    )
    .await;
    // The same origin and `localhost:<port>` are accepted.
    let origin = format!("http://{}", server.host());
    let (status, _) = Req::post(&server, "a", body)
        .header("Origin", &origin)
        .send(&server)
        .await;
    assert_eq!(status, 201);
    let localhost = format!("localhost:{}", server.addr.port());
    let (status, _) = Req::post(&server, "a", body)
        .header("Host", &localhost)
        .send(&server)
        .await;
    assert_eq!(status, 200, "the same key and request replay");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_replay_and_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("runs.txt");
    let script = format!("echo ran >> {}", file.display());
    let server = Server::start(&tmp.path().join("d"), &["/bin/sh"], ApiConfig::default()).await;
    let body = json!({"argv": ["sh", "-c", script], "timeout_seconds": 30}).to_string();
    let (status, first) = Req::post(&server, "same", &body).send(&server).await;
    assert_eq!(status, 201, "{first}");
    let id = first["id"].as_str().unwrap().to_owned();
    finished(&server, &id).await;
    let (status, again) = Req::post(&server, "same", &body).send(&server).await;
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())));
    assert_eq!(
        again["status"], "succeeded",
        "a replay shows the task as it is now"
    );
    // The same request with the default timeout spelled out differently is another request.
    let other = json!({"argv": ["sh", "-c", script]}).to_string();
    let (status, conflict) = Req::post(&server, "same", &other).send(&server).await;
    assert_eq!((status, code(&conflict)), (409, "idempotency_key_conflict"));
    server.stop().await;
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "ran\n",
        "ran exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_hold_at_the_limit_and_one_past_it() {
    let tmp = tempfile::tempdir().unwrap();
    let config = ApiConfig {
        max_body_bytes: 1024,
        ..ApiConfig::default()
    };
    let server = Server::start(tmp.path(), &["/bin/echo"], config).await;
    let padded = |n: usize| {
        let core = r#"{"argv":["echo"]}"#;
        format!("{core}{}", " ".repeat(n - core.len()))
    };
    let (status, _) = Req::post(&server, "b1", &padded(1024)).send(&server).await;
    assert_eq!(status, 201);
    let (status, got) = Req::post(&server, "b2", &padded(1025)).send(&server).await;
    assert_eq!((status, code(&got)), (413, "body_too_large"));
    // A chunked body has no Content-Length: the bound still holds.
    let chunked = |n: usize| {
        let body = padded(n);
        let mut req = Req::new(&server, "POST", "/v1/tasks")
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", &format!("c{n}"))
            .header("Transfer-Encoding", "chunked")
            .bytes();
        let (a, b) = body.split_at(512);
        for part in [a, b] {
            req.extend_from_slice(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes());
        }
        req.extend_from_slice(b"0\r\n\r\n");
        req
    };
    assert_eq!(raw(server.addr, &chunked(1024)).await.0, 201);
    let (status, got) = raw(server.addr, &chunked(1025)).await;
    assert_eq!((status, code(&got)), (413, "body_too_large"));
    // argv items and timeout limits (TaskLimits::default()).
    let items = |n: usize| json!({"argv": vec!["echo"; n]}).to_string();
    assert_eq!(
        Req::post(&server, "i32", &items(32)).send(&server).await.0,
        201
    );
    let (status, got) = Req::post(&server, "i33", &items(33)).send(&server).await;
    assert_eq!((status, code(&got)), (400, "argv_too_many_items"));
    let timeout = |n: u64| json!({"argv": ["echo"], "timeout_seconds": n}).to_string();
    assert_eq!(
        Req::post(&server, "t1", &timeout(3600))
            .send(&server)
            .await
            .0,
        201
    );
    let (status, got) = Req::post(&server, "t2", &timeout(3601)).send(&server).await;
    assert_eq!((status, code(&got)), (400, "timeout_invalid"));
    let key = "k".repeat(255);
    assert_eq!(
        Req::post(&server, &key, &items(1)).send(&server).await.0,
        201
    );
    let key = "k".repeat(256);
    let (status, got) = Req::post(&server, &key, &items(1)).send(&server).await;
    assert_eq!((status, code(&got)), (400, "idempotency_key_invalid"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_refuses_executables_off_the_allow_list_at_execution_time() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path(), &["/bin/echo"], ApiConfig::default()).await;
    let marker = tmp.path().join("created-by-touch");
    for (key, argv) in [
        ("t", json!(["touch", marker.to_str().unwrap()])),
        ("p", json!(["/usr/bin/touch", marker.to_str().unwrap()])),
        ("m", json!(["no-such-program-anywhere"])),
    ] {
        // The API accepts any well-formed argv: the decision belongs to the worker.
        let (status, created) = Req::post(&server, key, &json!({"argv": argv}).to_string())
            .send(&server)
            .await;
        assert_eq!(status, 201, "{created}");
        let done = finished(&server, created["id"].as_str().unwrap()).await;
        assert_eq!(
            (done["status"].as_str(), done["error"].as_str()),
            (Some("failed"), Some("executable_not_allowed")),
            "{done}"
        );
        assert_eq!(done["exit_code"], Value::Null);
    }
    assert!(!marker.exists(), "nothing off the list was spawned");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_stops_the_whole_process_group() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path(), &["/bin/sh"], ApiConfig::default()).await;
    // The shell starts a grandchild, prints its pid, and waits: both must be gone after the timeout. The timeout
    // must elapse (a lower bound); the pid must be printed before it, so it leaves a margin for a loaded machine.
    let body = json!({"argv": ["sh", "-c", "sleep 300 & echo $!; wait"], "timeout_seconds": 5});
    let (status, created) = Req::post(&server, "slow", &body.to_string())
        .send(&server)
        .await;
    assert_eq!(status, 201);
    let done = finished(&server, created["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "timed_out", "{done}");
    assert_eq!(done["error"], "timed_out");
    assert!(done["signal"].is_i64(), "{done}");
    let pid: u32 = done["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .expect("pid");
    // Gone (or a zombie awaiting its reaper where /proc can tell): a portable probe, never vacuous.
    assert!(
        agentwire_testkit::proc::wait_gone(pid, PATIENCE).await,
        "the grandchild was killed with the group"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_bounded_with_truncation_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path(), &["/bin/sh"], ApiConfig::default()).await;
    let max = TaskLimits::default().max_output_bytes;
    let script = format!(
        "head -c {} /dev/zero | tr '\\0' o; head -c {max} /dev/zero | tr '\\0' e >&2; printf x >&2",
        max + 1
    );
    let body = json!({"argv": ["sh", "-c", script]});
    let (_, created) = Req::post(&server, "big", &body.to_string())
        .send(&server)
        .await;
    let done = finished(&server, created["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "succeeded", "{}", done["error"]);
    let stdout = done["stdout"].as_str().unwrap();
    let stderr = done["stderr"].as_str().unwrap();
    assert_eq!(
        (stdout.len(), done["stdout_truncated"].as_bool()),
        (max, Some(true))
    );
    assert_eq!(
        (stderr.len(), done["stderr_truncated"].as_bool()),
        (max, Some(true))
    );
    assert!(stderr.ends_with("ex"), "stderr keeps its tail");
    // Exactly at the limit nothing is cut.
    let script = format!("head -c {max} /dev/zero | tr '\\0' o");
    let (_, created) = Req::post(
        &server,
        "exact",
        &json!({"argv": ["sh", "-c", script]}).to_string(),
    )
    .send(&server)
    .await;
    let done = finished(&server, created["id"].as_str().unwrap()).await;
    assert_eq!(done["stdout"].as_str().unwrap().len(), max);
    assert_eq!(done["stdout_truncated"], false);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_running_when_the_host_died_is_lost_and_never_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("runs.txt");
    let dir = tmp.path().join("d");
    let (running, queued) = {
        // A previous host accepted two tasks and had started the first when it died.
        let mut store = TaskStore::open(&dir).unwrap();
        let limits = TaskLimits::default();
        let req = |s: &str| {
            TaskRequest::parse(
                json!({"argv": ["sh", "-c", format!("echo {s} >> {}", file.display())]})
                    .to_string()
                    .as_bytes(),
                &limits,
            )
            .unwrap()
        };
        let submit =
            |store: &mut TaskStore, key: &str| match store.submit(key, &req(key), 10).unwrap() {
                agentwire_host::tasks::Submission::Created(t) => t.id,
                other => panic!("{other:?}"),
            };
        let running = submit(&mut store, "first");
        let queued = submit(&mut store, "second");
        assert_eq!(store.claim_next().unwrap().unwrap().id, running);
        (running, queued)
    };
    let server = Server::start(&dir, &["/bin/sh"], ApiConfig::default()).await;
    let lost = task(&server, running.as_str()).await;
    assert_eq!(
        (lost["status"].as_str(), lost["error"].as_str()),
        (Some("lost"), Some("host_interrupted"))
    );
    let done = finished(&server, queued.as_str()).await;
    assert_eq!(done["status"], "succeeded");
    server.stop().await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "second\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped() {
    let tmp = tempfile::tempdir().unwrap();
    let config = ApiConfig {
        max_connections: 2,
        header_read_timeout: Duration::from_secs(600),
        ..ApiConfig::default()
    };
    let server = Server::start(tmp.path(), &["/bin/echo"], config).await;
    let stalled = || async {
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        stream
            .write_all(b"GET /v1/tasks/x HTTP/1.1\r\n")
            .await
            .unwrap();
        stream
    };
    let first = stalled().await;
    let second = stalled().await;
    // Past the cap: a complete request on a third connection gets no answer, the connection is closed.
    let request = Req::new(&server, "GET", "/v1/tasks/task_0000000000000000").bytes();
    let mut third = TcpStream::connect(server.addr).await.expect("connect");
    let _ = third.write_all(&request).await;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(PATIENCE, third.read_to_end(&mut buf))
        .await
        .expect("the third connection is closed");
    assert!(
        buf.is_empty(),
        "{read:?} {:?}",
        String::from_utf8_lossy(&buf)
    );
    // Closing one frees its slot.
    drop(first);
    let served = async {
        loop {
            if raw_status(server.addr, &request).await == Some(404) {
                return;
            }
        }
    };
    tokio::time::timeout(PATIENCE, served)
        .await
        .expect("a slot is freed");
    drop(second);
    server.stop().await;
}

/// The status of one exchange, `None` when the connection was closed without an answer.
async fn raw_status(addr: SocketAddr, request: &[u8]) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream.write_all(request).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    String::from_utf8_lossy(&response)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_head_is_closed_by_the_header_read_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    // The timeout must elapse for the stalled head (a lower bound); the keep-alive request below is written right
    // after connecting and must beat it, so it is long enough that a loaded machine cannot delay that write past it.
    let config = ApiConfig {
        header_read_timeout: Duration::from_secs(5),
        ..ApiConfig::default()
    };
    let server = Server::start(tmp.path(), &["/bin/echo"], config).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream
        .write_all(b"GET /v1/tasks/x HTTP/1.1\r\nHost: ")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut buf))
        .await
        .expect("the server closes the stalled connection");
    assert!(
        !String::from_utf8_lossy(&buf).contains(" 200 "),
        "{read:?} {buf:?}"
    );
    // An idle keep-alive connection (one request answered, nothing after) is closed the same way.
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let request = Req::new(&server, "GET", "/v1/tasks/task_0000000000000000")
        .header("Connection", "keep-alive")
        .bytes();
    stream.write_all(&request).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut buf))
        .await
        .expect("the server closes the idle connection");
    assert!(String::from_utf8_lossy(&buf).contains(" 404 "), "{read:?}");
    server.stop().await;
}
