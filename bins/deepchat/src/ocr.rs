//! `deepchat ocr status|extract|clear-cache`: offline OCR commands.
//!
//! Source: DeepChat `src/cli/args.ts` (`ocr extract` takes `--file` or `--artifact`, `--mime` (only with
//! `--file`; else inferred from the extension, `OCR_MIME_BY_EXTENSION`), `--backend auto|cpu`, `--page-count`
//! and `--max-tokens` (PDF input only, at most 16 000)); `ocr status` and `ocr clear-cache` take no options.
//! `extract --file` uploads the file through `/v1/upload` (at most 50 MiB, `OCR_EXTRACTION_MAX_INPUT_BYTES`);
//! `extract --artifact` is an rpc call. Timeout classes: `extract` long-running (30 min), the others standard.

use std::fmt::Write as _;
use std::path::PathBuf;

use agentwire_local_control::contract::ocr::{self as wire, MimeType};
use clap::{Args, Subcommand};
use serde_json::{Map, Value};

use crate::command::{Globals, Invocation, NoOptions, Operation, TimeoutClass};

/// The `ocr` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum OcrVerb {
    /// Show offline OCR runtime and cache status (ocr.getRuntimeStatus).
    Status(NoOptions),
    /// Extract text from an image or PDF file, or an owned artifact (ocr.extractUpload / ocr.extractArtifact).
    Extract(ExtractArgs),
    /// Clear derived OCR cache entries (ocr.clearCache; refused while an extraction runs).
    ClearCache(NoOptions),
}

#[derive(Debug, Args)]
pub(crate) struct ExtractArgs {
    /// An image or PDF to upload (≤ 50 MiB).
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "artifact",
        conflicts_with = "artifact"
    )]
    file: Option<PathBuf>,
    /// An owned artifact id.
    #[arg(long, value_name = "ARTIFACT_ID")]
    artifact: Option<String>,
    /// Override the MIME type inferred from --file.
    #[arg(long, value_name = "TYPE")]
    mime: Option<String>,
    /// Select auto or cpu.
    #[arg(long, value_name = "VALUE")]
    backend: Option<String>,
    /// Provide a PDF page-count hint.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(wire::PAGE_COUNT_SANITY_LIMIT)))]
    page_count: Option<u32>,
    /// Limit PDF OCR output tokens (1..=16000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(wire::MAX_TOKENS)))]
    max_tokens: Option<u32>,
    #[command(flatten)]
    globals: Globals,
}

fn rpc(command: &'static str, method: &'static str, params: Value) -> Invocation {
    Invocation {
        command,
        method,
        params,
        stdin_field: None,
        operation: Operation::Rpc,
    }
}

