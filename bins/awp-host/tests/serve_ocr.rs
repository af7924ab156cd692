//! `deepchat ocr status|extract|clear-cache` against `awp-host serve`, both real binaries, with images and a PDF
//! the test renders (Tesseract and poppler from the OS packages, installed by `cargo xtask ci`).

mod support;

use std::time::Duration;

use agentwire_process::{Child, StopPlan};
use agentwire_testkit::text_image;
use serde_json::{Value, json};
use support::{Host, Output, RUN_TIMEOUT, collect, read_until};

/// Text the 5×7 test font renders and Tesseract 5 reads back exactly.
const LINE: &str = "AGENT WIRE TEXT 42";

async fn serve(host: &Host, env: &[(&str, &str)]) -> Child {
    serve_args(host, &[], env).await
}

/// `awp-host serve --console off EXTRA…` with `env`, once it listens.
async fn serve_args(host: &Host, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let mut args = vec!["serve", "--console", "off"];
    args.extend_from_slice(extra);
    let mut child = host.spawn_with_env(&args, env);
    let mut stdout = child.take_stdout().expect("stdout");
    let line = read_until(&mut stdout, "\n").await;
    assert!(
        line.starts_with("awp-host: local control listening on "),
        "unexpected first line {line:?}"
    );
    child
}

async fn stop(child: Child) {
    let plan = StopPlan::new()
        .stdin_grace(Duration::ZERO)
        .term_grace(Duration::from_secs(30));
    let outcome = tokio::time::timeout(RUN_TIMEOUT, child.stop(plan))
        .await
        .expect("serve stops");
    assert_eq!(outcome.status.code_or_signal(), 0);
}

async fn deepchat(host: &Host, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = host.deepchat(args, env).spawn().expect("spawn deepchat");
    child.stdin().close().await;
    collect(&mut child).await
}

fn ok_result(out: &Output) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    let envelope = out.json();
    assert_eq!(envelope["ok"], true, "{out:?}");
    envelope["result"].clone()
}

fn error_of(out: &Output) -> Value {
    let lines = out.jsonl();
    let last = lines.last().expect("an envelope").clone();
    assert_eq!(last["ok"], false, "{out:?}");
    last["error"].clone()
}

fn write(host: &Host, name: &str, bytes: &[u8]) -> String {
    let path = host.path(name);
    std::fs::write(&path, bytes).expect("write input");
    path.display().to_string()
}

