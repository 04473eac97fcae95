//! Printing experiment rows as Markdown tables or JSON.

use serde::Serialize;

/// Renders a Markdown table from a header row and string cells.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    out.push_str(&format!("| {} |\n", header.join(" | ")));
    out.push_str(&format!(
        "|{}\n",
        header.iter().map(|_| "---|").collect::<String>()
    ));
    for r in rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out
}

/// A CSV field (RFC 4180): as it is, or quoted where it holds a comma, a
/// quote or a line break (server names such as `tokio, 1 worker` do).
pub fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        std::borrow::Cow::Owned(format!("\"{}\"", s.replace('"', "\"\"")))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Pretty JSON array of rows.
pub fn json<T: Serialize>(rows: &[T]) -> String {
    serde_json::to_string_pretty(rows).expect("rows serialize")
}

/// Writes `contents` to the file `path`; the error names the file (a full
/// disk said only "No space left on device (os error 28)"). Refused once
/// the run was interrupted ([`crate::interrupt::results_step`]).
pub fn write(path: &std::path::Path, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    crate::interrupt::results_step(|| std::fs::write(path, contents))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// Prints `text` and a newline on standard output. Once the reader has
/// gone (`duality bench http | head -1`), the rest is dropped quietly, as
/// Unix tools end on a closed pipe, where `println!` panicked: the run
/// goes on to its end (its results files are written first).
pub fn print(text: &str) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static GONE: AtomicBool = AtomicBool::new(false);
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        GONE.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            duality_rt::say!("duality: cannot write to standard output: {e}");
        }
    }
}

/// Formats a large number with thousands separators.
pub fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_error_names_the_file() {
        let p = std::path::Path::new("/proc/no-such-dir/x.json");
        let e = write(p, b"[]").unwrap_err().to_string();
        assert!(
            e.starts_with("cannot write /proc/no-such-dir/x.json: "),
            "{e}"
        );
    }

    #[test]
    fn csv_fields_are_quoted_where_they_must_be() {
        assert_eq!(csv_field("symped:2"), "symped:2");
        assert_eq!(csv_field("tokio, 2 workers"), "\"tokio, 2 workers\"");
        assert_eq!(csv_field("a \"b\""), "\"a \"\"b\"\"\"");
        assert_eq!(csv_field("x\ny"), "\"x\ny\"");
    }

    #[test]
    fn formats_thousands() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(12345678.4), "12,345,678");
        assert_eq!(thousands(-1234.0), "-1,234");
    }

    #[test]
    fn table_has_header_separator_and_rows() {
        let t = markdown_table(&["a", "b"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
