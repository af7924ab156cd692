//! The `agentctl` binary: parse the configuration, bind, print the listening line, serve until SIGTERM/SIGINT.
//! Everything else is in the `agentwire-agentctl` library (`crates/agentctl`).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

/// At exit, how long agentctl waits for blocking work (fs requests on blocking threads) before exiting anyway.
const BLOCKING_SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> ExitCode {
    let mut config = agentwire_agentctl::Config::parse();
    // Every setting is checked before the runtime starts and the port is bound; a bad one is a usage error (2),
    // like the values clap refuses.
    if let Err(error) = config.load_token_file().and_then(|()| config.validate()) {
        eprintln!("agentctl: error: {error:#}");
        return ExitCode::from(2);
    }
    let filter = tracing_subscriber::EnvFilter::new(format!(
        "warn,agentctl={level},agentwire_agentctl={level}",
        level = config.log_level
    ));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agentctl: starting the runtime failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(serve(config));
    // Blocking work still stuck (a read the OS never completes) must not keep agentctl from exiting: dropping the
    // runtime would wait for it forever.
    runtime.shutdown_timeout(BLOCKING_SHUTDOWN_WAIT);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agentctl: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: agentwire_agentctl::Config) -> anyhow::Result<()> {
    let addr = config.listen_addr();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%bound, "listening");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "agentctl listening on {bound}").context("writing the listening line")?;
    stdout.flush().context("writing the listening line")?;
    drop(stdout);
    agentwire_agentctl::run(config, listener, shutdown_signal()).await
}

/// Resolves at SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::error!(%error, "cannot listen for SIGTERM; only Ctrl-C stops agentctl");
            // Ctrl-C is still handled below.
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
