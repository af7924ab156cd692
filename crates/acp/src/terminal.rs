//! Terminals for agents (`terminal/create|output|wait_for_exit|kill|release`): the [`TerminalHandler`] trait and
//! [`ProcessTerminals`], the provided implementation on agentwire-process.
//!
//! Source: ACP v1 "Terminals" (schema `$defs/CreateTerminalRequest` … `$defs/ReleaseTerminalRequest`):
//! `terminal/create {sessionId, command, args?, env?, cwd?, outputByteLimit?}` → `{terminalId}`;
//! `terminal/output` → `{output, truncated, exitStatus?}`; `terminal/wait_for_exit` → `{exitCode?, signal?}`;
//! `terminal/kill` stops the command and keeps its output; `terminal/release` kills it and forgets it.
//! When the output exceeds `outputByteLimit`, bytes are dropped from the beginning, at a character boundary.
//! [`OutputBuffer`] is the pure part.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    CreateTerminalRequest, CreateTerminalResponse, KillTerminalRequest, KillTerminalResponse,
    ReleaseTerminalRequest, ReleaseTerminalResponse, TerminalExitStatus, TerminalOutputRequest,
    TerminalOutputResponse, WaitForTerminalExitRequest, WaitForTerminalExitResponse,
};
use agentwire_jsonrpc::ErrorObject;
use agentwire_process::{ChildHandle, Command, ExitStatus, StdoutItem, StopPlan};

use crate::fs::RESOURCE_NOT_FOUND;
use crate::handlers::BoxFuture;

/// Serves the agent's `terminal/*` requests. Installing one makes the client advertise
/// `clientCapabilities.terminal: true`.
pub trait TerminalHandler: Send + Sync + 'static {
    /// `terminal/create`: start the command.
    fn create(
        &self,
        request: CreateTerminalRequest,
    ) -> impl Future<Output = Result<CreateTerminalResponse, ErrorObject>> + Send;
    /// `terminal/output`: the output so far, and the exit status once exited.
    fn output(
        &self,
        request: TerminalOutputRequest,
    ) -> impl Future<Output = Result<TerminalOutputResponse, ErrorObject>> + Send;
    /// `terminal/wait_for_exit`.
    fn wait_for_exit(
        &self,
        request: WaitForTerminalExitRequest,
    ) -> impl Future<Output = Result<WaitForTerminalExitResponse, ErrorObject>> + Send;
    /// `terminal/kill`: stop the command, keep the terminal.
    fn kill(
        &self,
        request: KillTerminalRequest,
    ) -> impl Future<Output = Result<KillTerminalResponse, ErrorObject>> + Send;
    /// `terminal/release`: stop the command if running, forget the terminal.
    fn release(
        &self,
        request: ReleaseTerminalRequest,
    ) -> impl Future<Output = Result<ReleaseTerminalResponse, ErrorObject>> + Send;
}

/// The last `limit` bytes of a command's output, cut at a UTF-8 character boundary. Sans-IO.
#[derive(Debug)]
pub struct OutputBuffer {
    bytes: Vec<u8>,
    limit: usize,
    dropped: bool,
}

impl OutputBuffer {
    /// Keeps at most `limit` bytes.
    pub fn new(limit: usize) -> OutputBuffer {
        OutputBuffer {
            bytes: Vec::new(),
            limit,
            dropped: false,
        }
    }

    /// Appends output. Memory stays under `2 * limit + chunk` bytes: the front is dropped in batches.
    pub fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit.saturating_mul(2).max(64 * 1024) {
            let cut = self.bytes.len() - self.limit;
            self.bytes.drain(..cut);
            self.dropped = true;
        }
    }

    /// The kept output (invalid UTF-8 replaced) and whether anything was dropped.
    pub fn snapshot(&self) -> (String, bool) {
        let mut start = self.bytes.len().saturating_sub(self.limit);
        let truncated = self.dropped || start > 0;
        // Never start inside a character: skip continuation bytes (0b10xxxxxx).
        while self
            .bytes
            .get(start)
            .is_some_and(|byte| byte & 0b1100_0000 == 0b1000_0000)
        {
            start += 1;
        }
        (
            String::from_utf8_lossy(self.bytes.get(start..).unwrap_or_default()).into_owned(),
            truncated,
        )
    }
}

