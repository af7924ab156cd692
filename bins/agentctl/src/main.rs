//! Not built yet.

fn main() {
    eprintln!("agentctl: not built yet");
    std::process::exit(2);
}
