//! The exposition format as lockrun writes and reads it: label escapes,
//! seconds kept exact to the microsecond, and a sample line taken apart.

/// Microseconds as seconds with six decimals, exactly.
pub(super) fn seconds(us: u64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// Seconds written as digits with an optional fraction, in microseconds
/// (beyond six decimals cut off); None for any other form.
pub(super) fn parse_seconds(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let fraction: String = fraction.chars().chain("000000".chars()).take(6).collect();
    let whole: u64 = whole.parse().ok()?;
    whole
        .checked_mul(1_000_000)?
        .checked_add(fraction.parse().ok()?)
}

/// A label value as the exposition format writes it.
pub(super) fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Label names and values, unescaped.
pub(super) type Labels = Vec<(String, String)>;

/// A sample line `name{label="value",...} value [timestamp]`: its name,
/// labels (unescaped) and value; None for comments and what does not parse.
pub(super) fn sample(line: &str) -> Option<(&str, Labels, &str)> {
    let (name, mut rest) = line.split_once('{')?;
    if !name.starts_with("lockrun_") {
        return None;
    }
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix('}') {
            let value = after.split_whitespace().next()?;
            return Some((name, labels, value));
        }
        let (label, after) = rest.split_once('=')?;
        let (value, after) = quoted(after.trim_start().strip_prefix('"')?)?;
        labels.push((label.trim().to_owned(), value));
        rest = after;
    }
}

/// A label value up to its closing quote, unescaped, and what follows it.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                c => value.push(c),
            },
            c => value.push(c),
        }
    }
    None
}