/// Limits of [`ProcessTerminals`].
#[derive(Clone, Debug)]
pub struct TerminalLimits {
    /// Output kept when the request has no `outputByteLimit`, in bytes. Default 1 MiB.
    pub default_output_byte_limit: usize,
    /// Largest `outputByteLimit` honoured, in bytes. Default 16 MiB; a larger request is clamped to it.
    pub max_output_byte_limit: usize,
    /// Most terminals alive at once. Default 32; `terminal/create` past it is refused with -32603 and nothing runs.
    pub max_terminals: usize,
}

impl Default for TerminalLimits {
    fn default() -> Self {
        TerminalLimits {
            default_output_byte_limit: 1024 * 1024,
            max_output_byte_limit: 16 * 1024 * 1024,
            max_terminals: 32,
        }
    }
}

struct Terminal {
    child: ChildHandle,
    output: Arc<Mutex<OutputBuffer>>,
    /// Keeps the process: dropping a `Child` kills its group.
    _owner: agentwire_process::Child,
}

/// Runs terminal commands as agentwire-process children: no shell, own process group, the OS environment
/// allowlist plus the request's `env`. Output is the command's stdout; once the command has exited and its stdout
/// ended, the tail of its stderr (agentwire-process keeps the last 128 KiB) is appended.
#[derive(Default)]
pub struct ProcessTerminals {
    limits: TerminalLimits,
    next_id: AtomicU64,
    terminals: Mutex<HashMap<String, Arc<Terminal>>>,
}

impl std::fmt::Debug for ProcessTerminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTerminals")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn exit_status(status: ExitStatus) -> TerminalExitStatus {
    let signal = status.signal.map(|signal| format!("signal {signal}"));
    TerminalExitStatus::new()
        .exit_code(status.code.and_then(|code| u32::try_from(code).ok()))
        .signal(signal)
}

impl ProcessTerminals {
    /// Terminals with `limits`.
    pub fn new(limits: TerminalLimits) -> ProcessTerminals {
        ProcessTerminals {
            limits,
            next_id: AtomicU64::new(0),
            terminals: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, id: &str) -> Result<Arc<Terminal>, ErrorObject> {
        lock(&self.terminals)
            .get(id)
            .cloned()
            .ok_or_else(|| ErrorObject::new(RESOURCE_NOT_FOUND, format!("unknown terminal {id}")))
    }

    fn stop_plan() -> StopPlan {
        StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(2))
    }
}

impl TerminalHandler for ProcessTerminals {
    async fn create(
        &self,
        request: CreateTerminalRequest,
    ) -> Result<CreateTerminalResponse, ErrorObject> {
        if lock(&self.terminals).len() >= self.limits.max_terminals {
            return Err(ErrorObject::internal_error(format!(
                "at most {} terminals",
                self.limits.max_terminals
            )));
        }
        let limit = request
            .output_byte_limit
            .map_or(self.limits.default_output_byte_limit, |limit| {
                usize::try_from(limit).unwrap_or(usize::MAX)
            })
            .min(self.limits.max_output_byte_limit);
        let mut command = Command::new(&request.command);
        command.args(&request.args).inherit_os_env().stdout_bytes();
        for variable in &request.env {
            command.env(&variable.name, &variable.value);
        }
        if let Some(cwd) = &request.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|error| ErrorObject::internal_error(error.to_string()))?;
        let output = Arc::new(Mutex::new(OutputBuffer::new(limit)));
        let handle = child.handle();
        if let Some(mut stdout) = child.take_stdout() {
            let output = output.clone();
            let handle = handle.clone();
            tokio::spawn(async move {
                while let Some(item) = stdout.next().await {
                    if let StdoutItem::Bytes(bytes) = item {
                        lock(&output).push(&bytes);
                    }
                }
                handle.wait().await;
                let stderr = handle.stderr_tail();
                stderr.finished().await;
                let (tail, _) = stderr.snapshot();
                lock(&output).push(&tail);
            });
        }
        let id = format!("term-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        let terminal = Arc::new(Terminal {
            child: handle,
            output,
            _owner: child,
        });
        lock(&self.terminals).insert(id.clone(), terminal);
        Ok(CreateTerminalResponse::new(id))
    }

    async fn output(
        &self,
        request: TerminalOutputRequest,
    ) -> Result<TerminalOutputResponse, ErrorObject> {
        let terminal = self.get(&request.terminal_id.0)?;
        let (output, truncated) = lock(&terminal.output).snapshot();
        let status = terminal.child.try_wait().map(exit_status);
        Ok(TerminalOutputResponse::new(output, truncated).exit_status(status))
    }

    async fn wait_for_exit(
        &self,
        request: WaitForTerminalExitRequest,
    ) -> Result<WaitForTerminalExitResponse, ErrorObject> {
        let terminal = self.get(&request.terminal_id.0)?;
        let status = terminal.child.wait().await;
        Ok(WaitForTerminalExitResponse::new(exit_status(status)))
    }

    async fn kill(
        &self,
        request: KillTerminalRequest,
    ) -> Result<KillTerminalResponse, ErrorObject> {
        let terminal = self.get(&request.terminal_id.0)?;
        terminal.child.stop(ProcessTerminals::stop_plan()).await;
        Ok(KillTerminalResponse::new())
    }

    async fn release(
        &self,
        request: ReleaseTerminalRequest,
    ) -> Result<ReleaseTerminalResponse, ErrorObject> {
        let terminal = lock(&self.terminals).remove(&*request.terminal_id.0);
        let Some(terminal) = terminal else {
            return Err(ErrorObject::new(
                RESOURCE_NOT_FOUND,
                format!("unknown terminal {}", request.terminal_id),
            ));
        };
        terminal.child.stop(ProcessTerminals::stop_plan()).await;
        Ok(ReleaseTerminalResponse::new())
    }
}

