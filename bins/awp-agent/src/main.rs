//! Not built yet.

fn main() {
    eprintln!("awp-agent: not built yet");
    std::process::exit(2);
}