/// The invocation of an `ocr` verb.
pub(crate) fn build(verb: OcrVerb) -> Result<(Globals, Invocation, TimeoutClass), String> {
    match verb {
        OcrVerb::Status(o) => Ok((
            o.globals,
            rpc(
                "ocr status",
                "ocr.getRuntimeStatus",
                Value::Object(Map::new()),
            ),
            TimeoutClass::Standard,
        )),
        OcrVerb::ClearCache(o) => Ok((
            o.globals,
            rpc(
                "ocr clear-cache",
                "ocr.clearCache",
                Value::Object(Map::new()),
            ),
            TimeoutClass::Standard,
        )),
        OcrVerb::Extract(a) => {
            let mut params = Map::new();
            if let Some(backend) = a.backend {
                if backend != "auto" && backend != "cpu" {
                    return Err("--backend must be auto or cpu".to_owned());
                }
                params.insert("backend".into(), backend.into());
            }
            if let Some(hint) = a.page_count {
                params.insert("sourcePageCountHint".into(), hint.into());
            }
            if let Some(limit) = a.max_tokens {
                params.insert("generationTokenLimit".into(), limit.into());
            }
            let invocation = match (a.file, a.artifact) {
                (Some(path), None) => {
                    let mime = match a.mime {
                        Some(mime) => {
                            let mime = mime.trim().to_ascii_lowercase();
                            if mime.is_empty() {
                                return Err("--mime must not be empty".to_owned());
                            }
                            mime
                        }
                        None => path
                            .extension()
                            .and_then(|e| e.to_str())
                            .and_then(MimeType::from_extension)
                            .map(|m| m.as_str().to_owned())
                            .ok_or("Cannot infer input MIME type; provide --mime <type>")?,
                    };
                    if mime != MimeType::Pdf.as_str()
                        && (a.page_count.is_some() || a.max_tokens.is_some())
                    {
                        return Err(
                            "--page-count and --max-tokens are only valid for PDF input".to_owned()
                        );
                    }
                    params.insert("mimeType".into(), mime.into());
                    let mut invocation =
                        rpc("ocr extract", "ocr.extractUpload", Value::Object(params));
                    invocation.operation = Operation::Upload {
                        path,
                        max_bytes: wire::MAX_INPUT_BYTES,
                    };
                    invocation
                }
                (None, Some(artifact)) => {
                    if a.mime.is_some() {
                        return Err("--mime is only valid together with --file".to_owned());
                    }
                    params.insert("artifactId".into(), artifact.into());
                    rpc("ocr extract", "ocr.extractArtifact", Value::Object(params))
                }
                _ => {
                    return Err(
                        "deepchat ocr extract requires exactly one of --file or --artifact"
                            .to_owned(),
                    );
                }
            };
            Ok((a.globals, invocation, TimeoutClass::LongRunning))
        }
    }
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Text for an OCR result: the text, then a one-line summary with the spec's benchmark classification; the
/// status and cache as `label: value` lines.
pub(crate) fn render(method: &str, result: &Value) -> Option<String> {
    let mut out = String::new();
    match method {
        "ocr.getRuntimeStatus" => {
            let availability = &result["availability"];
            let _ = writeln!(
                out,
                "Platform: {}/{}",
                s(result, "platform"),
                s(result, "arch")
            );
            let _ = write!(out, "Availability: {}", s(availability, "status"));
            if let Some(reason) = availability.get("reason").and_then(Value::as_str) {
                let _ = write!(out, " ({reason})");
            }
            out.push('\n');
            if let Some(pdf) = result.get("pdf").filter(|p| p.is_object()) {
                if pdf["available"] == true {
                    out.push_str("PDF: available\n");
                } else {
                    let missing: Vec<&str> = pdf["missing"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    if missing.is_empty() {
                        out.push_str("PDF: unavailable\n");
                    } else {
                        let _ = writeln!(out, "PDF: unavailable (missing {})", missing.join(", "));
                    }
                }
            }
            let process = &result["process"];
            if process.is_object() {
                let _ = writeln!(out, "Runtime: {}", s(process, "state"));
                if let Some(engine) = process.get("engine").filter(|e| e.is_object()) {
                    let _ = writeln!(
                        out,
                        "Engine: {} ({})",
                        s(engine, "coreVersion"),
                        s(engine, "modelBundleId")
                    );
                }
            }
            cache_line(&mut out, &result["cache"]);
        }
        "ocr.clearCache" => {
            out.push_str("OCR cache cleared\n");
            cache_line(&mut out, &result["cache"]);
        }
        "ocr.extractUpload" | "ocr.extractArtifact" => {
            let text = s(result, "text");
            out.push_str(text);
            if !text.is_empty() && !text.ends_with('\n') {
                out.push('\n');
            }
            let benchmark = &result["benchmark"];
            let classification = match s(benchmark, "state") {
                "hit" => wire::BenchmarkState::Hit.spec_name(),
                "miss-warm" => wire::BenchmarkState::MissWarm.spec_name(),
                _ => wire::BenchmarkState::ColdRuntime.spec_name(),
            };
            let pages = result
                .get("emittedPages")
                .and_then(Value::as_u64)
                .map(|n| format!(", {n} page(s)"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "[{classification}; runtime {} before{pages}; {} chars, {} tokens{}; {:.0} ms; {}]",
                s(benchmark, "runtimeStateBefore"),
                text.chars().count(),
                result["tokenCount"],
                if result["truncated"].as_bool() == Some(true) {
                    ", truncated"
                } else {
                    ""
                },
                benchmark["durationMs"].as_f64().unwrap_or(0.0),
                s(&result["engine"], "coreVersion"),
            );
        }
        _ => return None,
    }
    Some(out)
}

fn cache_line(out: &mut String, cache: &Value) {
    if cache.is_object() {
        let _ = writeln!(
            out,
            "Cache: {} entries, {} of {} bytes ({})",
            cache["entryCount"],
            cache["logicalBytes"],
            cache["maxBytes"],
            s(cache, "mode")
        );
    }
}
