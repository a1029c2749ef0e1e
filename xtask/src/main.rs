fn main() {
    eprintln!("xtask: no tasks yet");
    std::process::exit(2);
}
