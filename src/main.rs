//! The `lockrun` binary: everything lives in the library; this only hands the
//! process exit status back to the OS.

fn main() -> std::process::ExitCode {
    lockrun::main()
}
