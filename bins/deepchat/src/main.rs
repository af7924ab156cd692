//! The `deepchat` binary: collect argv and the environment, run one command, exit with its code.

use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("internal_error: cannot start the runtime: {error}");
            return ExitCode::from(8);
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    let code = runtime.block_on(async {
        let mut stdin = tokio::io::stdin();
        let mut stdout = std::io::stdout();
        let mut stderr = std::io::stderr();
        let output = deepchat::Output {
            stdout: &mut stdout,
            stderr: &mut stderr,
        };
        deepchat::run(&argv, &env, &mut stdin, output, interrupted()).await
    });
    ExitCode::from(code)
}

/// Resolves on the first SIGINT or SIGTERM; never, if the handlers cannot be installed.
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut interrupt), Ok(mut terminate)) => {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}
