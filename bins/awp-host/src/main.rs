//! Not built yet.

fn main() {
    eprintln!("awp-host: not built yet");
    std::process::exit(2);
}
