//! Assembles the lock's Lua scripts and hashes each one, so that lockrun
//! sends `EVALSHA` without hashing anything at start-up. Writes
//! `$OUT_DIR/scripts.rs`, which `src/lock/script.rs` includes: one `Lua`
//! static per script, with its whole text and its SHA-1 as Redis names it
//! (lower-case hex), and the link from the script's `Args` to it.
//!
//! A script is a file `src/lock/NAME.lua` whose first line is `--! script`,
//! or `--! script after A.lua B.lua` to put those parts in front of it; any
//! other `.lua` file there is a part. Each script is declared in
//! `src/lock/protocol.rs`, with its keys and arguments, from which this
//! writes the script's first lines: `local NAME = KEYS[i]` and
//! `local NAME = ARGV[j]`.

#[path = "src/lock/protocol.rs"]
#[allow(dead_code)]
mod protocol;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

use protocol::{Declared, Scope, Takes, DECLARED, LOCK_KEYS, WAKE};

/// What the first line of a script says.
const SCRIPT: &str = "--! script";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let dir = manifest.join("src/lock");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("scripts.rs");
    // A directory: a script added or removed counts too.
    println!("cargo:rerun-if-changed={}", dir.display());
    let files = lua_files(&dir);
    check(&files);
    let mut rust = String::from("// Written by build.rs from src/lock/; do not edit.\n");
    let mut statics = Vec::new();
    for (file, text) in &files {
        if let Some(parts) = parts_before(text) {
            statics.push(script(&mut rust, &files, file, &parts));
        }
    }
    writeln!(
        rust,
        "\n/// Every script.\n#[cfg(test)]\npub(crate) static ALL: [&Lua; {}] = [{}];",
        statics.len(),
        statics.join(", ")
    )
    .expect("writing to a String");
    fs::write(&out, rust).unwrap_or_else(|err| panic!("writing {}: {err}", out.display()));
}

/// That each declared script has its file, each script its declaration,
/// and each part a script that puts it in front of itself.
fn check(files: &BTreeMap<String, String>) {
    let scripts = || {
        files
            .iter()
            .filter_map(|(file, text)| Some((file, parts_before(text)?)))
    };
    for (file, _) in scripts() {
        let script = file.trim_end_matches(".lua");
        assert!(
            DECLARED.iter().any(|declared| declared.script == script),
            "src/lock/{file} is not declared in src/lock/protocol.rs"
        );
    }
    for declared in DECLARED {
        let file = format!("{}.lua", declared.script);
        assert!(
            scripts().any(|(script, _)| *script == file),
            "src/lock/protocol.rs declares {}, but src/lock/{file} is no script",
            declared.script
        );
    }
    for file in files.keys() {
        assert!(
            scripts().any(|(script, parts)| script == file || parts.contains(&file.as_str())),
            "src/lock/{file} is neither a script nor a part of one"
        );
    }
}

/// Writes to `rust` the static of the script in `file`, after `parts`, and
/// its link from its `Args`; returns a reference to the static.
fn script(
    rust: &mut String,
    files: &BTreeMap<String, String>,
    file: &str,
    parts: &[&str],
) -> String {
    let script = file.trim_end_matches(".lua");
    let declared = DECLARED
        .iter()
        .find(|declared| declared.script == script)
        .expect("checked");
    let mut code = header(declared);
    for part in parts.iter().chain([&file]) {
        let text = files
            .get(*part)
            .unwrap_or_else(|| panic!("src/lock/{file}: no part {part}"));
        code.push_str(text);
    }
    let name = script.to_uppercase();
    let sha = sha1_smol::Sha1::from(&code).digest();
    let of = if declared.borrows { "<'_>" } else { "" };
    // `{:?}` of a str is a Rust string literal of it.
    writeln!(
        rust,
        "\n/// {}: see `protocol::{}`.\npub(crate) static {name}: Lua = \
         Lua {{\n    name: {script:?},\n    code: {code:?},\n    sha: \"{sha}\",\n}};\n\n\
         impl Script for protocol::{}{of} {{\n    const LUA: &'static Lua = &{name};\n}}",
        assembly(file, parts),
        declared.rust,
        declared.rust,
    )
    .expect("writing to a String");
    format!("&{name}")
}

/// Every `.lua` file in `dir`, by name, with its text.
fn lua_files(dir: &Path) -> BTreeMap<String, String> {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()));
    let mut files = BTreeMap::new();
    for entry in entries {
        let path = entry
            .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
            .path();
        if path.extension().is_some_and(|ext| ext == "lua") {
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
            let name = path.file_name().expect("a file").to_string_lossy();
            files.insert(name.into_owned(), text);
        }
    }
    files
}

/// The parts a script puts in front of itself, from its first line;
/// `None` for a file that is a part.
fn parts_before(text: &str) -> Option<Vec<&str>> {
    let rest = text.lines().next()?.strip_prefix(SCRIPT)?;
    let parts = match rest.trim().strip_prefix("after") {
        Some(parts) => parts.split_whitespace().collect(),
        None if rest.trim().is_empty() => Vec::new(),
        None => panic!("a script's first line is `{SCRIPT}` or `{SCRIPT} after A.lua ...`"),
    };
    Some(parts)
}

/// A script's file, and the parts before it.
fn assembly(file: &str, parts: &[&str]) -> String {
    if parts.is_empty() {
        format!("`{file}`")
    } else {
        format!("`{file}`, after {}", parts.join(", "))
    }
}

/// The lines that name a script's keys and arguments.
fn header(declared: &Declared) -> String {
    let mut lines = String::from("-- Written by build.rs from src/lock/protocol.rs.\n");
    let keys: Vec<&str> = match declared.takes {
        Takes::Lock => LOCK_KEYS.iter().map(|key| key.lua).collect(),
        Takes::Parts(parts) => parts.iter().map(|part| part.key().lua).collect(),
        Takes::One => vec!["KEY"],
    };
    for (i, key) in keys.iter().enumerate() {
        writeln!(lines, "local {key} = KEYS[{}]", i + 1).expect("writing to a String");
    }
    let last = declared.argv.len();
    for (j, arg) in declared.argv.iter().enumerate() {
        let name = arg.to_uppercase();
        let line = if declared.rest && j + 1 == last {
            format!("local {name} = {{unpack(ARGV, {})}}", j + 1)
        } else {
            format!("local {name} = ARGV[{}]", j + 1)
        };
        lines.push_str(&line);
        lines.push('\n');
    }
    if declared.takes == Takes::Lock {
        let typed = |scope: Option<Scope>| {
            let keys: Vec<String> = LOCK_KEYS
                .iter()
                .filter(|key| scope.is_none_or(|scope| key.scope == scope))
                .map(|key| format!("{{{}, '{}'}}", key.lua, key.holds))
                .collect();
            keys.join(", ")
        };
        let crowd: Vec<&str> = LOCK_KEYS
            .iter()
            .filter(|key| key.scope == Scope::Crowd)
            .map(|key| key.lua)
            .collect();
        writeln!(lines, "local OURS = {{{}}}", typed(None)).expect("writing to a String");
        writeln!(lines, "local ALONE = {{{}}}", typed(Some(Scope::Alone)))
            .expect("writing to a String");
        writeln!(lines, "local CROWD = {{{}}}", crowd.join(", ")).expect("writing to a String");
    }
    if matches!(declared.takes, Takes::Lock | Takes::One) {
        writeln!(lines, "local WAKE = {WAKE:?}").expect("writing to a String");
    }
    lines
}
