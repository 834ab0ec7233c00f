//! The `lockrun` binary: everything lives in the library, which blocks the
//! signals lockrun handles before it does anything else.

fn main() -> std::process::ExitCode {
    lockrun::main()
}