async fn agent_token(host: &Host) -> String {
    use agentwire_local_control::client::Client;
    use agentwire_local_control::descriptor::discover;
    use agentwire_local_control::envelope::RequestEnvelope;
    let descriptor = discover(&host.data).expect("descriptor");
    let token = descriptor.token.clone();
    let client = Client::from_descriptor(&descriptor, token).expect("client");
    let issued = client
        .rpc(
            &RequestEnvelope::new(
                "t",
                "agentTokens.issue",
                json!({"conversationId": "thread-1"}),
            ),
            RUN_TIMEOUT,
        )
        .await
        .expect("agent token");
    issued["token"].as_str().expect("token").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepchat_ocr_reaches_every_classification_through_serve() {
    let host = Host::new();
    host.agents_toml("");
    let server = serve(&host, &[]).await;

    let status = ok_result(&deepchat(&host, &["ocr", "status", "--json"], &[]).await);
    assert_eq!(status["availability"]["status"], "available");
    assert_eq!(status["process"]["state"], "idle");

    let png = write(
        &host,
        "line.png",
        &text_image::png(&text_image::render(&[LINE], 5)),
    );
    // --jsonl: one terminal envelope carrying the benchmark facts.
    let cold = deepchat(&host, &["ocr", "extract", "--file", &png, "--jsonl"], &[]).await;
    assert_eq!(cold.code, 0, "{cold:?}");
    let terminal = cold.jsonl().last().cloned().expect("terminal record");
    let result = &terminal["result"];
    assert_eq!(result["kind"], "image");
    assert!(
        result["text"].as_str().unwrap_or_default().contains(LINE),
        "{result}"
    );
    assert_eq!(result["benchmark"]["state"], "cold-runtime");
    assert_eq!(result["benchmark"]["runtimeStateBefore"], "idle");
    assert_eq!(result["benchmark"]["protocolVersion"], 1);
    assert_eq!(result["benchmark"]["surfaceVersion"], 2);
    assert!(
        result["engine"]["coreVersion"]
            .as_str()
            .unwrap_or_default()
            .starts_with("tesseract")
    );

    // Text mode: the text, then the summary with the spec's classification name.
    let hit = deepchat(&host, &["ocr", "extract", "--file", &png], &[]).await;
    assert_eq!(hit.code, 0, "{hit:?}");
    assert!(hit.stdout.contains(LINE), "{hit:?}");
    assert!(
        hit.stdout.contains("[cache-hit; runtime ready before"),
        "{hit:?}"
    );

    let cleared = ok_result(&deepchat(&host, &["ocr", "clear-cache", "--json"], &[]).await);
    assert_eq!(cleared["cache"]["entryCount"], 0);
    let warm =
        ok_result(&deepchat(&host, &["ocr", "extract", "--file", &png, "--json"], &[]).await);
    assert_eq!(warm["benchmark"]["state"], "miss-warm");
    assert_eq!(warm["benchmark"]["runtimeWasReady"], true);

    let pdf = write(
        &host,
        "doc.pdf",
        &text_image::pdf(&[
            text_image::render(&[LINE], 5),
            text_image::render(&["PAGE TWO"], 5),
        ]),
    );
    let document = ok_result(
        &deepchat(
            &host,
            &[
                "ocr",
                "extract",
                "--file",
                &pdf,
                "--page-count",
                "2",
                "--json",
            ],
            &[],
        )
        .await,
    );
    assert_eq!(document["kind"], "document");
    assert_eq!(document["emittedPages"], 2);
    assert!(
        document["text"]
            .as_str()
            .unwrap_or_default()
            .contains("PAGE TWO"),
        "{document}"
    );

    // Usage rules of DeepChat's args.ts.
    let both = deepchat(&host, &["ocr", "extract", "--json"], &[]).await;
    assert_eq!(both.code, 2, "{both:?}");
    let hint_on_image = deepchat(
        &host,
        &[
            "ocr",
            "extract",
            "--file",
            &png,
            "--max-tokens",
            "5",
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(hint_on_image.code, 2, "{hint_on_image:?}");
    let unknown = write(&host, "notes.txt", b"text");
    let no_mime = deepchat(
        &host,
        &["ocr", "extract", "--file", &unknown, "--json"],
        &[],
    )
    .await;
    assert_eq!(no_mime.code, 2, "{no_mime:?}");

    // Agents: status yes; clear-cache and uploads never.
    let token = agent_token(&host).await;
    let agent = [("DEEPCHAT_CLI_AGENT_TOKEN", token.as_str())];
    let status = deepchat(&host, &["ocr", "status", "--json"], &agent).await;
    assert_eq!(status.code, 0, "{status:?}");
    let clear = deepchat(&host, &["ocr", "clear-cache", "--json"], &agent).await;
    assert_eq!(clear.code, 4, "{clear:?}");
    assert_eq!(error_of(&clear)["code"], "permission_denied");
    let upload = deepchat(&host, &["ocr", "extract", "--file", &png, "--json"], &agent).await;
    assert_eq!(upload.code, 4, "{upload:?}");

    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepchat_ocr_upload_bound_at_the_limit_and_one_past() {
    let host = Host::new();
    host.agents_toml("");
    let server = serve(&host, &[]).await;
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.resize(50 * 1024 * 1024, 0);
    let at_limit = write(&host, "at.png", &bytes);
    let out = deepchat(
        &host,
        &["ocr", "extract", "--file", &at_limit, "--json"],
        &[],
    )
    .await;
    // Sent and read in full; the engine refuses garbage behind a PNG signature.
    assert_eq!(error_of(&out)["code"], "invalid_request", "{out:?}");
    bytes.push(0);
    let past = write(&host, "past.png", &bytes);
    let out = deepchat(&host, &["ocr", "extract", "--file", &past, "--json"], &[]).await;
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(error_of(&out)["code"], "body_too_large");
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tesseract_on_path_status_says_so_and_extract_is_unavailable() {
    let host = Host::new();
    host.agents_toml("");
    let empty = host.path("empty-path");
    std::fs::create_dir_all(&empty).expect("dir");
    let path = empty.display().to_string();
    let server = serve(&host, &[("PATH", path.as_str())]).await;

    let status = ok_result(&deepchat(&host, &["ocr", "status", "--json"], &[]).await);
    assert_eq!(status["availability"]["status"], "unavailable");
    assert_eq!(status["availability"]["reason"], "toolchain_unavailable");

    let png = write(
        &host,
        "line.png",
        &text_image::png(&text_image::render(&[LINE], 5)),
    );
    let out = deepchat(&host, &["ocr", "extract", "--file", &png, "--jsonl"], &[]).await;
    assert_eq!(out.code, 3, "{out:?}");
    let error = error_of(&out);
    assert_eq!(error["code"], "unavailable");
    assert_eq!(
        error["details"]["benchmark"]["classification"],
        "offline-availability"
    );
    assert_eq!(error["details"]["benchmark"]["runtimeStateBefore"], "idle");

    let text = deepchat(&host, &["ocr", "status"], &[]).await;
    assert!(
        text.stdout
            .contains("Availability: unavailable (toolchain_unavailable)"),
        "{text:?}"
    );
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_poppler_on_path_status_says_pdfs_are_unavailable_and_images_still_work() {
    let host = Host::new();
    host.agents_toml("");
    let only_tesseract = host.path("tesseract-only");
    std::fs::create_dir_all(&only_tesseract).expect("dir");
    let tesseract = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|dir| dir.join("tesseract"))
        .find(|candidate| candidate.is_file())
        .expect("tesseract on PATH");
    std::os::unix::fs::symlink(&tesseract, only_tesseract.join("tesseract")).expect("symlink");
    let path = only_tesseract.display().to_string();
    let server = serve(&host, &[("PATH", path.as_str())]).await;

    let status = ok_result(&deepchat(&host, &["ocr", "status", "--json"], &[]).await);
    assert_eq!(status["availability"]["status"], "available");
    assert_eq!(
        status["pdf"],
        json!({"available": false, "missing": ["pdfinfo", "pdftoppm"]})
    );
    let text = deepchat(&host, &["ocr", "status"], &[]).await;
    assert!(
        text.stdout
            .contains("PDF: unavailable (missing pdfinfo, pdftoppm)"),
        "{text:?}"
    );

    let png = write(
        &host,
        "line.png",
        &text_image::png(&text_image::render(&[LINE], 5)),
    );
    let image =
        ok_result(&deepchat(&host, &["ocr", "extract", "--file", &png, "--json"], &[]).await);
    assert!(
        image["text"].as_str().unwrap_or_default().contains(LINE),
        "{image}"
    );
    stop(server).await;

    // With poppler on PATH the same status says PDFs are available.
    let host = Host::new();
    host.agents_toml("");
    let server = serve(&host, &[]).await;
    let status = ok_result(&deepchat(&host, &["ocr", "status", "--json"], &[]).await);
    assert_eq!(status["pdf"], json!({"available": true, "missing": []}));
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_ocr_flags_choose_the_engine_and_its_language() {
    let host = Host::new();
    host.agents_toml("");
    let png = write(
        &host,
        "line.png",
        &text_image::png(&text_image::render(&[LINE], 5)),
    );

    // An engine path that names nothing: unavailable, never a crash.
    let missing = host.path("no-such-tesseract").display().to_string();
    let server = serve_args(&host, &["--ocr-tesseract", &missing], &[]).await;
    let status = ok_result(&deepchat(&host, &["ocr", "status", "--json"], &[]).await);
    assert_eq!(status["availability"]["status"], "unavailable", "{status}");
    let out = deepchat(&host, &["ocr", "extract", "--file", &png, "--json"], &[]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(error_of(&out)["code"], "unavailable");
    stop(server).await;

    // A language whose data is not installed: the extraction says so.
    let server = serve_args(&host, &["--ocr-language", "zzz"], &[]).await;
    let out = deepchat(&host, &["ocr", "extract", "--file", &png, "--json"], &[]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(error_of(&out)["code"], "unavailable");
    stop(server).await;

    // A malformed language is a usage error of serve itself.
    let out = host
        .run(&["serve", "--console", "off", "--ocr-language", "eng;rm"])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--ocr-language"), "{out:?}");
}
