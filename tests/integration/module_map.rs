//! src/lib.rs's module map is a rule, not a description: each module imports
//! only modules listed after it, and each of `lock`'s parts only the parts
//! listed after it. This reads the map and every file under src/ and names
//! each import that points the wrong way.

use std::fs;
use std::path::Path;

use crate::generated::{read, repo};

/// The names of a list in the map, in order: `//! - \`admin\`...` for the
/// top level, `//!   - \`lock/role\`...` for `lock`'s parts.
fn listed(lib: &str, bullet: &str, prefix: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|line| line.strip_prefix(bullet))
        .filter_map(|rest| rest.strip_prefix(&format!("`{prefix}")))
        .map(|rest| rest.split('`').next().unwrap_or_default().to_owned())
        .collect()
}

/// Every `.rs` file under `dir`, as a path relative to src/.
fn sources(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("read src/").path();
        let name = path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        let rel = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if path.is_dir() {
            sources(&path, &rel, out);
        } else if rel.ends_with(".rs") {
            out.push((rel, fs::read_to_string(&path).expect("read a source file")));
        }
    }
}

/// The first name of each path after `prefix` in `code`, comments left
/// out: `crate::lock::keys::Token` gives `lock` for `crate::`, and
/// `crate::{lock, report::Event}` gives `lock` and `report`.
fn imported(code: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
    {
        for (at, _) in line.match_indices(prefix) {
            let rest = &line[at + prefix.len()..];
            let group = rest
                .strip_prefix('{')
                .map(|group| group.split('}').next().unwrap_or(""));
            for path in group.map_or(vec![rest], |group| group.split(',').collect()) {
                let name: String = path
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.push(name);
            }
        }
    }
    names
}

/// The imports in `files` against `order`: `module(file)` names the module
/// a file belongs to (None: not held to this list), `prefixes` the paths
/// that name a module of the list.
fn backwards(
    order: &[String],
    files: &[(String, String)],
    module: impl Fn(&str) -> Option<String>,
    prefixes: impl Fn(&str) -> Vec<&'static str>,
) -> Vec<String> {
    let place = |name: &str| order.iter().position(|listed| listed == name);
    let mut wrong = Vec::new();
    for (file, code) in files {
        let Some(own) = module(file) else { continue };
        let Some(at) = place(&own) else {
            wrong.push(format!(
                "src/{file}: `{own}` is not in src/lib.rs's module map"
            ));
            continue;
        };
        for prefix in prefixes(file) {
            for name in imported(code, prefix) {
                if place(&name).is_some_and(|other| other < at) {
                    wrong.push(format!(
                        "src/{file}: `{own}` imports `{name}`, which the map lists before it"
                    ));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    wrong
}

#[test]
fn each_module_imports_only_modules_listed_after_it() {
    let lib = read("src/lib.rs");
    let order = listed(&lib, "//! - ", "");
    let parts = listed(&lib, "//!   - ", "lock/");
    assert!(
        order.len() > 10 && order.contains(&"lock".into()),
        "{order:?}"
    );
    assert!(
        parts.len() > 5 && parts.contains(&"server".into()),
        "{parts:?}"
    );
    let mut files = Vec::new();
    sources(&repo().join("src"), "", &mut files);
    let top = |file: &str| -> Option<String> {
        let first = file.split('/').next()?.trim_end_matches(".rs");
        (!["lib", "main"].contains(&first)).then(|| first.to_owned())
    };
    let mut wrong = backwards(&order, &files, top, |_| vec!["crate::"]);
    // Inside `lock`: `super::` names a part only in lock/'s own files.
    let part = |file: &str| -> Option<String> {
        let rest = file.strip_prefix("lock/")?;
        let first = rest.split('/').next()?.trim_end_matches(".rs");
        (first != "tests").then(|| first.to_owned())
    };
    let prefixes = |file: &str| -> Vec<&'static str> {
        if file.matches('/').count() == 1 {
            vec!["crate::lock::", "super::"]
        } else {
            vec!["crate::lock::"]
        }
    };
    wrong.extend(backwards(&parts, &files, part, prefixes));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