/// Object-safe form of [`TerminalHandler`] for the client's dispatcher.
pub(crate) trait DynTerminalHandler: Send + Sync {
    fn handle(
        &self,
        method: &str,
        params: Option<serde_json::Value>,
    ) -> BoxFuture<'_, Result<serde_json::Value, ErrorObject>>;
}

fn parse<T: serde::de::DeserializeOwned>(
    params: Option<serde_json::Value>,
) -> Result<T, ErrorObject> {
    serde_json::from_value(params.unwrap_or(serde_json::Value::Null))
        .map_err(|error| ErrorObject::invalid_params(error.to_string()))
}

fn encode<T: serde::Serialize>(
    result: Result<T, ErrorObject>,
) -> Result<serde_json::Value, ErrorObject> {
    result.and_then(|value| {
        serde_json::to_value(value).map_err(|error| ErrorObject::internal_error(error.to_string()))
    })
}

impl<T: TerminalHandler> DynTerminalHandler for T {
    fn handle(
        &self,
        method: &str,
        params: Option<serde_json::Value>,
    ) -> BoxFuture<'_, Result<serde_json::Value, ErrorObject>> {
        let method = method.to_owned();
        Box::pin(async move {
            match method.as_str() {
                "terminal/create" => encode(self.create(parse(params)?).await),
                "terminal/output" => encode(self.output(parse(params)?).await),
                "terminal/wait_for_exit" => encode(self.wait_for_exit(parse(params)?).await),
                "terminal/kill" => encode(self.kill(parse(params)?).await),
                "terminal/release" => encode(self.release(parse(params)?).await),
                _ => Err(ErrorObject::method_not_found(&method)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: usize, chunks: &[&[u8]], expect: &str, expect_truncated: bool) {
        let mut buffer = OutputBuffer::new(limit);
        for chunk in chunks {
            buffer.push(chunk);
        }
        assert_eq!(
            buffer.snapshot(),
            (expect.to_owned(), expect_truncated),
            "limit {limit}"
        );
    }

    #[test]
    fn output_keeps_the_last_bytes_at_a_char_boundary() {
        check(5, &[b"hello"], "hello", false);
        check(5, &[b"hello!"], "ello!", true);
        check(5, &[b"he", b"llo"], "hello", false);
        // "é" is two bytes: one past the limit would start inside it, so the cut moves past it.
        check(5, &["aé".as_bytes(), b"xyz"], "éxyz", true);
        check(4, &["aé".as_bytes(), b"xyz"], "xyz", true);
        check(0, &[b"x"], "", true);
        check(0, &[], "", false);
    }

    #[test]
    fn memory_stays_bounded() {
        let mut buffer = OutputBuffer::new(10);
        for _ in 0..100_000 {
            buffer.push(b"0123456789");
        }
        assert!(buffer.bytes.len() <= 64 * 1024 + 10);
        assert_eq!(buffer.snapshot(), ("0123456789".to_owned(), true));
    }
}
