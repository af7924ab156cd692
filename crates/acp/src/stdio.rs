//! Adapters from an `agentwire_process::Child`'s stdin/stdout to the `AsyncRead`/`AsyncWrite` pair a JSON-RPC
//! connection reads and writes: two small pump tasks over in-memory pipes.

use agentwire_process::{Stdin, Stdout, StdoutItem};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

/// Size of each in-memory pipe between a pump and the connection, in bytes.
const PIPE_BYTES: usize = 256 * 1024;

/// Spawns the pumps and returns (reader of the child's stdout, writer to the child's stdin).
///
/// The reader sees EOF when the child's stdout stream ends (EOF, or exit + drain window); closing the writer closes
/// the child's stdin. A failed stdin write ends the stdin pump (the connection's writer then fails too).
pub(crate) fn child_pipes(mut stdout: Stdout, stdin: Stdin) -> (DuplexStream, DuplexStream) {
    let (mut stdout_sink, stdout_reader) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(async move {
        while let Some(item) = stdout.next().await {
            let bytes = match item {
                StdoutItem::Bytes(bytes) => bytes,
                // The client asks for raw bytes; a framed item cannot occur, and is never silently mangled.
                other => {
                    tracing::warn!(?other, "unexpected framed stdout item; ending the stream");
                    break;
                }
            };
            if stdout_sink.write_all(&bytes).await.is_err() {
                break; // The connection's reader is gone; the child's output is no longer wanted.
            }
        }
        // Dropping the sink gives the reader EOF.
    });
    let (stdin_writer, mut stdin_source) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin_source.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let Some(chunk) = buf.get(..n) else { break };
                    if let Err(error) = stdin.write_all(chunk).await {
                        tracing::debug!(%error, "agent stdin write failed");
                        break;
                    }
                }
            }
        }
        stdin.close().await;
    });
    (stdout_reader, stdin_writer)
}
