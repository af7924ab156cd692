//! `awp-host tools list|call`: an operator runs an app bundle's declared tools exactly as an agent would.
//!
//! Parsing and rendering only; loading, validation, templating, execution and error mapping live in
//! `agentwire-cli-driver`. `--json` prints exactly one JSON object on every path after argument parsing
//! (success or failure); the exit status follows [`Exit::for_tool_code`].

use std::io::{IsTerminal, Read};
use std::path::Path;

use agentwire_cli_driver::{
    AppBundle, CallContext, CancellationToken, LoadError, Output, ToolError, ToolOutput,
};
use agentwire_host::store::escape_controls;
use serde_json::{Value, json};

use crate::Failure;
use crate::cli::{ToolsCallArgs, ToolsCommand};
use crate::commands::{line, print_out, table};
use crate::exit::Exit;

/// Largest `--input`, from the argument or stdin, in bytes (1 MiB); one byte more is `input_too_large` (exit 2).
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// A failure of a tools command, rendered as JSON with `--json` or as the usual stderr line.
struct ToolFailure {
    code: String,
    message: String,
    extra: serde_json::Map<String, Value>,
}

impl ToolFailure {
    fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            extra: serde_json::Map::new(),
        }
    }

    fn load(e: &LoadError) -> Self {
        let mut f = Self::new(e.code(), e.to_string());
        f.extra
            .insert("file".into(), json!(e.path.display().to_string()));
        f.extra.insert("line".into(), json!(e.line));
        f.extra.insert("field".into(), json!(e.field));
        f
    }

    fn tool(e: &ToolError) -> Self {
        let mut f = Self::new(e.code.as_str(), e.message.clone());
        f.extra.insert("retryable".into(), json!(e.retryable()));
        f.extra.insert("exit_code".into(), json!(e.exit_code));
        f.extra.insert("field".into(), json!(e.field));
        f.extra
            .insert("stdout_truncated".into(), json!(e.stdout_truncated));
        f.extra
            .insert("stderr_truncated".into(), json!(e.stderr_truncated));
        f
    }

    fn exit(&self) -> Exit {
        Exit::for_tool_code(&self.code)
    }

    fn json(&self) -> Value {
        let mut error = serde_json::Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        error.extend(self.extra.clone());
        Value::Object(error)
    }

    /// `--json`: the object on stdout and the exit status; else a [`Failure`] for the stderr line.
    fn report(
        self,
        as_json: bool,
        mut object: serde_json::Map<String, Value>,
    ) -> Result<Exit, Failure> {
        let exit = self.exit();
        if as_json {
            object.insert("error".into(), self.json());
            print_out(&format!("{}\n", Value::Object(object)))?;
            Ok(exit)
        } else {
            Err(Failure::new(exit, self.code, self.message))
        }
    }
}

/// Runs `tools list` or `tools call`.
///
/// # Errors
/// A [`Failure`] to print (human output), with its exit status.
pub async fn run(cmd: ToolsCommand) -> Result<Exit, Failure> {
    match cmd {
        ToolsCommand::List { app, json } => list(&app, json),
        ToolsCommand::Call(args) => call(args).await,
    }
}

fn list(app: &Path, as_json: bool) -> Result<Exit, Failure> {
    let bundle = match AppBundle::load(app) {
        Ok(bundle) => bundle,
        Err(e) => return ToolFailure::load(&e).report(as_json, serde_json::Map::new()),
    };
    if as_json {
        print_out(&format!("{}\n", list_json(&bundle)))?;
        return Ok(Exit::Ok);
    }
    let mut rows = vec![[
        "ID".to_owned(),
        "VERSION".to_owned(),
        "DRIVER".to_owned(),
        "MUTATES".to_owned(),
        "DESCRIPTION".to_owned(),
    ]];
    for tool in bundle.tools() {
        let driver = bundle
            .driver_for(&tool.id)
            .map_or_else(|| "-".to_owned(), |(d, _)| line(&d.manifest.id));
        rows.push([
            line(&tool.id),
            tool.version.to_string(),
            driver,
            if tool.mutates { "yes" } else { "no" }.to_owned(),
            line(&tool.description),
        ]);
    }
    let mut text = table(&rows, &[false; 5]);
    if bundle.tools().next().is_none() {
        text = format!(
            "no tools in {}/.agentproto/tools\n",
            line(&bundle.root().display().to_string())
        );
    }
    print_out(&text)?;
    Ok(Exit::Ok)
}

fn list_json(bundle: &AppBundle) -> Value {
    let path_var = std::env::var_os("PATH");
    let tools: Vec<Value> = bundle
        .tools()
        .map(|t| {
            let driver = bundle.driver_for(&t.id);
            json!({
                "id": t.id,
                "name": t.name,
                "description": t.description,
                "version": t.version.to_string(),
                "mutates": t.mutates,
                "risk_level": t.risk_level,
                "idempotent": t.idempotent,
                "tags": t.tags,
                "timeout_ms": t.timeout_ms,
                "inputs": t.inputs,
                "driver": driver.map(|(d, _)| d.manifest.id.clone()),
                "output_format": driver.map(|(_, imp)| imp.output_format.as_str()),
            })
        })
        .collect();
    let drivers: Vec<Value> = bundle
        .drivers()
        .map(|d| {
            json!({
                "id": d.manifest.id,
                "name": d.manifest.name,
                "bin": d.manifest.bin,
                "binary": d.resolve_binary(bundle.root(), path_var.as_deref()).map(|p| p.display().to_string()),
                "cwd": d.cwd.display().to_string(),
                "implements": d.manifest.implements.iter().map(|i| i.tool.clone()).collect::<Vec<_>>(),
                "secrets": d.manifest.secrets,
            })
        })
        .collect();
    json!({
        "app": bundle.root().display().to_string(),
        "tools": tools,
        "drivers": drivers,
    })
}

fn read_input(arg: &str) -> Result<Value, ToolFailure> {
    let text = if arg == "-" {
        if std::io::stdin().is_terminal() {
            return Err(ToolFailure::new(
                "input_unreadable",
                "--input - reads stdin, which is a terminal; pipe the JSON in",
            ));
        }
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolFailure::new("input_unreadable", format!("cannot read stdin: {e}")))?;
        if bytes.len() > MAX_INPUT_BYTES {
            return Err(ToolFailure::new(
                "input_too_large",
                format!("the input on stdin is larger than {MAX_INPUT_BYTES} bytes"),
            ));
        }
        String::from_utf8(bytes)
            .map_err(|_| ToolFailure::new("input_not_json", "the input on stdin is not UTF-8"))?
    } else {
        if arg.len() > MAX_INPUT_BYTES {
            return Err(ToolFailure::new(
                "input_too_large",
                format!("--input is larger than {MAX_INPUT_BYTES} bytes"),
            ));
        }
        arg.to_owned()
    };
    serde_json::from_str(&text)
        .map_err(|e| ToolFailure::new("input_not_json", format!("--input is not JSON: {e}")))
}

/// Cancels `token` on the first SIGINT, SIGTERM or SIGHUP.
fn cancel_on_signals(token: CancellationToken) -> Result<(), Failure> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let make = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::from_error(Exit::Protocol, "signal_handler", &e))
        };
        let (mut int, mut term, mut hup) = (
            make(SignalKind::interrupt())?,
            make(SignalKind::terminate())?,
            make(SignalKind::hangup())?,
        );
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
            token.cancel();
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            token.cancel();
        }
    });
    Ok(())
}

async fn call(args: ToolsCallArgs) -> Result<Exit, Failure> {
    let mut object = serde_json::Map::new();
    object.insert("ok".into(), json!(false));
    object.insert("tool".into(), json!(args.tool));
    let input = match read_input(&args.input) {
        Ok(input) => input,
        Err(f) => return f.report(args.json, object),
    };
    let bundle = match AppBundle::load(&args.app) {
        Ok(bundle) => bundle,
        Err(e) => return ToolFailure::load(&e).report(args.json, object),
    };
    let ctx = CallContext::from_process_env();
    cancel_on_signals(ctx.cancel.clone())?;
    let invocation = match bundle.prepare(&args.tool, &input, &ctx) {
        Ok(invocation) => invocation,
        Err(e) => return ToolFailure::tool(&e).report(args.json, object),
    };
    object.insert("driver".into(), json!(invocation.driver()));
    match invocation.run(&ctx.cancel).await {
        Ok(out) => render_output(&out, args.json, object),
        Err(e) => ToolFailure::tool(&e).report(args.json, object),
    }
}

fn render_output(
    out: &ToolOutput,
    as_json: bool,
    mut object: serde_json::Map<String, Value>,
) -> Result<Exit, Failure> {
    if as_json {
        object.insert("ok".into(), json!(true));
        object.insert("output".into(), out.output.to_value());
        let format = match out.output {
            Output::Json(_) => "json",
            Output::Text(_) => "text",
        };
        object.insert("output_format".into(), json!(format));
        object.insert("exit_code".into(), json!(out.exit_code));
        object.insert("stdout_truncated".into(), json!(out.stdout_truncated));
        object.insert("stderr".into(), json!(out.stderr));
        object.insert("stderr_truncated".into(), json!(out.stderr_truncated));
        print_out(&format!("{}\n", Value::Object(object)))?;
        return Ok(Exit::Ok);
    }
    let text = match &out.output {
        Output::Json(value) => {
            let pretty = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
            format!("{pretty}\n")
        }
        Output::Text(text) => escape_controls(text, false).into_owned(),
    };
    print_out(&text)?;
    if out.stdout_truncated {
        eprintln!("awp-host: note: the tool's output was truncated");
    }
    Ok(Exit::Ok)
}
